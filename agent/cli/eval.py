"""`agent eval`: score one model on one suite split and print the metrics.

    agent eval --model runs/world/base --suite sql/target --split test --n 50 --json
    agent eval --model ~/models/qwen3-4b --suite function/target --data simple_python --backend vllm
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from agent.inputs import check_model_dir, check_out_dir
from experience_bank.errors import BadInput
from experience_bank.results import check_seed
from evaluators import loaders
from evaluators.tasks import SPLITS, TASKS
from trainers.checkpoint import adapter_of


def check_inputs(args) -> None:
    """What can be checked before a folder is made: the model folder, --out, --n, --seed (the --data
    loaders check their own files, evaluators/loaders.py)."""
    if args.n is not None and args.n < 1:
        raise BadInput(f"--n {args.n} must be at least 1")
    if args.batch_size < 1:
        raise BadInput(f"--batch-size {args.batch_size} must be at least 1")
    check_seed(args.seed)
    if args.backend == "transformers":
        if not Path(args.model).is_dir():
            raise BadInput(f"--model {args.model} is not a local model folder: give a folder saved by "
                           "save_pretrained (or choose --backend vllm/openai for a served model)")
        check_model_dir(args.model, "--model")
    if args.out:
        check_out_dir(args.out)


def cmd_eval(args) -> int:
    from evaluators import evaluate  # noqa: PLC0415 (torch and transformers, only when the command runs)

    check_inputs(args)
    items = {args.suite: loaders.for_suite(args.suite, args.data, args.split, args.n)} if args.data else None
    if items is not None and not items[args.suite]:
        raise BadInput(f"--data {args.data} holds no {args.suite} items for split {args.split}: give a file with items")
    out_dir = args.out or tempfile.mkdtemp(prefix="agent-eval-")
    try:
        results = evaluate(args.model, [args.suite], args.split, out_dir=out_dir, backend=args.backend,
                           batch_size=args.batch_size, n=args.n, seed=args.seed, items=items,
                           adapter_dir=adapter_of(args.model) if args.backend == "openai" else None)
    except BaseException:
        if not args.out:  # our own temp folder: a refused or failed evaluation leaves nothing behind
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    res = results[args.suite]
    summary = {"suite": args.suite, "split": args.split, "metrics": res.metrics, "n_items": len(res.items),
               "n_unparseable": res.n_unparseable, "n_unknown": res.n_unknown, "out_dir": str(out_dir),
               "generations_sha256": res.generations_sha256}
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        for name, value in res.metrics.items():
            print(f"{args.suite}.{name}: {'UNKNOWN' if value is None else f'{value:.2f}'}")
        print(f"items {len(res.items)}, unparseable {res.n_unparseable}, unknown {res.n_unknown}; stored in {out_dir}")
    return 0


def register(sub) -> None:
    """Add `agent eval` to the `agent` parser."""
    p = sub.add_parser("eval", help="score a model on one suite split",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="local HF model folder (safetensors), or a served model name")
    p.add_argument("--suite", required=True, choices=TASKS, help="task suite")
    p.add_argument("--split", default="test", choices=SPLITS, help="data role (default: test)")
    p.add_argument("--n", type=int, default=None, help="number of items (default: the split's size)")
    p.add_argument("--backend", default="transformers", choices=("transformers", "vllm", "openai"))
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0, help="world seed (items) and generation seed")
    p.add_argument("--out", default=None, help="folder for generations and results (default: a temp folder)")
    p.add_argument("--data", default=None,
                   help="real data instead of the world's items: TAT-QA json (finance), BIRD dev folder (sql), "
                        "BFCL category e.g. simple_python (function), input_data.jsonl or `shipped` (ifeval)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_eval)
