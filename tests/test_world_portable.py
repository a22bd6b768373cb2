"""Portable numerics (agent/world/portable.py): with AGENT_WORLD_NUMERICS=portable the base is built
in a child pinned to one kernel path, so the world id and the weights do not depend on the kernels
the caller's process runs (what differs between kinds of CPU)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent.world import pinned, portable
from agent.world.embedded import native_env
from experience_bank.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                                reason="portable numerics need an x86-64 CPU with AVX2")


def test_the_mode_is_native_unless_set_and_a_bad_value_is_refused(monkeypatch):
    monkeypatch.delenv(portable.NUMERICS_VAR, raising=False)
    assert portable.numerics_mode() == "native"
    monkeypatch.setenv(portable.NUMERICS_VAR, "portable")
    assert portable.numerics_mode() == "portable"
    monkeypatch.setenv(portable.NUMERICS_VAR, "fast")
    with pytest.raises(BadInput, match="AGENT_WORLD_NUMERICS='fast': set it to native or portable"):
        portable.numerics_mode()


def test_a_cpu_without_the_pinned_path_is_refused(monkeypatch):
    # the hardware boundary: torch reporting a kernel level below AVX2
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    with pytest.raises(BadInput, match="cannot run: unset AGENT_WORLD_NUMERICS"):
        pinned._check_pinned()


# A tiny build of the test-size recipe (6 steps) through ensure_world, in a fresh process whose own
# kernels the test chooses; it prints the world id, the recorded build environment and the weights' hash.
BUILD = """
import json, sys
from dataclasses import replace
import agent.world.embedded as e
e.RECIPES["test"] = replace(e.RECIPES["test"], steps=6, early_step=3)
if sys.argv[1:] == ["id"]:  # the id alone, nothing built
    print(json.dumps({"id": e.recipe_sha256(e.recipe_for("test")), "build": {"cpu": e.build_env().cpu}}))
    sys.exit(0)
w = e.ensure_world("test")
print(json.dumps({"id": w.recipe_sha256, "sha": w.model.sha256, "early": w.early_model.sha256,
                  "build": {"cpu": w.build.cpu, "numerics": w.build.numerics}}))
"""


def _tiny_world(cache: Path, env: dict[str, str], *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", BUILD, *args], capture_output=True, text=True, cwd=ROOT,
                          env=os.environ | {"PYTHONPATH": str(ROOT), "AGENT_CACHE": str(cache),
                                            "OMP_NUM_THREADS": "1"} | env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_portable_world_is_the_same_whatever_kernels_the_caller_runs(tmp_path):
    """Two callers on different kernel paths (torch's generic kernels and MKL's default, against the
    machine's own) build one portable world: the same id and the same weights, and the id names the
    pinned child's environment; a native build under the first caller's kernels is another world."""
    mine = {portable.NUMERICS_VAR: "portable"}
    a = _tiny_world(tmp_path / "a", mine)
    b = _tiny_world(tmp_path / "b", mine | {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AUTO"})
    assert (a["id"], a["sha"], a["early"]) == (b["id"], b["sha"], b["early"])
    assert a["build"] == {"cpu": "AVX2", "numerics": portable.pinned_env()["numerics"]}
    native = _tiny_world(tmp_path / "c", {portable.NUMERICS_VAR: "native", "ATEN_CPU_CAPABILITY": "default"}, "id")
    assert native["id"] != a["id"] and native["build"]["cpu"] == "DEFAULT"


def test_the_pinned_child_reports_its_own_environment_not_the_caller_s():
    pinned = portable.pinned_env()
    assert pinned["cpu"] == "AVX2" and pinned["machine"] == native_env().machine
    assert pinned["libraries"] == native_env().libraries
    if torch.backends.mkl.is_available():  # MKL's vendor-independent path rounds unlike its default
        assert pinned["numerics"] != native_env().numerics or os.environ.get("MKL_CBWR") == "COMPATIBLE"


def test_a_bad_mode_is_one_line_and_exit_2_with_nothing_built(tmp_path, monkeypatch, capsys):
    from agent.cli.main import main

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path))
    monkeypatch.setenv(portable.NUMERICS_VAR, "fast")
    assert main(["world", "build", "--size", "test"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["agent: error: AGENT_WORLD_NUMERICS='fast': set it to native or portable, or unset it"]
    assert not (tmp_path / "worlds").exists() or not any((tmp_path / "worlds").iterdir())
