"""Generation backends behind one interface: `generate(model, prompts, *, backend, ...)`.

`prompts` are chat message lists; every backend renders them with the model's chat template
and decodes greedily, so a rerun gives the same text (up to backend numerics).
- transformers (default, CPU or GPU): batched greedy through `model.generate` with the KV cache on,
  left padding, prompts sorted by token length so a batch wastes little padding (the original order
  is restored); each row stops at its own EOS / <|im_end|> (transformers' own stopping criteria).
  A batch decodes PRUNE_EVERY tokens per generate() call; between calls the rows that have stopped
  leave the batch and its KV cache, so they no longer ride along as padding until the longest row
  stops. Outputs equal a one-by-one loop's (tests/test_generate.py; 698 of 698 on the default
  world at the loop's sizes, bench/generation.py).
- vllm: optional extra, imported only when chosen.
- openai: any OpenAI-compatible endpoint (OPENAI_BASE_URL / OPENAI_API_KEY); `model` is the
  served model's name.

`sample` is the other use of a model: k completions per prompt at a temperature, as GRPO draws
its groups (TRL's GRPOTrainer samples with `temperature`, top_p 1 and no top_k), so a caller can
ask how a prompt's group would be rewarded before training on it (agent/world/examples.py).
"""

from __future__ import annotations

import os
from typing import Callable

from experience_bank.errors import BadInput

Messages = list[dict]


def stop_ids(net, tok) -> list[int]:
    """Token ids that end a row: the model's generation EOS, the tokenizer's EOS and ChatML's <|im_end|>.

    generate() marks a row finished when it emits any of them (pads it from then on) and ends the
    batch once every row has finished (transformers' EosTokenCriteria)."""
    configured = net.generation_config.eos_token_id
    ids = set(configured if isinstance(configured, list) else [] if configured is None else [configured])
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    ids.update(i for i in (tok.eos_token_id, im_end) if i is not None and i != tok.unk_token_id)
    return sorted(ids)


def length_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices in batches of rows with close prompt lengths (in tokens), so padding wastes little."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]


PRUNE_EVERY = 8
"""Tokens a batch decodes between drops of its stopped rows. bench/generation.py at the loop's
sizes, batch 32: 8 and 16 about equal, 4 slower (each chunk is one more generate() call)."""


def _dynamic_cache(net):
    """A fresh DynamicCache for `net` when every layer's cache can drop batch rows, else None (a
    model with its own cache type, a static cache, linear attention: decoded in one call)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    if net.generation_config.cache_implementation not in (None, "dynamic"):
        return None
    cache = DynamicCache(config=net.config)
    return cache if all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in cache.layers) else None


def _decode_batch(net, enc, stop: list[int], pad: int, max_new_tokens: int) -> list:
    """Each row's new tokens for one left-padded batch, a stopped row leaving it every PRUNE_EVERY
    tokens. A continued row makes the same greedy steps over the same cache as in one call."""
    import torch

    args = dict(do_sample=False, use_cache=True, eos_token_id=stop, pad_token_id=pad)
    ids, mask, prompt = enc["input_ids"], enc["attention_mask"], enc["input_ids"].shape[1]
    cache = None if len(ids) == 1 else _dynamic_cache(net)  # one row has nothing to drop
    if cache is None:
        return list(net.generate(**enc, max_new_tokens=max_new_tokens, **args)[:, prompt:])
    out: list = [None] * len(ids)
    live, left, stops = list(range(len(ids))), max_new_tokens, torch.tensor(stop, device=ids.device)
    while True:
        gen = net.generate(input_ids=ids, attention_mask=mask, cache=cache, max_new_tokens=min(PRUNE_EVERY, left),
                           return_dict_in_generate=True, **args)
        new = gen.sequences[:, ids.shape[1]:]
        left -= new.shape[1]
        done = torch.isin(new, stops).any(dim=1) | (left <= 0 or new.shape[1] == 0)  # 0: nothing more to come
        for j in done.nonzero().flatten().tolist():
            out[live[j]] = gen.sequences[j, prompt:]
        if done.all():
            return out
        keep = (~done).nonzero().flatten()
        cache = gen.cache
        cache.batch_select_indices(keep)
        # generate() extends the mask by one per new token, for every row: the kept rows have no gap.
        ids, mask = gen.sequences[keep], torch.cat([mask, mask.new_ones(len(mask), new.shape[1])], 1)[keep]
        live = [live[j] for j in keep.tolist()]


def _encode(model, prompts: list[Messages]):
    """(net, tokenizer, token ids of each prompt rendered by the model's chat template)."""
    from evaluators import models

    net, tok = models.load(model) if isinstance(model, (str, os.PathLike)) else model
    texts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in prompts]
    return net, tok, tok(texts, add_special_tokens=False)["input_ids"]


