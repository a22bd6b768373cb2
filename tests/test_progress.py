from agent.progress import lines


def test_quiet_progress_logs_start_each_tenth_and_end_once():
    said = []
    with lines("seed bank", said.append) as progress:
        for done in [0, 0, 1, 2, 3, 3, 10, 20, 21, 33]:
            progress("runs", done, 33)
    assert said == ["seed bank: runs 0/33", "seed bank: runs 3/33", "seed bank: runs 21/33", "seed bank: runs 33/33"]
