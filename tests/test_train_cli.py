"""`agent train` in-process: a trial from explicit --data prints its TrainResult JSON."""

from __future__ import annotations

import json

import pytest

from agent.cli.main import main
from experience_bank.errors import BadInput
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


def _inputs(tmp_path, capsys):
    """A trial's argv on valid inputs (what the parent's save printed is dropped)."""
    parent = build_parent(tmp_path / "parent")
    (tmp_path / "card.json").write_text(card("sft", steps=10).model_dump_json())
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sft_examples(32)))
    capsys.readouterr()
    return ["train", "--card", str(tmp_path / "card.json"), "--parent", str(parent), "--fraction", "0.2",
            "--data", str(tmp_path / "pool.jsonl"), "--out", str(tmp_path / "trial"), "--threads", "1"]


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
def test_a_seed_out_of_range_leaves_no_run_key_behind(tmp_path, monkeypatch, capsys, seed):
    """numpy refused the seed only inside the trainer, after `<out>.work/run_key` was written: a
    traceback, and the corrected command was then refused as another run."""
    argv = _inputs(tmp_path, capsys)
    assert main([*argv, "--seed", str(seed)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"agent: error: seed {seed} is not an integer in 0..{2**32 - 1}: pass --seed N in that range"]
    assert not (tmp_path / "trial").exists() and not (tmp_path / "trial.work").exists()
    ran = []  # the corrected command gets past its checks to the trainer (not run here: no training)
    monkeypatch.setattr("trainers.run.train", lambda *a, **k: ran.append(k["seed"]) or _Printed())
    assert main([*argv, "--seed", "7"]) == 0 and ran == [7]


class _Printed:
    def model_dump_json(self) -> str:
        return "{}"


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
def test_the_trainer_checks_the_seed_before_it_writes(tmp_path, seed):
    """A library caller of trainers.run.train hit the same trap: the seed is checked first."""
    from trainers.run import train

    parent = build_parent(tmp_path / "parent")
    with pytest.raises(BadInput, match=r"seed .* is not an integer in 0\.\.4294967295"):
        train(card("sft", steps=10), str(parent), sft_examples(32), out_dir=str(tmp_path / "trial"), run_key="k",
              fraction=0.2, seed=seed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


@pytest.mark.parametrize("flag, value, said", [
    ("--world-seed", "-1", "world seed -1 is not an integer in 0..2147483647: pass --world-seed N"),
    ("--world-seed", str(2**64), f"world seed {2**64} is not an integer in 0..2147483647: pass --world-seed N"),
    ("--threads", "0", "--threads 0 is refused (Input should be greater than or equal to 1)"),
    ("--threads", "-1", "--threads -1 is refused (Input should be greater than or equal to 1)"),
])
def test_a_world_seed_or_thread_count_out_of_range_is_refused_before_training(tmp_path, capsys, flag, value, said):
    """--world-seed -1 trained on (the world refuses it everywhere else); --threads -1 was a traceback
    from torch.set_num_threads and --threads 0 was silently taken."""
    argv = _inputs(tmp_path, capsys)
    assert main([*argv, flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not (tmp_path / "trial").exists() and not (tmp_path / "trial.work").exists()
