"""GPU parts (marker `gpu`): skipped, with the reason, on machines without a CUDA GPU.

docs/gpu.md's recipe: vLLM runs as its own OpenAI-compatible server from a separate environment
(its releases pin torch / transformers against the project's), and `backend: openai` generates
through it. This test starts that server on a tiny model and checks greedy generation agrees
with the transformers backend.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request

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


@pytest.mark.gpu
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_openai_backend_generates_through_a_vllm_server(tmp_path, monkeypatch):
    from evaluators import tasks
    from evaluators.generate import generate
    from test_generate import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    port = _free_port()
    server = subprocess.Popen([os.environ["AGENT_VLLM_PYTHON"], "-m", "vllm.entrypoints.openai.api_server",
                               "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
                               "--max-model-len", "512", "--gpu-memory-utilization", "0.2"])
    try:
        for _ in range(300):  # the server loads in tens of seconds
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(1)
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "local")
        prompts = [x["messages"] for x in tasks.items("captrack", "test", 0, n=6)]
        served = generate(str(model), prompts, backend="openai", max_new_tokens=8)
        local = generate(str(model), prompts, backend="transformers", max_new_tokens=8)
        assert sum(a == b for a, b in zip(served, local)) >= 5  # greedy on both sides, float noise aside
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_the_gpu_extra_is_pinned_and_the_marker_registered():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extra = project["project"]["optional-dependencies"]["gpu"]
    # an unpinned requirement is what made the extra unresolvable (vllm took any torch)
    assert extra and all("==" in r for r in extra) and not any(r.startswith("vllm") for r in extra)
    markers = project["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("gpu:") for m in markers)
