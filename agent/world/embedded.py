"""The embedded world: a recipe, the base model built from it, and the cache that keeps it.

A world is fully determined by its `Recipe` (model config, tokenizer size, pretraining
mixture, steps, seed, build threads), the content hashes of the datasets it is pretrained on,
and the build environment the weights depend on but the build cannot pin (`store.BuildEnv`:
library versions, CPU kernel level, machine). Their hash is the world's id and keys the cache,
so a changed generator, recipe or environment builds a new world instead of silently reusing a
stale one, and one id names one set of weights (docs/world-identity.md).

Cache layout (root: `$AGENT_CACHE`, else `~/.cache/posttrain-agent`):

    worlds/<size>-<hash12>/base/        the out-of-the-box parent (safetensors + tokenizer)
    worlds/<size>-<hash12>/world.json   the World manifest (hashes, build seconds)
    worlds/<size>-<hash12>/seed-bank/   L(0), built by agent.world.seed_bank

Everything is written to a temporary sibling and renamed into place, so a crash never
leaves a half-built world that looks complete. Loading never touches the hub.

The `smol` size is not built here: it is converted from a GGUF (agent/smol.py).

Measured on the 2-core machine (Nov 2026; other engineers' jobs shared the cores, load 4-7):
- test (~0.14M params, 150 steps): 2.5 min with 1 torch thread under that load, and ~9 min
  when pytest left torch at 2 threads (oversubscription); the cached call takes < 0.1 s in
  process, ~5 s in a fresh process (the recipe hash regenerates the datasets' pools).
- an earlier default (1M params, 500 steps x 32): 25 min under load; it scored
  sql/source 16.7, function/source 50.0, IFEval prompt/inst strict 64.6/75.3, CapTrack
  json-valid 100 / length 71.4, but 0 on finance (source and target) and on every target
  suite: the model learned the templates, not copying from context.
- default v1 (2.4M params, 800 steps x 32, BPE merging digits into numbers, 0.63 s/step):
  sql/source 68.8, function/source 87.5, IFEval 79.7/86.5 but 0 on finance/source and on
  CapTrack arithmetic, recall and paraphrase (validation, 64 items): it answered every
  arithmetic question with a frequent number (-71.8 for every percentage change).
- the current default (world-v2; measured 30 Nov 2026 on an idle machine): digits are single
  tokens (agent/tokenizer.py), captrack/train holds arithmetic drills and eight phrasings
  per taught fact, finance/source's gold quotes its evidence row and program, and each step's
  32 random rows are split into 4 length-sorted micro-batches (transformers'
  batch_rebalance sampler). 1400 steps in 661 s, 0.47 s/step (random batches of 32 were
  0.98 s/step). Length-sorted batches instead (group_by_length) were as fast but fed runs
  of same-task steps, and that base collapsed (function/source 0, IFEval prompt strict 7.8).
  Scores: README.md "Sizes and build times". Still weak: multi-digit arithmetic over a
  table (0 of 148 finance/source arithmetic items on the test split; the model quotes the
  right row name with wrong digits) — finance/source is non-zero through its yes/no
  `greater` questions, at about chance (27 of 52).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from importlib.metadata import version
from pathlib import Path

from evaluators import tasks
from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash, file_sha256, sha256_text
from experience_bank.records import ModelRef

from agent.progress import Progress
from agent.world.portable import build_pinned, numerics_mode, pinned_env
from agent.world.smol import ensure_smol_world
from agent.world.store import BuildEnv, World, load_world, publish_world, seed_datasets, world_dir
from agent.world.tokenizer import train_tokenizer, world_texts


WORLD_FORMAT = "world-v3"
"""Bumped when the build code changes in a way that changes the weights."""



@dataclass(frozen=True)
class Recipe:
    """Everything that determines the base model (hashed into the cache key)."""

    size: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_length: int
    mixture: tuple[tuple[str, int], ...]
    """(dataset id, examples drawn) of the pretraining mixture: source tasks, a little target data, retention data."""
    steps: int
    batch_size: int
    learning_rate: float
    tokenizer_rows: int
    """Rows drawn from each of the world's training pools to train the tokenizer."""
    early_step: int = 0
    """Pretraining step whose weights are kept as `early/`: an earlier, weaker checkpoint of the
    base's own lineage, where the source tasks still have headroom (the seed bank's usual
    source parent; agent/world/seed_bank.py)."""
    seed: int = 0
    threads: int = 1
    """torch intra-op threads of the build, whatever the caller set (`--threads` only sets what
    runs after it). The thread count decides how CPU kernels may split a sum, so it is part of
    the recipe, not of the caller. Both sizes build with 1: on a 2-core machine that other work
    shares, 2 threads built the test base in 1,013 s against 162 s with 1, and a default build
    took 4-6x longer (world-v3's base, built with 2 threads on an idle machine in 464 s, keeps its
    own id: docs/results/world-default.md)."""