def _transformers(model, prompts: list[Messages], batch_size: int, max_new_tokens: int, seed: int) -> list[str]:
    import torch

    net, tok, ids = _encode(model, prompts)
    torch.manual_seed(seed)
    stop = stop_ids(net, tok)
    out: list[str] = [""] * len(ids)
    for idx in length_batches([len(x) for x in ids], batch_size):
        enc = tok.pad({"input_ids": [ids[i] for i in idx]}, padding=True, return_tensors="pt").to(net.device)
        with torch.no_grad():  # use_cache: a checkpoint saved by a trainer may carry use_cache=False
            rows = _decode_batch(net, enc, stop, tok.pad_token_id, max_new_tokens)
        for i, row in zip(idx, rows):
            out[i] = tok.decode(row, skip_special_tokens=True)
    return out


def _vllm(model, prompts: list[Messages], batch_size: int, max_new_tokens: int, seed: int) -> list[str]:
    try:
        from vllm import LLM, SamplingParams
    except ImportError:
        raise BadInput("backend vllm needs vLLM in this environment, which the pins exclude: serve it from its own "
                       "environment and use backend: openai (docs/gpu.md)") from None
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


def sample(model, prompts: list[Messages], *, k: int, temperature: float, max_new_tokens: int = 64,
           batch_size: int = 16, seed: int = 0) -> list[list[str]]:
    """k sampled completions per prompt (transformers), in order: the group GRPO would draw for it.
    Seeded: the same (model, prompts, k, temperature, seed) gives the same texts on one machine."""
    if k < 1 or temperature <= 0 or batch_size < 1 or max_new_tokens < 1:
        raise BadInput(f"sampling needs k >= 1, temperature > 0, batch_size and max_new_tokens >= 1; got k={k}, "
                       f"temperature={temperature}, batch_size={batch_size}, max_new_tokens={max_new_tokens}")
    if not prompts:
        return []
    import torch

    net, tok, ids = _encode(model, prompts)
    stop, out = stop_ids(net, tok), [[] for _ in prompts]
    per_call = max(1, batch_size // k)  # prompts per generate() call: batch_size rows of k samples each
    torch.manual_seed(seed)
    for idx in length_batches([len(x) for x in ids], per_call):
        enc = tok.pad({"input_ids": [ids[i] for i in idx]}, padding=True, return_tensors="pt").to(net.device)
        with torch.no_grad():
            gen = net.generate(**enc, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                               num_return_sequences=k, max_new_tokens=max_new_tokens, use_cache=True,
                               eos_token_id=stop, pad_token_id=tok.pad_token_id)
        rows = gen[:, enc["input_ids"].shape[1]:]
        for j, i in enumerate(idx):  # generate() returns each prompt's k rows together
            out[i] = [tok.decode(r, skip_special_tokens=True) for r in rows[j * k:(j + 1) * k]]
    return out


def generate(model, prompts: list[Messages], *, backend: str = "transformers", batch_size: int = 16,
             max_new_tokens: int = 64, seed: int = 0) -> list[str]:
    """Greedy completions, one per prompt, in order. `model`: a folder, a (model, tokenizer) pair
    (transformers), or a served model name (openai)."""
    if backend not in BACKENDS:
        raise BadInput(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if batch_size < 1 or max_new_tokens < 1:
        raise BadInput("batch_size and max_new_tokens must be >= 1")
    return BACKENDS[backend](model, prompts, batch_size, max_new_tokens, seed) if prompts else []


def check_backend(backend: str) -> None:
    """BadInput before anything is written when a configured backend cannot be imported."""
    import importlib.util

    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise BadInput("backend vllm needs vLLM in this environment, which the pins exclude: serve it from its own "
                       "environment and use backend: openai (docs/gpu.md), or backend: transformers")
    if backend == "openai":
        from evaluators.served import served_models  # the server answers, or one line naming it

        served_models()
