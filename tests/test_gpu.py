"""GPU parts (marker `gpu`): skipped, with the reason, on machines without a CUDA GPU.

docs/gpu.md's recipe: vLLM runs as its own OpenAI-compatible server from a separate environment
(its releases pin torch / transformers against the project's), and `backend: openai` generates
through it. These tests start that server on a tiny model and check that greedy generation agrees
with the transformers backend, for the model itself and for a LoRA child whose adapter is loaded
into the server for its evaluation (evaluators/served.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager

import pytest




def _why_skip() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU (none on this machine); run on a GPU machine with docs/gpu.md's vLLM environment"
    if not os.environ.get("AGENT_VLLM_PYTHON"):
        return "set AGENT_VLLM_PYTHON to the python of vLLM's own environment (docs/gpu.md)"
    return None


REASON = _why_skip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _vllm_server(model, monkeypatch, *extra: str, env: dict | None = None):
    """docs/gpu.md's server on `model`, its address in OPENAI_BASE_URL for the block."""
    port = _free_port()
    server = subprocess.Popen([os.environ["AGENT_VLLM_PYTHON"], "-m", "vllm.entrypoints.openai.api_server",
                               "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
                               "--max-model-len", "512", "--gpu-memory-utilization", "0.2", *extra],
                              env={**os.environ, **(env or {})})
    try:
        for _ in range(300):  # the server loads in tens of seconds
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(1)
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "local")
        yield port
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.gpu
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_openai_backend_generates_through_a_vllm_server(tmp_path, monkeypatch):
    from evaluators import tasks
    from evaluators.generate import generate
    from test_generate import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    with _vllm_server(model, monkeypatch):
        prompts = [x["messages"] for x in tasks.items("captrack", "test", 0, n=6)]
        served = generate(str(model), prompts, backend="openai", max_new_tokens=8)
        local = generate(str(model), prompts, backend="transformers", max_new_tokens=8)
        assert sum(a == b for a, b in zip(served, local)) >= 5  # greedy on both sides, float noise aside


def _lora_child(base, out):
    """A LoRA child of `base` as trainers publish one: merged weights, and the adapter under adapter/."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(1)
    net = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                         LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    net.save_pretrained(out / "adapter")
    net.merge_and_unload().save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


@pytest.mark.gpu
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_a_lora_child_is_evaluated_on_the_served_base_with_its_adapter_loaded(tmp_path, monkeypatch):
    import json

    from evaluators import evaluate
    from evaluators.scoring.suites import parse_generations
    from test_generate import build_tiny_model
    from trainers.checkpoint import adapter_of

    base = build_tiny_model(tmp_path / "tiny")
    child = _lora_child(base, tmp_path / "child")
    with _vllm_server(base, monkeypatch, "--enable-lora", "--max-lora-rank", "8",
                      env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}) as port:
        served = evaluate(str(child), ["captrack"], "test", out_dir=tmp_path / "served", backend="openai", n=6,
                          adapter_dir=adapter_of(child))
        listed = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5).read())
    local = evaluate(str(child), ["captrack"], "test", out_dir=tmp_path / "local", n=6)
    assert [m["id"] for m in listed["data"]] == [str(base)]  # unloaded after the evaluation
    assert served["captrack"].identity.model_sha256 == local["captrack"].identity.model_sha256
    gens = [parse_generations((tmp_path / d / "captrack.test.generations.jsonl").read_text())[1]
            for d in ("served", "local")]
    assert sum(a == b for a, b in zip(*gens)) >= 5  # base + adapter on the server = the merged child, float noise aside


def test_the_gpu_extra_is_pinned_and_the_marker_registered():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extra = project["project"]["optional-dependencies"]["gpu"]
    # an unpinned requirement is what made the extra unresolvable (vllm took any torch)
    assert extra and all("==" in r for r in extra) and not any(r.startswith("vllm") for r in extra)
    markers = project["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("gpu:") for m in markers)
