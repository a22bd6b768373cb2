"""Batched greedy generation vs a per-example loop, at the loop's evaluation sizes, in one run.

    .venv/bin/python bench/generation.py [--config runs/default.yaml] [--n N] [--batch-size B] [--against B2]
        [--threads T] [--model DIR] [--suites S ...] [--prune-every K]

The defaults are what `agent run --config runs/default.yaml` evaluates with (`build_config`):
each suite's item count (`suite_n`: 200 IFEval prompts, 210 CapTrack probes, `eval_n` for the
task suites), `eval_batch` (the config's `eval_batch_size`, else the world's) and `torch_threads`; `--n` gives every suite the same count. Without --model it loads
the cached default world's base model (`ensure_world("default")`; the first call builds it).
For every suite the loop evaluates, the same validation prompts go through
`evaluators.generate.generate` twice, at the batch size and at batch 1, with the suite's own
max_new_tokens (`evaluators.evaluation.MAX_NEW_TOKENS`, what the loop uses). It prints per
suite and in total: seconds, the ratio per-example / batched, how many generations agree, and
the share of batched decode slots that were real tokens (counted by a forward hook: a row that
has stopped rides along as padding until its batch next drops stopped rows, every
`evaluators.generate.PRUNE_EVERY` tokens), and the share of the per-example CPU time that
is prefill (the same loop at max_new_tokens=1): prefill is matmul-bound already at batch 1, so
batching cannot speed it up much; these two bound the ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def default_model() -> str:
    from agent.world.embedded import ensure_world

    return ensure_world("default").base_dir


def timed(fn):
    """(result, wall seconds, this process's CPU seconds): the machine is shared, so CPU time is
    the steadier figure (one torch thread: CPU seconds are the work done)."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def counted(net, fn):
    """(fn(), decoded slots): every forward pass produces one token per batch row, counted by a
    forward pre-hook (a row that has stopped but is still in the batch fills a slot too)."""
    slots = [0]
    hook = net.register_forward_pre_hook(lambda m, a, kw: slots.__setitem__(0, slots[0] + kw["input_ids"].shape[0]),
                                         with_kwargs=True)
    try:
        return fn(), slots[0]
    finally:
        hook.remove()


def useful_share(tok, gens: list[str], slots: int, max_new: int) -> float:
    """Real tokens (each row's, +1 for its stop token, capped at max_new) over decoded slots."""
    return sum(min(len(tok(g, add_special_tokens=False)["input_ids"]) + 1, max_new) for g in gens) / slots


def bench_suite(loaded, suite: str, n: int, batch_size: int, against: int | None = None) -> dict:
    from evaluators import tasks
    from evaluators.evaluation import MAX_NEW_TOKENS
    from evaluators.generate import generate

    prompts = [x["messages"] for x in tasks.items(suite, "validation", 0, n)]
    max_new = MAX_NEW_TOKENS[suite.split("/")[0]]
    (batched, slots), t_b, c_b = timed(lambda: counted(loaded[0], lambda: generate(
        loaded, prompts, batch_size=batch_size, max_new_tokens=max_new)))
    single, t_1, c_1 = timed(lambda: generate(loaded, prompts, batch_size=1, max_new_tokens=max_new))
    _, _, c_prefill = timed(lambda: generate(loaded, prompts, batch_size=1, max_new_tokens=1))
    other = {}
    if against is not None:  # the same prompts at another batch size, in the same process and minutes
        texts, t_a, c_a = timed(lambda: generate(loaded, prompts, batch_size=against, max_new_tokens=max_new))
        other = {"against_s": t_a, "against_cpu": c_a, "against_agree": sum(a == b for a, b in zip(batched, texts))}
    return {"suite": suite, "n": len(prompts), "max_new": max_new, "batched_s": t_b, "per_example_s": t_1,
            "batched_cpu": c_b, "per_example_cpu": c_1, "prefill_share": c_prefill / c_1,
            "agree": sum(a == b for a, b in zip(batched, single)),
            "useful": useful_share(loaded[1], batched, slots, max_new)} | other


def print_table(rows: list[dict]) -> None:
    print(f"{'suite':16s} {'new':>4s} {'wall: batched':>13s} {'per-ex':>7s} {'ratio':>6s} "
          f"{'cpu: batched':>12s} {'per-ex':>7s} {'ratio':>6s} {'agree':>7s} {'useful':>6s} {'prefill':>7s}")
    for r in rows:
        print(f"{r['suite']:16s} {r['max_new']:4d} {r['batched_s']:12.2f}s {r['per_example_s']:6.2f}s "
              f"{r['per_example_s'] / r['batched_s']:5.2f}x {r['batched_cpu']:11.2f}s {r['per_example_cpu']:6.2f}s "
              f"{r['per_example_cpu'] / r['batched_cpu']:5.2f}x {r['agree']:3d}/{r['n']:<3d} {r['useful']:6.0%} "
              f"{r['prefill_share']:7.0%}")
    total = {k: sum(r[k] for r in rows) for k in ("batched_s", "per_example_s", "batched_cpu", "per_example_cpu",
                                                   "agree", "n")}
    print(f"total: wall batched {total['batched_s']:.2f} s, per-example {total['per_example_s']:.2f} s, ratio "
          f"{total['per_example_s'] / total['batched_s']:.2f}x; cpu batched {total['batched_cpu']:.2f} s, "
          f"per-example {total['per_example_cpu']:.2f} s, ratio {total['per_example_cpu'] / total['batched_cpu']:.2f}x; "
          f"{total['agree']}/{total['n']} generations identical")


def print_against(rows: list[dict], batch: int, against: int) -> None:
    t = {k: sum(r[k] for r in rows) for k in ("batched_s", "batched_cpu", "against_s", "against_cpu", "against_agree", "n")}
    print(f"batch {batch} against batch {against}: wall {t['against_s']:.2f} s / {t['batched_s']:.2f} s = "
          f"{t['against_s'] / t['batched_s']:.2f}x, cpu {t['against_cpu']:.2f} s / {t['batched_cpu']:.2f} s = "
          f"{t['against_cpu'] / t['batched_cpu']:.2f}x faster at batch {batch}; "
          f"{t['against_agree']}/{t['n']} generations identical at the two batch sizes")


def main() -> int:
    from agent.config import build_config
    from experience_bank.errors import BadInput

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="runs/default.yaml", help="the run config whose evaluation settings to use")
    ap.add_argument("--n", type=int, default=None, help="items per suite (default: the config's suite_n of each)")
    ap.add_argument("--batch-size", type=int, default=None, help="default: the config's eval_batch (eval_batch_size, else the world's)")
    ap.add_argument("--against", type=int, default=None,
                    help="also generate at this batch size and print the ratio to --batch-size (e.g. the old default)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=None, help="default: the config's torch_threads")
    ap.add_argument("--suites", nargs="*", default=None)
    ap.add_argument("--prune-every", type=int, default=None,
                    help="tokens between drops of stopped rows (default evaluators.generate.PRUNE_EVERY; "
                         "a number above every max_new_tokens decodes each batch in one call, as before)")
    args = ap.parse_args()
    if args.prune_every is not None and args.prune_every < 1:
        print("error: --prune-every must be >= 1", file=sys.stderr)
        return 2
    try:
        loop = build_config(args.config)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.batch_size = args.batch_size or loop.eval_batch
    args.threads = args.threads or loop.torch_threads

    import torch

    from evaluators import generate as generation, models, tasks
    from evaluators.generate import generate

    if args.prune_every is not None:
        generation.PRUNE_EVERY = args.prune_every
    torch.set_num_threads(args.threads)
    loaded = models.load(args.model or default_model())
    generate(loaded, [[{"role": "user", "content": "hi"}]] * 2, batch_size=2, max_new_tokens=4)  # warm-up
    rows = [bench_suite(loaded, s, args.n or loop.suite_n(s), args.batch_size, args.against)
            for s in (args.suites or tasks.TASKS)]
    params = sum(p.numel() for p in loaded[0].parameters())
    sizes = f"{args.n} prompts per suite" if args.n else "the loop's prompts per suite"
    print(f"model {params / 1e6:.2f}M params, {sizes}, batch {args.batch_size}, {args.threads} thread(s), "
          f"stopped rows dropped every {generation.PRUNE_EVERY} tokens")
    print_table(rows)
    if args.against is not None:
        print_against(rows, args.batch_size, args.against)
    return 0


if __name__ == "__main__":
    sys.exit(main())
