"""What `trl sft|grpo --config FILE` accepts, read from TRL itself: the dataclasses its CLI parses
(`trl sft`: ScriptArguments, SFTConfig, ModelConfig, DatasetMixtureConfig; `trl grpo`:
GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig), their fields' names and types,
and how its parser reads a YAML value. agent/world/usercards/recipes.py maps a recipe onto a card
with them; nothing here knows cards.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

from experience_bank.errors import BadInput


def _trl_classes(method: str) -> tuple[type, ...]:
    """The dataclasses `trl <method>` parses, in its order."""
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, ScriptArguments, SFTConfig  # noqa: PLC0415

    if method == "grpo":
        from trl.scripts.grpo import GRPOScriptArguments  # noqa: PLC0415
        return GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig
    return ScriptArguments, SFTConfig, ModelConfig, DatasetMixtureConfig


def trl_fields(method: str) -> dict[str, tuple[str, Any]]:
    """key -> (dataclass name, annotated type) over the dataclasses `trl <method>` parses."""
    out: dict[str, tuple[str, Any]] = {}
    for cls in _trl_classes(method):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out.setdefault(f.name, (cls.__name__, hints.get(f.name, f.type)))
    return out


def _accepts(value: Any, tp: Any) -> bool:
    """Whether a YAML value fits a dataclass annotation (None, bool, int, float, str, list, Literal,
    enums as their str values; anything else is left to the record's own validation)."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is None:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(value, a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (list, tuple):
        return isinstance(value, list)
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if isinstance(tp, type) and issubclass(tp, str):  # str enums (SchedulerType, ...)
        return isinstance(value, str)
    return True


def _type_name(tp: Any) -> str:
    return str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "")


def as_trl_reads(raw: dict, method: str, known: dict[str, tuple[str, Any]] | None = None) -> dict:
    """The file's values as `trl <method> --config` reads them. TrlParser makes each key an argparse
    default, and argparse passes a string default through its action's type, so `learning_rate: 1e-4`
    (a string to YAML 1.1, which wants a dot: 1.0e-4) is the float 1e-4 to TRL, and `use_peft: "true"`
    is True. Only where the field takes no string; a value its type refuses stays as written, and
    check_trl refuses it, as TRL's parser does. `known`: trl_fields(method), where the caller has it."""
    from trl import TrlParser  # noqa: PLC0415

    known = known if known is not None else trl_fields(method)
    # argparse has no public list of its actions; TRL's own set_defaults_with_config walks `_actions` too
    reads = {a.dest: a.type for a in TrlParser(_trl_classes(method))._actions if a.type is not None}  # noqa: SLF001
    out = dict(raw)
    for key, value in raw.items():
        if isinstance(value, str) and key in reads and key in known and not _accepts(value, known[key][1]):
            try:
                out[key] = reads[key](value)
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                pass
    return out


def check_trl(raw: dict, method: str, where: str, known: dict[str, tuple[str, Any]]) -> None:
    """BadInput naming the first key `trl <method>` has no field for, or whose value its type refuses."""
    for key, value in raw.items():
        if key not in known:
            raise BadInput(f"{where}: unknown key {key!r}: `trl {method}` has no such field (ScriptArguments, "
                           f"{'GRPOConfig' if method == 'grpo' else 'SFTConfig'}, ModelConfig); fix or remove it")
        cls, tp = known[key]
        if not _accepts(value, tp):
            raise BadInput(f"{where}: {key} = {value!r} is not a {_type_name(tp)} ({cls}.{key}); fix its type")
