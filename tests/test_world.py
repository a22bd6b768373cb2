"""The test-size world builds deterministically, quickly, and is cached by its recipe hash."""

import json
import os
import time
from pathlib import Path

import pytest

from agent.world.tokenizer import CHAT_TEMPLATE, train_tokenizer
from agent.world.embedded import RECIPES, recipe_for
from agent.world.store import World
from experience_bank.errors import BadInput
from experience_bank.hashing import sha256_text


def test_tokenizer_chat_template_eos_and_pad_are_distinct():
    texts = ["SELECT COUNT(*) FROM t WHERE x > 3", '{"name": "f", "arguments": {}}', "What is 2 + 2?"] * 20
    tok = train_tokenizer(texts, vocab_size=300, model_max_length=128)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.eos_token_id != tok.pad_token_id
    msgs = [{"role": "user", "content": "What is 2 + 2?"}]
    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "4"}], tokenize=False)
    assert full.startswith(prompt) and full.endswith("4<|im_end|>\n")  # TRL needs the prompt to be a prefix
    ids = tok("SELECT é ✓")["input_ids"]
    assert tok.decode(ids) == "SELECT é ✓"  # byte-level: nothing is unknown
    assert tok.chat_template == CHAT_TEMPLATE
    # every digit is a token of its own, whatever merges BPE learned from the texts
    digits = [t.lstrip("Ġ") for t in tok.tokenize("What is 2024 + 17?") if t.lstrip("Ġ").isdigit()]
    assert digits == ["2", "0", "2", "4", "1", "7"]


def test_unknown_size_is_bad_input():
    with pytest.raises(BadInput):
        recipe_for("huge")


def test_world_manifest_round_trips():
    from experience_bank.records import ModelRef

    tsha = sha256_text("t")
    w = World(size="test", seed=0, recipe_sha256=sha256_text("r"), root="/x", base_dir="/x/base",
              model=ModelRef(id="world-test/base", sha256=sha256_text("w"), arch="qwen3", chat_template_sha256=tsha),
              chat_template_sha256=tsha, datasets={"a/train": sha256_text("a")})
    assert World.from_json(w.to_json()) == w


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    old = os.environ.get("AGENT_CACHE")
    os.environ["AGENT_CACHE"] = str(tmp_path_factory.mktemp("agent-cache"))
    yield Path(os.environ["AGENT_CACHE"])
    if old is None:
        del os.environ["AGENT_CACHE"]
    else:
        os.environ["AGENT_CACHE"] = old


def test_test_world_builds_is_cached_and_loads_offline(cache):
    from agent.world.embedded import ensure_world, load_base

    t0 = time.monotonic()
    seen = []
    world = ensure_world("test", progress=lambda phase, done, total: seen.append((phase, done, total)), threads=1)
    built = time.monotonic() - t0
    assert seen and seen[-1] == ("pretrain", RECIPES["test"].steps, RECIPES["test"].steps)
    assert Path(world.base_dir, "model.safetensors").is_file() and world.root.startswith(str(cache))
    assert json.loads(Path(world.root, "world.json").read_text())["recipe_sha256"] == world.recipe_sha256
    assert not [p for p in Path(world.root).parent.iterdir() if p.name.startswith(".")]  # no temp dirs left
    t1 = time.monotonic()
    again = ensure_world("test")
    assert again == world and time.monotonic() - t1 < 2.0
    print(f"test world built in {built:.1f} s (cached call {time.monotonic() - t1:.3f} s)")

    model, tok = load_base(world)
    assert model.config.model_type == "qwen3"
    assert model.generation_config.eos_token_id == tok.eos_token_id != tok.pad_token_id
    assert world.model.chat_template_sha256 == sha256_text(tok.chat_template)
    assert {"sql/target/train", "function/target-random/train"} <= set(world.datasets)


def test_world_cli_is_registered_and_refuses_unknown_cards(tmp_path, monkeypatch, capsys):
    from agent.cli.main import build_parser

    args = build_parser().parse_args(["world", "seed-bank", "--size", "test", "--bank", str(tmp_path / "b.sqlite")])
    assert args.func.__name__ == "cmd_seed_bank"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["world", "build", "--size", "huge"])


@pytest.mark.parametrize("argv", [["world", "build", "--size", "test"],
                                  ["world", "seed-bank", "--size", "test", "--bank", "b.sqlite"]])
@pytest.mark.parametrize("threads", ["0", "-1"])
def test_a_thread_count_below_one_is_refused_before_the_world(tmp_path, monkeypatch, capsys, argv, threads):
    """--threads -1 was a traceback from torch.set_num_threads (after the world was loaded or built);
    --threads 0 was silently taken."""
    from agent.cli.main import main

    def tripwire(*a, **k):
        raise AssertionError("the world was loaded before --threads was checked")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("agent.cli.world.ensure_world", tripwire)
    assert main([*argv, "--threads", threads]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"agent: error: --threads {threads} is refused (Input should be greater than or equal to 1): "
                   "pass how many CPU threads torch may use, e.g. --threads 1"]
    assert list(tmp_path.iterdir()) == []