# Source tasks carry most of the mixture. A small share of each target's train pool is in
# it too, as a real base model has seen data like its later targets: with source data alone
# the base scored 0 on every target suite (it learned the formats, not the shift), which
# leaves the gate nothing to protect there. ifeval/captrack train pools give it instruction
# following to keep and something to forget; captrack/train is taken whole (a count above
# its size takes all of it) so every taught fact and arithmetic drill is seen. function/target
# gets 500 rows: with 250 (and the 400-fact captrack pool) the base copied the query's numbers
# wrongly and scored 0 of 48 on function/target's adoption split (world bf7cbc8577e2).
_MIX = ("finance/source/train", "sql/source/train", "function/source/train",
        "finance/target/train", "sql/target/train", "function/target/train", "ifeval/train", "captrack/train")

RECIPES: dict[str, Recipe] = {
    "test": Recipe(size="test", vocab_size=1024, hidden_size=64, intermediate_size=192,
                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   max_length=512, mixture=tuple(zip(_MIX, (400, 400, 400, 100, 100, 100, 300, 300))),
                   steps=150, batch_size=16, learning_rate=3e-3, tokenizer_rows=200, early_step=75),
    "default": Recipe(size="default", vocab_size=2048, hidden_size=192, intermediate_size=512,
                      num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2, head_dim=32,
                      max_length=512, mixture=tuple(zip(_MIX, (1000, 1000, 1000, 250, 250, 500, 1000, 10_000))),
                      steps=1600, batch_size=32, learning_rate=2e-3, tokenizer_rows=1000,
                      early_step=800, threads=1),
}


MAX_WORLD_SEED = 2**31 - 1


def recipe_for(size: str, world_seed: int = 0) -> Recipe:
    """The recipe of a world size at a world seed: the same recipe, another draw of everything
    seeded (pretraining order and initialisation, every task pool and split, the seed bank's
    source-context assignment), so one recipe gives many worlds."""
    if size not in RECIPES:
        raise BadInput(f"unknown world size {size!r}: choose one of {', '.join([*RECIPES, 'smol'])}")
    check_world_seed(world_seed)
    return replace(RECIPES[size], seed=world_seed)


def check_world_seed(world_seed: int) -> None:
    if isinstance(world_seed, bool) or not isinstance(world_seed, int) or not 0 <= world_seed <= MAX_WORLD_SEED:
        raise BadInput(f"world seed {world_seed!r} is not an integer in 0..{MAX_WORLD_SEED}: pass --world-seed N")


BUILD_LIBRARIES = ("torch", "transformers", "trl", "tokenizers", "accelerate")
"""The libraries whose versions the built weights depend on (tokenizers trains the vocabulary)."""


def build_env() -> BuildEnv:
    """The environment this process builds worlds in (what BuildEnv names): its own (native), or
    under $AGENT_WORLD_NUMERICS=portable the pinned child's (agent/world/portable.py)."""
    return portable_env() if numerics_mode() == "portable" else native_env()


@functools.cache
def portable_env() -> BuildEnv:
    """The pinned child's build environment: the same on every x86-64 machine with AVX2 (asked once
    per process: a child start, a few seconds)."""
    return BuildEnv(**pinned_env())


def native_env() -> BuildEnv:
    """This process's own build environment."""
    import torch  # noqa: PLC0415 (torch)

    return BuildEnv(libraries={lib: version(lib) for lib in BUILD_LIBRARIES},
                    cpu=torch.backends.cpu.get_cpu_capability(), machine=platform.machine(),
                    numerics=numerics_fingerprint())


