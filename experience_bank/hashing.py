"""Canonical JSON, content hashes and strict JSON parsing.

A content hash is sha256 over canonical JSON: keys sorted, no whitespace, UTF-8, floats in
Python's shortest round-trip form (stable across processes and platforms), NaN/inf refused.
Parsing is stricter than `json.loads`: duplicate keys and NaN/Infinity are errors, because a
record that parses two ways cannot have one hash.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from pydantic import BaseModel

from experience_bank.errors import BadInput


def _plain(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    return obj


def canonical_json(obj: Any) -> str:
    """The one serialisation that every hash in the project is taken over."""
    return json.dumps(_plain(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of a record or plain JSON value."""
    return sha256_text(canonical_json(obj))


def decision_hash(fields: dict) -> str:
    """A Decision's own hash: canonical JSON of every field but `decision_hash` (the one
    definition the authorizer, the bank and the audit all use)."""
    return content_hash({k: v for k, v in fields.items() if k != "decision_hash"})


def chain_hash(prev_hash: str, body_hash: str) -> str:
    """Link of an append-only chain: the 0x00 separator keeps (prev, body) unambiguous."""
    return hashlib.sha256(prev_hash.encode() + b"\x00" + body_hash.encode()).hexdigest()


def file_sha256(path: str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BadInput(f"duplicate JSON key {key!r}: remove one of the two values")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise BadInput(f"JSON constant {name} is not allowed: use a finite number")


MAX_DEPTH = 100
"""Deepest nesting of arrays/objects a JSON text may have: the project's records nest about 8
deep; json's recursive parser would raise RecursionError somewhere past a thousand."""

INT_BOUNDS = (-(2**63), 2**63 - 1)
"""JSON integers must fit SQLite's 64-bit INTEGER (the bank stores them); a 10**400 stage or a
5,000-digit number is a malformed input, not a value."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _depth(text: str) -> int:
    """Deepest bracket nesting outside strings: a regex scan, no recursion."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _int(digits: str) -> int:
    lo, hi = INT_BOUNDS
    if len(digits.lstrip("-")) > 19 or not lo <= int(digits) <= hi:
        raise BadInput(f"integer {digits[:20]}{'...' if len(digits) > 20 else ''} ({len(digits)} characters) "
                       "does not fit in 64 bits: use a smaller number")
    return int(digits)


def _float(digits: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise BadInput(f"number {digits[:20]} overflows to infinity: use a finite number")
    return value


def loads_strict(text: str) -> Any:
    """json.loads that refuses duplicate keys, NaN/Infinity, overflowing numbers, integers beyond
    64 bits, nesting deeper than MAX_DEPTH and unpaired surrogates (every one raises BadInput)."""
    if not isinstance(text, str):
        raise BadInput(f"JSON input must be text, got {type(text).__name__}: decode it as UTF-8 first")
    if (depth := _depth(text)) > MAX_DEPTH:
        raise BadInput(f"JSON nested {depth} levels deep (at most {MAX_DEPTH}): flatten the document")
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                          parse_int=_int, parse_float=_float)
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # a "\ud800" escape cannot be hashed
    except json.JSONDecodeError as exc:
        raise BadInput(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except BadInput:
        raise
    except UnicodeEncodeError:
        raise BadInput("JSON holds an unpaired surrogate escape (\\ud800-\\udfff): use valid Unicode text") from None
    except (RecursionError, ValueError) as exc:  # the bounds above should make these unreachable
        raise BadInput(f"JSON cannot be parsed ({type(exc).__name__}): simplify the document") from None
    return data
