from agent.progress import lines


def test_quiet_progress_logs_start_each_tenth_and_end_once():
    said = []
    with lines("seed bank", said.append) as progress:
        for done in [0, 0, 1, 2, 3, 3, 10, 20, 21, 33]:
            progress("runs", done, 33)
    assert said == ["seed bank: runs 0/33", "seed bank: runs 3/33", "seed bank: runs 21/33", "seed bank: runs 33/33"]


def test_no_live_display_when_quiet_or_stdout_is_not_a_terminal(monkeypatch):
    import io

    from agent.progress import live_display, reporter

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert not live_display(False) and not live_display(True)
    said = []
    with reporter("world test", False, said.append) as progress:  # redirected: log lines, not a bar
        progress("pretrain", 150, 150)
    assert said == ["world test: pretrain 150/150"]
    monkeypatch.setattr("sys.stdout", Tty())
    assert live_display(False) and live_display(None) and not live_display(True)
