"""A test-size world for the trainer tests: a tiny Qwen3-style model, a locally trained
tokenizer with a ChatML template, and a templated task ("add A B" -> "C").

Imported by the other tests/test_train*.py, test_trial*.py and test_sanity.py modules;
it also tests itself (the parent loads and the task's reward reads completions).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from experience_bank.cards import CandidateCard

torch.set_num_threads(1)

CHAT_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
SHA = "0" * 64


def _questions(n_max: int = 5) -> list[tuple[int, int]]:
    return [(a, b) for a in range(n_max) for b in range(n_max)]


def prompt(a: int, b: int) -> list[dict]:
    return [{"role": "user", "content": f"add {a} {b}"}]


def sft_examples(n: int = 64, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    qs = [rng.choice(_questions()) for _ in range(n)]
    return [{"prompt": prompt(a, b), "completion": [{"role": "assistant", "content": str(a + b)}]} for a, b in qs]


def grpo_examples(n: int = 64, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    qs = [rng.choice(_questions()) for _ in range(n)]
    return [{"prompt": prompt(a, b), "answer": str(a + b)} for a, b in qs]


def exact_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """TRL-form reward: 1 when the completion is exactly the sum."""
    return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]


def has_three_reward(prompts, completions, **kwargs) -> list[float]:
    """TRL-form reward a tiny model can learn in a few GRPO steps: the answer contains a 3."""
    return [float("3" in c[0]["content"]) for c in completions]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    texts = [f"user\nadd {a} {b}\nassistant\n{a + b}" for a, b in _questions(10)] * 3
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=special, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   padding_side="left", model_max_length=128)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_parent(path: Path, hidden: int = 48, layers: int = 1, seed: int = 0) -> Path:
    """A randomly initialised tiny Qwen3 saved with save_pretrained (safetensors)."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tok = build_tokenizer()
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=128,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=None)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


def card(method: str = "sft", *, steps: int = 20, lr: float = 3e-3, batch: int = 8, nu: str = "continue",
         lora: bool = False, **hp) -> CandidateCard:
    """A card for the tiny task; `hp` overrides hyper-parameters."""
    grpo = dict(num_generations=4, max_completion_length=4, beta=0.0, temperature=1.0, rewards=("numeric_match",))
    hparams = dict(learning_rate=lr, batch_size=batch, lr_scheduler="cosine", max_length=64)
    if method == "grpo":
        hparams.update(grpo)
    hparams.update(hp)
    adapter = {"kind": "lora", "rank": 4, "alpha": 8, "targets": ["q_proj", "v_proj"]} if lora else {"kind": "full"}
    return CandidateCard.model_validate_json(json.dumps({
        "id": f"T-{method}", "title": "tiny addition", "method": method, "family": "finance",
        "data": {"mix": [{"dataset": {"id": "tiny/add/train", "sha256": SHA}, "weight": 1.0}], "n_examples": 64},
        "hparams": hparams, "adapter": adapter, "budget": {"steps": steps, "device_hours": 2.0}, "nu": nu,
    }))


def greedy_accuracy(model_dir: Path) -> float:
    """Share of the 25 questions the model answers exactly (greedy), 0-100."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), use_safetensors=True).eval()
    qs = _questions()
    texts = [tok.apply_chat_template(prompt(a, b), tokenize=False, add_generation_prompt=True) for a, b in qs]
    batch = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    answers = tok.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    return 100.0 * sum(ans.strip() == str(a + b) for ans, (a, b) in zip(answers, qs)) / len(qs)


def test_world_parent_loads_and_reward_reads_completions(tmp_path):
    parent = build_parent(tmp_path / "parent")
    assert (parent / "model.safetensors").is_file()
    assert 0.0 <= greedy_accuracy(parent) <= 100.0
    completions = [[{"role": "assistant", "content": "5"}], [{"role": "assistant", "content": "4"}]]
    assert exact_reward(None, completions, answer=["5", "5"]) == [1.0, 0.0]


def answer_logprob(model_dir: Path) -> float:
    """Mean log-probability the model gives the right answer (+ end token) over the 25
    questions, teacher-forced: a smooth, deterministic measure of the task reward."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), use_safetensors=True).eval()
    total = 0.0
    for a, b in _questions():
        head = tok.apply_chat_template(prompt(a, b), tokenize=False, add_generation_prompt=True)
        ids_head = tok(head)["input_ids"]
        ids = torch.tensor([ids_head + tok(f"{a + b}<|im_end|>")["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1], -1)
        target = ids[0, 1:]
        total += float(logp[torch.arange(len(target)), target][len(ids_head) - 1:].sum())
    return total / len(_questions())


def sampled_reward(model_dir: Path, temperature: float, reward=exact_reward, samples: int = 16, seed: int = 0) -> float:
    """Mean TRL-form reward of sampled answers over the 25 questions (the GRPO objective), 0-100."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), use_safetensors=True).eval()
    qs = _questions() * samples
    texts = [tok.apply_chat_template(prompt(a, b), tokenize=False, add_generation_prompt=True) for a, b in qs]
    batch = tok(texts, return_tensors="pt", padding=True)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=4, do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    answers = tok.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    scores = reward([prompt(a, b) for a, b in qs], [[{"role": "assistant", "content": x}] for x in answers],
                    answer=[str(a + b) for a, b in qs])
    return 100.0 * sum(scores) / len(scores)
