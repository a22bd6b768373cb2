"""`agent authorize --features` end to end, in-process."""

import json

from agent.cli.main import main


def test_features_jsonl(tmp_path, capsys):
    rows = [dict(grade="A", delta_src=2.0, kappa=2.0, family=1, data=1, runtime=1, parent=1, protocol=0.5, H=0,
                 nu="continue", chi=1, is_new=False),
            dict(grade=None, delta_src=None, kappa=None, family=1, data=1, runtime=1, parent=1, protocol=1, H=1,
                 nu="restart", chi=0, is_new=True)]
    path = tmp_path / "f.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["authorize", "--features", str(path), "--policy", "bcit", "--json"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(o["S"], o["A"], o["Q"], o["action"], o["rule"]) for o in out] == [
        (1.0, 0.9, 0.9, "train", "bcit.replicated_above_tau_h"), (None, 1.0, None, "reject", "bcit.new_hard_conflict")]


def test_bad_row_exits_2(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_text('{"grade": "A"}\n')
    assert main(["authorize", "--features", str(path), "--json"]) == 2


def test_row_errors_name_the_file_line_and_field(tmp_path, capsys):
    good = dict(grade="A", delta_src=2.0, kappa=2.0, family=1, data=1, runtime=1, parent=1, protocol=0.5, H=0,
                nu="continue", chi=1, is_new=False)
    path = tmp_path / "f.jsonl"
    for change, needle in [({"H": True}, "line 2: invalid features row: field H"),
                           ({"is_new": 0}, "field is_new"), ({"conflicted": "yes"}, "field conflicted"),
                           ({"conflicts": "stage"}, "field conflicts"), ({"grade": "D"}, "field grade"),
                           ({"delta_src": None}, "needs grade, delta_src and kappa"), ({"chi": 0.5}, "field chi")]:
        path.write_text(json.dumps(good) + "\n" + json.dumps(good | change) + "\n")
        assert main(["authorize", "--features", str(path), "--json"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"features file {path}" in err[0] and needle in err[0], err


def test_a_reader_that_stops_early_gets_no_traceback():
    # `agent replay retrospective-24 --json | head -c 1`: the pipe's reader is gone before the first
    # write. The command ends quietly with a SIGPIPE death's code, as a C tool would, not a traceback.
    import os
    import signal
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "agent", "replay", "retrospective-24", "--json"],
                              stdout=write_end, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 128 + signal.SIGPIPE and done.stderr == b""
