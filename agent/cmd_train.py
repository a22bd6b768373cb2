"""`agent train`: one TRL run or trial outside the loop; prints its TrainResult as JSON.

    agent train --card cards/S01.json --parent runs/world/base --out runs/try/S01
    agent train --card S01.json --parent base --fraction 0.2 --data sql/target/train=pool.jsonl --out trial

Without --data, the card's dataset ids are resolved through the embedded world
(evaluators.tasks); GRPO reward names through evaluators.rewards.REWARDS. Self-replay cards
need the loop (a frozen-parent generator), so they are refused here.
Multi-GPU: `accelerate launch --config_file runs/accelerate_zero2.yaml -m agent.cli train ...`
runs this same command on every process (see runs/accelerate_zero2.yaml).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.hashing import loads_strict
from experience_bank.records import CandidateCard, parse_model


def register(sub) -> None:
    """Add `agent train` to the `agent` parser."""
    p = sub.add_parser("train", help="run one TRL run or trial and print its TrainResult JSON",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--card", required=True, help="CandidateCard JSON file")
    p.add_argument("--parent", required=True, help="parent model directory (safetensors)")
    p.add_argument("--out", required=True, help="run directory to publish (must not hold another run)")
    p.add_argument("--fraction", type=float, default=1.0, help="share of the card's nominal steps (0.2 = a trial)")
    p.add_argument("--data", nargs="+", default=(), metavar="[ID=]FILE.jsonl",
                   help="training pools; ID= names the card's dataset (optional for a one-dataset card)")
    p.add_argument("--resume-from", default=None, help="trial run directory to continue (nu = continue)")
    p.add_argument("--run-key", default=None, help="idempotency key (default: card id + fraction)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=run)


def _read_jsonl(path: str) -> list[dict]:
    file = Path(path)
    if not file.is_file():
        raise BadInput(f"--data file {path} does not exist: pass a JSONL file of training rows")
    return [loads_strict(line) for line in file.read_text().splitlines() if line.strip()]


def _pools_from_files(card: CandidateCard, specs) -> dict[str, list[dict]]:
    ids = [m.dataset.id for m in card.data.mix]
    pools = {}
    for spec in specs:
        ds, sep, path = spec.rpartition("=")
        if not sep:
            if len(ids) != 1:
                raise BadInput(f"card {card.id} mixes {ids}: name each file as ID=FILE.jsonl")
            ds, path = ids[0], spec
        pools[ds] = _read_jsonl(path)
    return pools


def _pools_from_world(card: CandidateCard, seed: int) -> dict[str, list[dict]]:
    from evaluators import tasks

    make = tasks.sft_examples if card.method == "sft" else tasks.grpo_examples
    return {m.dataset.id: make(m.dataset.id, seed) for m in card.data.mix}


def run(args) -> int:
    from trainers.data import build_examples
    from trainers.run import train

    if not Path(args.card).is_file():
        raise BadInput(f"card file {args.card} does not exist: pass --card CARD.json")
    card = parse_model(CandidateCard, Path(args.card).read_text(), "card")
    pools = _pools_from_files(card, args.data) if args.data else _pools_from_world(card, args.seed)
    examples = build_examples(card, pools, args.seed)
    rewards = None
    if card.method == "grpo":
        from evaluators.rewards import REWARDS

        rewards = {name: REWARDS[name] for name in card.hparams.rewards}
    key = args.run_key or f"{card.id}-f{args.fraction:g}-s{args.seed}"
    result = train(card, args.parent, examples, out_dir=args.out, run_key=key, fraction=args.fraction,
                   reward_funcs=rewards, resume_from=args.resume_from, seed=args.seed, threads=args.threads)
    print(json.dumps(json.loads(result.model_dump_json()), indent=2))
    return 0

