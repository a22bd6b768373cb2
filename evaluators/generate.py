"""Generation backends behind one interface: `generate(model, prompts, *, backend, ...)`.

`prompts` are chat message lists; every backend renders them with the model's chat template
and decodes greedily, so a rerun gives the same text (up to backend numerics).
- transformers (default, CPU or GPU): batched greedy, left padding, prompts sorted by length so a batch
  wastes little padding; the original order is restored.
- vllm: optional extra, imported only when chosen.
- openai: any OpenAI-compatible endpoint (OPENAI_BASE_URL / OPENAI_API_KEY); `model` is the
  served model's name.
"""

from __future__ import annotations

import os
from typing import Callable

from experience_bank.errors import BadInput

Messages = list[dict]


def _transformers(model, prompts: list[Messages], batch_size: int, max_new_tokens: int, seed: int) -> list[str]:
    import torch
    from evaluators import models

    net, tok = models.load(model) if isinstance(model, (str, os.PathLike)) else model
    torch.manual_seed(seed)
    texts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in prompts]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list[str] = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False).to(net.device)
        with torch.no_grad():
            gen = net.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
        for i, row in zip(idx, gen[:, enc["input_ids"].shape[1]:]):
            out[i] = tok.decode(row, skip_special_tokens=True)
    return out


def _vllm(model, prompts: list[Messages], batch_size: int, max_new_tokens: int, seed: int) -> list[str]:
    try:
        from vllm import LLM, SamplingParams
    except ImportError:
        raise BadInput("backend vllm needs the optional extra: pip install vllm") from None
    llm = LLM(model=str(model), seed=seed, max_num_seqs=batch_size)
    outs = llm.chat(prompts, SamplingParams(temperature=0.0, max_tokens=max_new_tokens, seed=seed))
    return [o.outputs[0].text for o in outs]


def _openai(model, prompts: list[Messages], batch_size: int, max_new_tokens: int, seed: int) -> list[str]:
    import openai

    client = openai.OpenAI()
    out = []
    for messages in prompts:  # endpoints batch server-side; one request per prompt
        resp = client.chat.completions.create(model=str(model), messages=messages, temperature=0.0,
                                              max_tokens=max_new_tokens, seed=seed)
        out.append(resp.choices[0].message.content or "")
    return out


BACKENDS: dict[str, Callable[..., list[str]]] = {"transformers": _transformers, "vllm": _vllm, "openai": _openai}


def generate(model, prompts: list[Messages], *, backend: str = "transformers", batch_size: int = 16,
             max_new_tokens: int = 64, seed: int = 0) -> list[str]:
    """Greedy completions, one per prompt, in order. `model`: a folder, a (model, tokenizer) pair
    (transformers), or a served model name (openai)."""
    if backend not in BACKENDS:
        raise BadInput(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if batch_size < 1 or max_new_tokens < 1:
        raise BadInput("batch_size and max_new_tokens must be >= 1")
    return BACKENDS[backend](model, prompts, batch_size, max_new_tokens, seed) if prompts else []
