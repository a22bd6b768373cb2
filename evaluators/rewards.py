"""Reward functions in TRL's form `(prompts, completions, **kwargs) -> list[float | None]`.

They read the `task` and `reference` (JSON text) columns of grpo_examples rows from kwargs.
A reward that does not apply to a row's task returns None for it (TRL ignores None for that
function), as does a row whose gold answer cannot be evaluated (UNKNOWN, not 0).
- execution: 1 if the SQL's result set equals the gold one (sandboxed), else 0;
- ast_match: 1 if bfcl_eval's AST checker accepts the call, else 0;
- numeric_match: TAT-QA F1 of the answer (equals EM for arithmetic / count answers);
- format: 1 if the completion is well-formed in its task's output protocol, else 0;
- placebo: 0 or 1 from a hash of the prompt and completion, whatever they say: the reward of
  a matched control (agent/world/controls.py), the same GRPO run with no signal in it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable

from evaluators.scoring import bfcl, sql_exec, tatqa
from evaluators.scoring.suites import judge_of

Reward = float | None


def _text(completion) -> str:
    """Conversational completions are [{"role": "assistant", "content": ...}]; standard ones are str."""
    return completion[-1]["content"] if isinstance(completion, list) else completion


def _rows(completions, kwargs):
    refs = kwargs["reference"]
    for completion, task, ref in zip(completions, kwargs["task"], refs, strict=True):
        yield _text(completion), task, json.loads(ref) if isinstance(ref, str) else ref


def _judged(family: str, completions, kwargs, value: Callable[[dict], Reward]) -> list[Reward]:
    # Each row is judged as its suite is scored (BIRD's rule for sql/target, Spider's for sql/source),
    # so a reward never teaches what the evaluation would count wrong.
    out = []
    for text, task, ref in _rows(completions, kwargs):
        out.append(value(judge_of(task)(ref, text, 0)) if task.split("/")[0] == family else None)
    return out


def execution(prompts, completions, **kwargs) -> list[Reward]:
    return _judged("sql", completions, kwargs, lambda r: None if r["correct"] is None else float(r["correct"]))


def ast_match(prompts, completions, **kwargs) -> list[Reward]:
    return _judged("function", completions, kwargs, lambda r: float(r["correct"]))


def numeric_match(prompts, completions, **kwargs) -> list[Reward]:
    return _judged("finance", completions, kwargs, lambda r: float(r["score"]))


def _well_formed(family: str, text: str) -> Reward:
    if family == "finance":
        parsed = tatqa.parse(text)
        return float(parsed is not None and bool(parsed[0]) and "Scale:" in text)
    if family == "sql":
        return float(sql_exec.extract_sql(text).lower().startswith(("select", "with")))
    if family == "function":
        return float(bfcl.decode(text) is not None)
    return None


def format(prompts, completions, **kwargs) -> list[Reward]:  # noqa: A001 - the card's reward name
    return [_well_formed(task.split("/")[0], text) for text, task, _ in _rows(completions, kwargs)]


def placebo(prompts, completions, **kwargs) -> list[Reward]:
    # Deterministic, so a control run is reproducible; a fair coin per (prompt, completion), so
    # GRPO's group advantages are as large as a real reward's and carry no information.
    out = []
    for prompt, completion in zip(prompts, completions, strict=True):
        text = json.dumps([prompt, _text(completion)], sort_keys=True, ensure_ascii=False)
        out.append(float(hashlib.sha256(text.encode()).digest()[0] & 1))
    return out


REWARDS: dict[str, Callable[..., list[Reward]]] = {
    "execution": execution, "ast_match": ast_match, "numeric_match": numeric_match, "format": format,
    "placebo": placebo}
