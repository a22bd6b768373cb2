"""CPU training throughput and model-FLOPs utilisation of the trainers, measured in one run.

    .venv/bin/python bench/training.py [--threads 1] [--hidden 128] [--layers 4] [--steps 20]

Prints SFT and GRPO tokens/s, MFU = 6 * N * tokens / seconds over the peak fp32 matmul rate
measured in the same process (torch.matmul, same thread count), and the share of GRPO step
time spent generating (timed by wrapping GenerationMixin.generate — a measuring instrument
for this script only). Wall time includes model load and Trainer setup, so MFU is a lower
bound on the steady state.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "tests")]

import torch  # noqa: E402


def matmul_peak(n: int = 1024, reps: int = 20) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.matmul(a, b)
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b)
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers
    from test_train_world import build_parent, card, grpo_examples, has_three_reward, sft_examples
    from trainers.run import train

    gen_seconds = [0.0]
    original = transformers.GenerationMixin.generate

    def timed_generate(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return original(self, *a, **k)
        finally:
            gen_seconds[0] += time.perf_counter() - t0

    transformers.GenerationMixin.generate = timed_generate
    peak = matmul_peak()
    with tempfile.TemporaryDirectory() as tmp:
        parent = build_parent(Path(tmp) / "parent", hidden=args.hidden, layers=args.layers)
        from transformers import AutoModelForCausalLM

        n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(str(parent)).parameters())
        sft = train(card("sft", steps=args.steps, batch=16), str(parent), sft_examples(256), out_dir=f"{tmp}/sft",
                    run_key="bench-sft", threads=args.threads)
        grpo = train(card("grpo", steps=args.steps, lr=1e-3, batch=16, num_generations=8, max_completion_length=8),
                     sft.checkpoint, grpo_examples(256), out_dir=f"{tmp}/grpo", run_key="bench-grpo",
                     reward_funcs={"numeric_match": has_three_reward}, threads=args.threads)
    report = {"threads": args.threads, "params": n_params, "matmul_peak_gflops": round(peak / 1e9, 2)}
    for name, r in (("sft", sft), ("grpo", grpo)):
        tps = r.train_tokens / r.wall_seconds
        report[name] = {"steps": r.steps, "seconds": round(r.wall_seconds, 2), "tokens": r.train_tokens,
                        "tokens_per_s": round(tps, 1), "mfu": round(6 * n_params * tps / peak, 4)}
    report["grpo"]["generation_share"] = round(gen_seconds[0] / grpo.wall_seconds, 3)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
