"""Training throughput and MFU of the loop's own SFT and GRPO runs on the default world, in one run.

    OMP_NUM_THREADS=1 .venv/bin/python bench/training.py [--threads 1] [--steps 12] [--sft S01 S05 S09]
        [--grpo G05] [--variant trainers|random|padding_free|group_by_length|packing]

Each card is a real catalogue card of the default world (its batch size, max length, GRPO
generations and completion length: the loop's sizes) trained through `trainers.run.train`
from the world's base model on the card's own examples, for `--steps` steps. It prints
tokens/s and MFU = 6 * N * tokens / seconds over the fp32 matmul peak measured in the same
process (torch.matmul 1024^3, same threads), in wall-clock and in this process's CPU time
(the machine is shared; with one thread CPU seconds are the work done). Steady state: the
steps after the first two, timed through train()'s progress callback (model load, Trainer
set-up and the first steps' warm-up left out); `setup_s` is what they cost. For SFT it also
prints the share of the token slots the model computed that were real tokens (the rest is
padding), counted by a forward pre-hook; for GRPO the share of the step time spent generating.

`--variant` measures TRL's own options beside what the trainers use (each changes a catalogue
card's training results: batch composition or float summation order); the variant is applied
here only, by wrapping `trainers.sft.SFTConfig` (a measuring instrument). The trainers took
group_by_length into SFT with issue 26, so `trainers` and `group_by_length` now measure the same
thing; `random` measures the seeded random sampler they used before.
- padding_free: SFTConfig(padding_free=True, max_length=None): one flattened row per batch,
  position_ids, no padding; transformers builds the block-diagonal mask from position_ids for
  SDPA (TRL refuses max_length without packing; no catalogue row reaches 512 tokens anyway).
- group_by_length: TrainingArguments(train_sampling_strategy="group_by_length"): batches of
  similar lengths (less padding, different batches than the seeded random sampler).
- packing: SFTConfig(packing=True): TRL's best-fit-decreasing packing into max_length (512)
  rows, padding-free inside; a step then holds about 6x the card's examples (the card's rows
  repeat as epochs), so this measures the kernels' ceiling, not a card's run.
6 * N counts every parameter's matmul (the tied embedding once: the LM head is a matmul, the
lookup is not) and leaves out attention's own FLOPs, so MFU is a slight under-estimate.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

WARM_STEPS = 2
VARIANTS = {"trainers": {}, "random": {"train_sampling_strategy": "random"}, "padding_free": {"padding_free": True, "max_length": None},
            "group_by_length": {"train_sampling_strategy": "group_by_length"},
            "packing": {"packing": True}}


def matmul_peak(n: int = 1024, reps: int = 20) -> tuple[float, float]:
    """Peak fp32 matmul FLOP/s at this thread count: (by wall-clock, by CPU time)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.matmul(a, b)
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(reps):
        torch.matmul(a, b)
    flops = 2 * n**3 * reps
    return flops / (time.perf_counter() - w0), flops / (time.process_time() - c0)


class Clock:
    """Wall and CPU timestamps at every step end (train()'s progress callback)."""

    def __init__(self):
        self.marks: list[tuple[int, float, float]] = []
        self.start = (time.perf_counter(), time.process_time())

    def __call__(self, step: int, _total: int) -> None:
        self.marks.append((step, time.perf_counter(), time.process_time()))

    def steady(self) -> tuple[int, float, float]:
        """(steps, wall s, cpu s) after the warm-up steps."""
        (s0, w0, c0), (s1, w1, c1) = self.marks[WARM_STEPS - 1], self.marks[-1]
        return s1 - s0, w1 - w0, c1 - c0


def slot_counter(model_cls):
    """Counts input token slots (batch x padded length) of every training forward."""
    seen = {"slots": 0}

    def hook(module, args, kwargs):
        if module.training and kwargs.get("input_ids") is not None:
            seen["slots"] += kwargs["input_ids"].numel()

    original = model_cls.__init__

    @functools.wraps(original)
    def init(self, *a, **k):
        original(self, *a, **k)
        self.register_forward_pre_hook(hook, with_kwargs=True)

    model_cls.__init__ = init
    return seen


def use_variant(name: str) -> None:
    """Wrap the SFTConfig the trainers build with the variant's extra options (bench only)."""
    from trainers import sft

    extra, original = VARIANTS[name], sft.SFTConfig
    if extra:
        sft.SFTConfig = lambda **kw: original(**{**kw, **extra})


def short_card(card, steps: int):
    """The card with a `steps`-step budget (everything else, batch and lengths included, as catalogued)."""
    return card.model_copy(update={"budget": card.budget.model_copy(update={"steps": steps})})


def run_card(card, world, out: Path, threads: int, gen_clock: list[float]) -> dict:
    from agent.world.examples import card_examples, card_rewards
    from trainers.run import train

    examples = card_examples(card, world.seed, 0)
    clock, gen0 = Clock(), gen_clock[0]
    result = train(card, world.base_dir, examples, out_dir=str(out / card.id), run_key=f"bench-{card.id}",
                   reward_funcs=card_rewards(card), threads=threads, progress=clock)
    steps, wall, cpu = clock.steady()
    tokens = result.train_tokens * steps / result.steps  # tokens per step are about even
    row = {"card": card.id, "method": card.method, "batch": card.hparams.batch_size, "steps": result.steps,
           "setup_s": round(clock.marks[WARM_STEPS - 1][1] - clock.start[0], 2),
           "steady_wall_s": round(wall, 2), "steady_cpu_s": round(cpu, 2), "tokens": result.train_tokens,
           "tokens_per_s_wall": round(tokens / wall, 1), "tokens_per_s_cpu": round(tokens / cpu, 1),
           "loss_first": result.log.get("loss_first")}  # a variant must start from the same loss
    if card.method == "grpo":
        row["generation_share"] = round((gen_clock[0] - gen0) / (result.wall_seconds or 1), 3)
    return row


def timed_generation() -> list[float]:
    """Seconds spent in GenerationMixin.generate (GRPO's rollouts), by wrapping it (bench only)."""
    import transformers

    spent = [0.0]
    original = transformers.GenerationMixin.generate

    def generate(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return original(self, *a, **k)
        finally:
            spent[0] += time.perf_counter() - t0

    transformers.GenerationMixin.generate = generate
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--sft", nargs="*", default=["S01", "S05", "S09"])
    ap.add_argument("--grpo", nargs="*", default=["G05"])
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="trainers")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    from agent.world.catalogue import card_by_id
    from agent.world.embedded import ensure_world

    use_variant(args.variant)
    gen_clock = timed_generation()
    slots = slot_counter(transformers.Qwen3ForCausalLM)
    world = ensure_world("default")
    n_params = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_pretrained(world.base_dir).parameters())
    peak_wall, peak_cpu = matmul_peak()
    report = {"threads": args.threads, "variant": args.variant, "params": n_params,
              "matmul_peak_gflops_wall": round(peak_wall / 1e9, 2), "matmul_peak_gflops_cpu": round(peak_cpu / 1e9, 2),
              "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for cid in [*args.sft, *args.grpo]:
            before = slots["slots"]
            row = run_card(short_card(card_by_id(world, cid), args.steps), world, Path(tmp), args.threads, gen_clock)
            row["mfu_wall"] = round(6 * n_params * row["tokens_per_s_wall"] / peak_wall, 4)
            row["mfu_cpu"] = round(6 * n_params * row["tokens_per_s_cpu"] / peak_cpu, 4)
            if row["method"] == "sft":
                row["real_token_share"] = round(row["tokens"] / max(slots["slots"] - before, 1), 3)
            report["runs"].append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