@functools.cache
def numerics_fingerprint() -> str:
    """Hash of float32 results this machine computes at the default world's shapes (projections,
    the vocabulary head, attention scores and their transposed products, softmax, RMS norm), on one
    thread. Two machines with the same libraries and kernel level can still round differently (a
    BLAS picks its kernels by CPU vendor): they then build different weights from one recipe, and
    this tells them apart in milliseconds instead of after a build. Equal fingerprints do not prove
    equal weights; the base weights hash, which results name, is still checked."""
    import torch  # noqa: PLC0415 (torch)

    g = torch.Generator().manual_seed(0)
    x, w_up, w_down = (torch.randn(s, generator=g) for s in ((256, 192), (192, 512), (512, 192)))
    head, q, k = torch.randn(192, 2048, generator=g), torch.randn(6, 128, 32, generator=g), torch.randn(6, 128, 32, generator=g)
    with pinned_threads(1):
        h = x @ w_up
        outs = [h, h @ w_down, x @ head, x.T @ h, h @ w_down.T.contiguous().T, torch.softmax(q @ k.transpose(1, 2), -1),
                x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)]
    return content_hash([hashlib.sha256(o.contiguous().numpy().tobytes()).hexdigest() for o in outs])[:16]


def recipe_sha256(recipe: Recipe, env: BuildEnv | None = None) -> str:
    """The world's id: hash of the recipe, the build format, the pretraining data's content
    hashes and the build environment (this process's when `env` is None)."""
    data = seed_datasets(recipe.seed)  # the tokenizer reads all
    env = env or build_env()
    return content_hash({"format": WORLD_FORMAT, "recipe": asdict(recipe), "data": data, "build": asdict(env)})


def ensure_world(size: str = "default", *, world_seed: int = 0, progress: Progress | None = None,
                 threads: int | None = None) -> World:
    """The world of this size and world seed: loaded from the cache, or built (and cached) when missing.

    `threads` sets torch's intra-op threads for what the caller runs next (None: leave them);
    the build itself always runs with the recipe's `threads`, so it does not change the
    weights. A cached world is served only when its weights still hash to what it recorded
    (store.load_world; BadInput otherwise)."""
    if size == "smol":
        if world_seed:
            raise BadInput("the smol world is converted from a GGUF, not built from a seed: drop --world-seed")
        return ensure_smol_world(progress=progress)
    recipe = recipe_for(size, world_seed)
    env = build_env()
    rhash = recipe_sha256(recipe, env)
    root = world_dir(size, rhash)
    if threads:
        import torch  # noqa: PLC0415 (torch)

        torch.set_num_threads(threads)
    if (root / "world.json").exists():
        return load_world(root, rhash)
    return _build(recipe, env, rhash, root, progress)


def cached_world(size: str, world_seed: int = 0) -> World | None:
    """The world of this size and seed if it is cached here, after load_world's checks (None: not
    built here; nothing is built)."""
    rhash = recipe_sha256(recipe_for(size, world_seed))
    root = world_dir(size, rhash)
    return load_world(root, rhash) if (root / "world.json").exists() else None


def _build(recipe: Recipe, env: BuildEnv, rhash: str, root: Path, progress: Progress | None) -> World:
    def make(tmp: Path) -> World:
        t0 = time.monotonic()
        if numerics_mode() == "portable":
            build_pinned(recipe, tmp / "base", progress)
        else:
            build_base_model(recipe, tmp / "base", progress)
        return _describe(recipe, env, rhash, root, tmp / "base", time.monotonic() - t0)

    return publish_world(root, make)


def _describe(recipe: Recipe, env: BuildEnv, rhash: str, root: Path, built_base: Path, seconds: float) -> World:
    from transformers import AutoTokenizer  # noqa: PLC0415 (transformers)

    # the same identity evaluators record (sha256 of the loaded tokenizer's template text)
    tsha = sha256_text(AutoTokenizer.from_pretrained(built_base, local_files_only=True).chat_template)
    early_sha = file_sha256(str(built_base.parent / "early" / "model.safetensors"))
    early = ModelRef(id=f"world-{recipe.size}/early-{recipe.early_step}", sha256=early_sha, arch="qwen3",
                     chat_template_sha256=tsha)
    model = ModelRef(id=f"world-{recipe.size}/base", sha256=file_sha256(str(built_base / "model.safetensors")),
                     arch="qwen3", chat_template_sha256=tsha, lineage=(early_sha,))
    datasets = seed_datasets(recipe.seed)
    return World(size=recipe.size, seed=recipe.seed, recipe_sha256=rhash, root=str(root),
                 base_dir=str(root / "base"), model=model, chat_template_sha256=tsha,
                 datasets=datasets, build_seconds=round(seconds, 1),
                 early_dir=str(root / "early"), early_model=early, build=env)


# --- building the base model ------------------------------------------------------------


