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
