"""Throughput of batched greedy generation vs a per-example loop, on the same prompts, in one run.

    .venv/bin/python bench/generation.py [--n 64] [--batch-size 16] [--max-new-tokens 32] [--model DIR]

Without --model a small random Qwen3 (hidden 128, 2 layers, local BPE tokenizer) is built
in a temp folder, so the number measures the pipeline, not a trained model.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build_model(path: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models as tm, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    from evaluators import tasks

    bpe = Tokenizer(tm.BPE(unk_token=None))
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    corpus = [x["messages"][0]["content"] for t in tasks.TASKS for x in tasks.items(t, "train", 0, n=50)]
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=1000, special_tokens=[
        "<|endoftext|>", "<|im_start|>", "<|im_end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    Qwen3ForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch

    from evaluators import models, tasks
    from evaluators.generate import generate

    torch.set_num_threads(args.threads)
    model_dir = Path(args.model) if args.model else build_model(Path(tempfile.mkdtemp()) / "bench-model")
    loaded = models.load(model_dir)
    prompts = [x["messages"] for t in tasks.TASKS for x in tasks.items(t, "test", 0, n=args.n // len(tasks.TASKS) + 1)]
    prompts = prompts[:args.n]
    generate(loaded, prompts[:2], batch_size=2, max_new_tokens=4)  # warm-up
    timings = {}
    for name, bs in (("batched", args.batch_size), ("per_example", 1)):
        t0 = time.perf_counter()
        generate(loaded, prompts, batch_size=bs, max_new_tokens=args.max_new_tokens)
        timings[name] = time.perf_counter() - t0
    params = sum(p.numel() for p in loaded[0].parameters())
    print(f"model {params / 1e6:.2f}M params, {len(prompts)} prompts, {args.max_new_tokens} new tokens, "
          f"{args.threads} thread(s)")
    for name, sec in timings.items():
        print(f"{name:12s} {sec:7.2f} s  {len(prompts) / sec:7.2f} prompts/s")
    print(f"throughput ratio batched/per-example (batch {args.batch_size}): "
          f"{timings['per_example'] / timings['batched']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