def pretraining_rows(recipe: Recipe) -> list[dict]:
    """The pretraining mixture as TRL prompt/completion rows, in a fixed seeded order."""

    rows: list[dict] = []
    for ds, n in recipe.mixture:
        pool = tasks.sft_examples(ds, recipe.seed)
        rng = random.Random(f"{recipe.seed}:{ds}")
        rows += [pool[i] for i in sorted(rng.sample(range(len(pool)), min(n, len(pool))))]
    random.Random(recipe.seed).shuffle(rows)
    return [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]


@contextmanager
def pinned_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to `n` inside, and back to the caller's count after."""
    import torch  # noqa: PLC0415 (torch)

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_base_model(recipe: Recipe, out_dir: Path, progress: Progress | None = None) -> None:
    """Train the tokenizer, initialise a Qwen3-style model and pretrain it with TRL's SFTTrainer,
    on the recipe's thread count whatever the caller set."""
    with pinned_threads(recipe.threads):
        _build_base_model(recipe, out_dir, progress)


def _build_base_model(recipe: Recipe, out_dir: Path, progress: Progress | None) -> None:
    import torch  # noqa: PLC0415 (torch)
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM  # noqa: PLC0415 (transformers)



    rows = pretraining_rows(recipe)
    # The tokenizer sees every training pool of the world (as a real tokenizer covers the
    # target domain's vocabulary); the model is pretrained on the mixture above.
    corpus = [r for ds in sorted(tasks.DATASET_IDS) for r in tasks.sft_examples(ds, recipe.seed, recipe.tokenizer_rows)]
    tok = train_tokenizer(world_texts(corpus), recipe.vocab_size, recipe.max_length)
    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=recipe.hidden_size, intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers, num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_key_value_heads, head_dim=recipe.head_dim,
        max_position_embeddings=recipe.max_length, tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None,
    )
    torch.manual_seed(recipe.seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                               do_sample=False)
    _pretrain(model, tok, rows, recipe, out_dir, progress)
    model.save_pretrained(out_dir)  # safetensors
    tok.save_pretrained(out_dir)


_ACCUM = 4
"""Micro-batches per pretraining step (the batch's rows split by length; see _pretrain)."""


def _pretrain(model, tok, rows: list[dict], recipe: Recipe, out_dir: Path, progress: Progress | None) -> None:
    from datasets import Dataset, disable_progress_bars  # noqa: PLC0415 (datasets)
    from transformers import TrainerCallback  # noqa: PLC0415 (transformers)
    from transformers.trainer_callback import PrinterCallback  # noqa: PLC0415 (transformers)
    from trl import SFTConfig, SFTTrainer  # noqa: PLC0415 (trl)

    class _Report(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == recipe.early_step:  # the lineage's earlier checkpoint
                kw["model"].save_pretrained(out_dir.parent / "early")
                tok.save_pretrained(out_dir.parent / "early")
            if progress:
                progress("pretrain", state.global_step, recipe.steps)

    disable_progress_bars()  # the caller's progress bar is the only one
    with tempfile.TemporaryDirectory() as scratch:
        args = SFTConfig(
            output_dir=scratch, max_steps=recipe.steps, per_device_train_batch_size=recipe.batch_size // _ACCUM,
            gradient_accumulation_steps=_ACCUM,
            learning_rate=recipe.learning_rate, lr_scheduler_type="cosine", warmup_steps=max(1, recipe.steps // 20),
            weight_decay=0.0, max_length=recipe.max_length, seed=recipe.seed, data_seed=recipe.seed,
            use_cpu=True, bf16=False, activation_checkpointing=False, report_to="none",
            dataloader_num_workers=0, dataloader_pin_memory=False, save_strategy="no",
            logging_steps=max(1, recipe.steps // 10), disable_tqdm=True,
            # Rows run from 20 tokens (arithmetic) to 180 (SQL with a schema): a random batch of
            # 32 pads to 2.1x its real tokens. batch_rebalance keeps each step's 32 rows random
            # but splits them into length-sorted micro-batches. (group_by_length also cut the
            # padding but feeds runs of same-length, i.e. same-task, steps; the base it built
            # collapsed on every suite.)
            train_sampling_strategy="batch_rebalance",
        )
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=tok, callbacks=[_Report()])
        trainer.remove_callback(PrinterCallback)  # the CLI shows a progress bar instead
        trainer.train()
        model.pretrain_log = [h for h in trainer.state.log_history if "loss" in h]


def load_base(world: World):
    """(model, tokenizer) of the world's base, from the local folder with the hub off."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 (transformers)

    return (AutoModelForCausalLM.from_pretrained(world.base_dir, local_files_only=True),
            AutoTokenizer.from_pretrained(world.base_dir, local_files_only=True))
