"""Portable numerics: a world build whose weights do not depend on which x86-64 CPU ran it.

A native build's bits depend on the machine: torch picks its vectorised kernels by the CPU's
level (AVX2, AVX512) and MKL picks its matrix kernels by vendor (docs/world-identity.md), so
the same recipe and seed build another base, hence another world id, on another kind of CPU.
A measurement that takes hours (a seeded retrospective) then resumes only on the kind it
started on. With `AGENT_WORLD_NUMERICS=portable` the base is pretrained in a child process
pinned to one kernel path that every x86-64 CPU with AVX2 runs the same way:

- `ATEN_CPU_CAPABILITY=avx2`: torch's AVX2 kernels (the same code on an AVX512 CPU);
- `MKL_CBWR=COMPATIBLE`: MKL's vendor-independent path (Intel's conditional numerical
  reproducibility mode; its other branches are ignored on AMD: measured, bench/numerics.py);
- the recipe's thread count (1), as every build.

The world id then hashes the pinned child's environment and numerics fingerprint, which are the
same on every such machine; the base weights hash, which every result names, is still checked,
so a machine that builds other bits is refused rather than mixed in. What runs after the build
(the seed bank, every training run and evaluation) keeps native kernels: a cell measured on two
kinds of CPU is two samples of one card on one world, not one run repeated.

Cost, measured on a 2-core AMD EPYC (AVX2), two builds side by side on one thread each: 1.66 s
per pretraining step pinned against 0.79 s native (the first 200 steps of the default recipe),
so a default build takes about twice as long; the default stays native (README's first
`make run`), and the development worlds' measurements (`make worlds`) use portable numerics.

The child is agent/world/pinned.py (`python -m agent.world.pinned env | build RECIPE_JSON OUT_DIR`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from experience_bank.errors import BadInput

NUMERICS_VAR = "AGENT_WORLD_NUMERICS"
"""Environment variable choosing how worlds are built: `native` (unset) or `portable`."""

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
"""The kernel path a portable build runs on (set before torch loads, so only in a child)."""


def numerics_mode() -> str:
    """`native` or `portable`, from $AGENT_WORLD_NUMERICS (unset or empty: native)."""
    mode = os.environ.get(NUMERICS_VAR, "") or "native"
    if mode not in ("native", "portable"):
        raise BadInput(f"{NUMERICS_VAR}={mode!r}: set it to native or portable, or unset it")
    return mode


def child_env(threads: int = 1) -> dict[str, str]:
    """The pinned child's environment: the caller's, with the kernel path and threads fixed and
    the mode set to native (the child *is* the pinned build)."""
    return os.environ | PINNED | {NUMERICS_VAR: "native", "OMP_NUM_THREADS": str(threads),
                                  "MKL_NUM_THREADS": str(threads)}


def _child(args: list[str], threads: int = 1) -> tuple[subprocess.Popen, IO[str]]:
    """The pinned child, its stdout piped and its stderr in a temporary file (a pipe nobody reads
    while the build runs could fill and stall it)."""
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-m", "agent.world.pinned", *args], env=child_env(threads),
                            stdout=subprocess.PIPE, stderr=err, text=True)
    return proc, err


def _ended(proc: subprocess.Popen, err: IO[str], what: str) -> None:
    """Wait for the child; a BadInput it reported (exit 2) is raised as one, any other failure with
    the tail of its stderr."""
    code = proc.wait()
    err.seek(0)
    lines = err.read().strip().splitlines()
    err.close()
    if code == 2 and lines:
        raise BadInput(lines[-1].removeprefix("agent: error: "))
    if code:
        raise RuntimeError(f"the portable {what} child exited {code}:\n" + "\n".join(lines[-12:]))


def pinned_env() -> dict[str, Any]:
    """The build environment (store.BuildEnv's fields) as the pinned child reports it. Refused
    where there is no AVX2 path to pin (another architecture, or an x86 CPU without AVX2)."""
    proc, err = _child(["env"])
    out = proc.communicate()[0]
    _ended(proc, err, "environment")
    return json.loads(out.strip().splitlines()[-1])


def build_pinned(recipe: Any, out_dir: Path, progress: Callable[[str, int, int], None] | None = None) -> None:
    """Build `recipe`'s base (and its early checkpoint beside it) into `out_dir` in the pinned child."""
    proc, err = _child(["build", json.dumps(asdict(recipe)), str(out_dir)], threads=recipe.threads)
    assert proc.stdout is not None
    for line in proc.stdout:  # the child's progress, as it pretrains
        if line.startswith('{"step"') and progress:
            step = json.loads(line)
            progress("pretrain (portable numerics)", step["step"], step["of"])
    _ended(proc, err, "build")
