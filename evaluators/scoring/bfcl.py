"""Function-call AST match with BFCL's own checker (bfcl_eval.eval_checker.ast_checker).

Why the stub: ast_checker imports `bfcl_eval.constants.model_config`, which imports every
provider SDK; the checker only reads `underscore_to_dot` from it, so a mapping that
always answers False stands in. Model output in our `json-call` protocol
(`[{"name", "arguments"}]`) is decoded to BFCL's `[{name: {param: value}}]` first.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
from functools import cache

VERSION = "bfcl-eval-2026.3.23-ast"


@dataclasses.dataclass
class _ModelConfig:
    underscore_to_dot: bool = False  # our models emit dotted names as they are


class _AnyModel(dict):
    def __missing__(self, key):
        return _ModelConfig()


@cache
def _checker():
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.MODEL_CONFIG_MAPPING = _AnyModel()
        sys.modules[name] = stub
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    return ast_checker, Language.PYTHON


def decode(text: str) -> list[dict] | None:
    """`[{"name": f, "arguments": {...}}]` -> `[{f: {...}}]`; None when not in that protocol."""
    match = re.search(r"\[.*\]", text, re.S)
    if not match:
        return None
    try:
        calls = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for call in calls:
        if not (isinstance(call, dict) and isinstance(call.get("name"), str)
                and isinstance(call.get("arguments"), dict)):
            return None
        out.append({call["name"]: call["arguments"]})
    return out


def check(functions: list[dict], decoded: list[dict], ground_truth: list[dict], category: str) -> dict:
    """BFCL's verdict: {"valid": bool, "error": [...], "error_type": str}."""
    ast_checker, python = _checker()
    return ast_checker(functions, decoded, ground_truth, python, category, "posttrain-agent")
