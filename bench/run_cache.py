"""What the run cache saves: one episode with the cache off, cold and warm, in one run.

    OMP_NUM_THREADS=1 .venv/bin/python bench/run_cache.py [--config runs/test.yaml] [--budget 12gpuh]

Each variant is `agent run` in its own process and temporary directory, on a copy of the same
library (tests/test_run_e2e.py's crafted L(0) on the test-size world, which routes one card to
Train, one to Validate and one to Reject), with the same relative paths so that the manifests
agree. It prints each variant's wall-clock (process start to exit), the charges the cache
served, and the ratios off / warm and cold / off (the cold run pays for writing the entries),
and checks that the three ledgers agree in everything but wall-clock and the `cached` flag.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def variant(root: Path, bank0: Path, config: str, budget: str, env: dict) -> tuple[float, list[dict]]:
    from trainers.ledger import Ledger

    root.mkdir()
    shutil.copy(bank0, root / "bank.sqlite")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "agent", "run", "--config", config, "--bank", "bank.sqlite", "--out",
                    "runs/ep", "--episode-budget", budget, "--quiet", "--no-tracking"], cwd=root, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    return wall, Ledger(str(root / "runs" / "ep" / "ledger.sqlite")).charges("ep")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "runs" / "test.yaml"))
    ap.add_argument("--budget", default="12gpuh")
    args = ap.parse_args()
    from test_run_e2e import crafted_bank

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        crafted_bank(tmp / "bank0.sqlite")
        env = dict(os.environ, AGENT_RUN_CACHE=str(tmp / "cache"), PYTHONPATH=str(ROOT))
        results = {}
        for name in ("off", "cold", "warm"):
            e = dict(env, AGENT_NO_CACHE="1") if name == "off" else {k: v for k, v in env.items() if k != "AGENT_NO_CACHE"}
            results[name] = variant(tmp / name, tmp / "bank0.sqlite", args.config, args.budget, e)
    same = {k: [{c: v for c, v in r.items() if c not in ("wall_seconds", "created_at", "cached")} for r in rows]
            for k, (_, rows) in results.items()}
    for name, (wall, rows) in results.items():
        print(f"{name:5s} {wall:7.1f} s   {sum(r['cached'] for r in rows)} of {len(rows)} charges served by the cache")
    off, cold, warm = (results[k][0] for k in ("off", "cold", "warm"))
    print(f"off / warm {off / warm:.2f}x   cold / off {cold / off:.2f}x   ledgers equal: "
          f"{same['off'] == same['cold'] == same['warm']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
