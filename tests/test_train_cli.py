"""`agent train` in-process: a trial from explicit --data prints its TrainResult JSON."""

from __future__ import annotations

import json

from agent.cli.main import main
from test_train_world import build_parent, card, sft_examples


def test_agent_train_prints_the_result(tmp_path, capsys):
    parent = build_parent(tmp_path / "parent")
    (tmp_path / "card.json").write_text(card("sft", steps=10).model_dump_json())
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sft_examples(32)))
    code = main(["train", "--card", str(tmp_path / "card.json"), "--parent", str(parent), "--fraction", "0.2",
                 "--data", str(tmp_path / "pool.jsonl"), "--out", str(tmp_path / "trial"), "--threads", "1"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and printed["steps"] == 2 and printed["never_promotable"] is True
    assert main(["train", "--card", str(tmp_path / "nope.json"), "--parent", str(parent), "--out", "x"]) == 2
