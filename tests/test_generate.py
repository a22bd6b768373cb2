"""Generation and evaluate() end to end on a tiny random Qwen3 model built in the test."""

import json

import pytest

from evaluators import evaluate, rescore, tasks
from evaluators import models
from evaluators.generate import generate
from experience_bank.errors import BadInput

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_model(path, seed=0):
    """A 1-layer Qwen3 with a BPE tokenizer trained here on the world's prompts (offline)."""
    import torch
    from tokenizers import Tokenizer, decoders, models as tm, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    torch.set_num_threads(1)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(tm.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [x["messages"][0]["content"] + " " + x["reference"]["completion"]
              for t in tasks.TASKS for x in tasks.items(t, "train", 0, n=20)]
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  bos_token=None)
    tok.chat_template = CHATML
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    Qwen3ForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(autouse=True)
def _world(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("AGENT_WORLD_DIR", str(tmp_path_factory.getbasetemp() / "world"))


def test_load_refuses_missing_or_pickled(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        models.load(tmp_path / "nope")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(BadInput, match="safetensors"):
        models.load(tmp_path)


def test_batched_greedy_matches_one_by_one(tiny):
    prompts = [x["messages"] for x in tasks.items("captrack", "test", 0, n=6)]
    loaded = models.load(tiny)
    batched = generate(loaded, prompts, batch_size=6, max_new_tokens=8)
    single = generate(loaded, prompts, batch_size=1, max_new_tokens=8)
    assert len(batched) == 6 and all(isinstance(g, str) for g in batched)
    agree = sum(a == b for a, b in zip(batched, single))
    assert agree >= 5  # left padding keeps greedy decoding the same up to float noise


def test_unknown_backend_is_bad_input(tiny):
    with pytest.raises(BadInput, match="unknown backend"):
        generate(tiny, [[{"role": "user", "content": "hi"}]], backend="nope")


def test_evaluate_end_to_end_and_rescore(tiny, tmp_path):
    out = tmp_path / "eval"
    res = evaluate(tiny, tasks.TASKS, "validation", out_dir=out, batch_size=8, n=4, seed=0)
    assert set(res) == set(tasks.TASKS)
    for suite, r in res.items():
        assert r.identity.model_sha256 == models.weights_sha256(tiny)
        assert len(r.items) == 4 and r.n_unknown == 0
        floats = [isinstance(v, float) for v in r.metrics.values()]
        # captrack with 4 items cannot cover all 7 probes: an absent probe is None, not 0
        assert all(floats) if suite != "captrack" else sum(floats) >= 2
    again = rescore(out)
    assert {k: v.model_dump() for k, v in again.items()} == {k: v.model_dump() for k, v in res.items()}
    stored = json.loads((out / "sql_target.validation.identity.json").read_text())
    assert stored["backend"] == "transformers" and stored["split"] == "validation"
    gens = (out / "sql_target.validation.generations.jsonl").read_text()
    (out / "sql_target.validation.generations.jsonl").write_text(gens.replace('"generation":"', '"generation":"x', 1))
    with pytest.raises(BadInput, match="altered"):
        rescore(out)


def test_agent_eval_cli_prints_json(tiny, tmp_path, capsys):
    from agent.cli.main import main

    rc = main(["eval", "--model", str(tiny), "--suite", "function/source", "--split", "validation", "--n", "3",
               "--out", str(tmp_path / "o"), "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["n_items"] == 3 and isinstance(out["metrics"]["ast_acc"], float)
    assert main(["eval", "--model", str(tmp_path / "missing"), "--suite", "ifeval", "--json"]) == 2


def test_weights_hash_is_the_file_hash_for_one_file(tiny):
    from experience_bank.hashing import file_sha256

    assert models.weights_sha256(tiny) == file_sha256(str(tiny / "model.safetensors"))


def test_agent_eval_cli_on_real_data(tiny, tmp_path, capsys):
    from agent.cli.main import main

    rc = main(["eval", "--model", str(tiny), "--suite", "ifeval", "--data", "shipped", "--split", "test",
               "--n", "3", "--out", str(tmp_path / "o"), "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["n_items"] == 3 and isinstance(out["metrics"]["prompt_strict"], float)


def test_vllm_backend_is_an_optional_extra(tiny):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(BadInput, match="use backend: openai \\(docs/gpu.md\\)"):
        generate(str(tiny), [[{"role": "user", "content": "hi"}]], backend="vllm")


def test_openai_backend_through_a_fake_client(monkeypatch):
    import types

    import openai

    seen = []

    class FakeCompletions:
        def create(self, **kw):
            seen.append(kw)
            msg = types.SimpleNamespace(content=kw["messages"][-1]["content"].upper())
            return types.SimpleNamespace(choices=[types.SimpleNamespace(message=msg)])

    class FakeClient:
        def __init__(self):
            self.chat = types.SimpleNamespace(completions=FakeCompletions())

    monkeypatch.setattr(openai, "OpenAI", FakeClient)
    out = generate("served-model", [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
                   backend="openai", max_new_tokens=5, seed=3)
    assert out == ["A", "B"]
    assert seen[0]["temperature"] == 0.0 and seen[0]["max_tokens"] == 5 and seen[0]["model"] == "served-model"


@pytest.fixture(scope="module")
def test_world_model():
    from agent.world.embedded import ensure_world

    return models.load(ensure_world("test", threads=1).base_dir)


def test_batched_equals_per_example_on_the_test_world(test_world_model):
    """Greedy outputs do not depend on batching: 2 prompts of every suite, batches of 8 vs one by one."""
    prompts = [x["messages"] for t in tasks.TASKS for x in tasks.items(t, "validation", 0, 2)]
    batched = generate(test_world_model, prompts, batch_size=8, max_new_tokens=48)
    single = generate(test_world_model, prompts, batch_size=1, max_new_tokens=48)
    assert batched == single and len(set(batched)) > 4  # identical, and not one degenerate answer


def test_rows_stop_at_im_end_and_leave_the_batch_once_stopped(test_world_model, monkeypatch):
    """With room for 200 tokens, each batch runs only until its longest row emits <|im_end|>,
    every decode step feeds one token (the KV cache is on, whatever config.use_cache says), and
    a row that has stopped leaves the batch within PRUNE_EVERY tokens; the texts are those of one
    generate() call over the whole batch."""
    from evaluators import generate as gen_module
    from evaluators.generate import PRUNE_EVERY, length_batches, stop_ids

    net, tok = test_world_model
    assert tok.convert_tokens_to_ids("<|im_end|>") in stop_ids(net, tok)
    prompts = [x["messages"] for t in ("sql/source", "ifeval") for x in tasks.items(t, "validation", 0, 4)]
    inputs = []
    hook = net.register_forward_pre_hook(lambda m, a, kw: inputs.append(kw["input_ids"].shape), with_kwargs=True)
    try:
        gens = generate(test_world_model, prompts, batch_size=4, max_new_tokens=200)
    finally:
        hook.remove()
    lengths = [len(tok(g, add_special_tokens=False)["input_ids"]) for g in gens]
    assert max(lengths) < 150  # every row stopped on its own
    prefills = [i for i, s in enumerate(inputs) if s[1] > 1]
    assert len(prefills) == 2 and all(inputs[i][0] == 4 for i in prefills)  # one prefill per batch
    assert all(s[1] == 1 for i, s in enumerate(inputs) if i not in prefills)  # then one token a step
    for a, b in zip(prefills, prefills[1:] + [len(inputs)]):
        sizes = [s[0] for s in inputs[a:b]]
        assert sizes == sorted(sizes, reverse=True)  # rows only ever leave a batch
    prompt_lens = [len(tok(tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True),
                           add_special_tokens=False)["input_ids"]) for p in prompts]
    batches = length_batches(prompt_lens, 4)
    # a batch decodes until its longest row's stop token, within a token of re-tokenising its text
    expected = sum(max(lengths[i] for i in b) + 1 for b in batches)
    assert abs(len(inputs) - expected) <= 2 and len(inputs) < 2 * 200
    # each row rides along at most to the end of the chunk it stopped in (+2: its stop token and
    # re-tokenising), not to its batch's longest row
    slots = sum(s[0] for s in inputs)
    assert slots <= sum(PRUNE_EVERY * -(-(n + 2) // PRUNE_EVERY) for n in lengths) < 4 * len(inputs)
    monkeypatch.setattr(gen_module, "PRUNE_EVERY", 10_000)  # one generate() call per batch
    assert generate(test_world_model, prompts, batch_size=4, max_new_tokens=200) == gens


def test_length_batches_sort_by_length_and_cover_every_row():
    from evaluators.generate import length_batches

    out = length_batches([5, 1, 9, 3, 7], 2)
    assert out == [[1, 3], [0, 4], [2]]


def test_a_model_whose_cache_cannot_drop_rows_decodes_each_batch_in_one_call(tiny):
    # A static cache (set in the model's generation config) has no rows to drop: every forward
    # keeps the whole batch, and the texts are those of the pruning path.
    from evaluators.generate import _dynamic_cache

    net, tok = models.load(tiny)
    prompts = [x["messages"] for x in tasks.items("captrack", "test", 0, n=4)]
    assert _dynamic_cache(net) is not None
    pruned = generate((net, tok), prompts, batch_size=4, max_new_tokens=12)
    net.generation_config.cache_implementation = "static"
    assert _dynamic_cache(net) is None
    sizes = []
    hook = net.register_forward_pre_hook(lambda m, a, kw: sizes.append(kw["input_ids"].shape[0]), with_kwargs=True)
    try:
        whole = generate((net, tok), prompts, batch_size=4, max_new_tokens=12)
    finally:
        hook.remove()
    assert whole == pruned and sizes and set(sizes) == {4}
