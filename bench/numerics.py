"""MKL's vendor-independent kernels (MKL_CBWR=COMPATIBLE) against its default, in one run.

    .venv/bin/python bench/numerics.py [--reps N]

What it would cost to make world builds agree across CPU vendors (docs/world-identity.md): the
same float32 products at the default world's shapes (the MLP's up and down projections and the
vocabulary head, batch x sequence = 256 rows), timed on one thread in two fresh processes, one
with MKL's default kernel choice and one with MKL_CBWR=COMPATIBLE. It prints each process's
seconds, the ratio COMPATIBLE / default, whether the two give the same bits, and each one's
numerics fingerprint (agent.world.embedded.numerics_fingerprint).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import hashlib, json, sys, time
import torch
from agent.world.embedded import numerics_fingerprint
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
shapes = [((256, 192), (192, 512)), ((256, 512), (512, 192)), ((256, 192), (192, 2048))]
pairs = [(torch.randn(a, generator=g), torch.randn(b, generator=g)) for a, b in shapes]
for x, w in pairs:  # warm-up: MKL picks and loads its kernels on first use
    x @ w
t0 = time.perf_counter()
for _ in range(int(sys.argv[1])):
    outs = [x @ w for x, w in pairs]
seconds = time.perf_counter() - t0
bits = hashlib.sha256(b"".join(o.numpy().tobytes() for o in outs)).hexdigest()[:16]
print(json.dumps({"seconds": seconds, "bits": bits, "fingerprint": numerics_fingerprint()}))
"""


def measure(reps: int, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(reps)], capture_output=True, text=True, check=True,
                          cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"} | env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300, help="repetitions of the three products (default 300)")
    reps = ap.parse_args().reps
    default = measure(reps, {"MKL_CBWR": "AUTO"})
    compatible = measure(reps, {"MKL_CBWR": "COMPATIBLE"})
    print(f"default    {default['seconds']:.3f} s  bits {default['bits']}  fingerprint {default['fingerprint']}")
    print(f"COMPATIBLE {compatible['seconds']:.3f} s  bits {compatible['bits']}  fingerprint {compatible['fingerprint']}")
    print(f"ratio COMPATIBLE / default: {compatible['seconds'] / default['seconds']:.2f}x; "
          f"same bits: {default['bits'] == compatible['bits']}")


if __name__ == "__main__":
    main()
