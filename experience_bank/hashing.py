"""Canonical JSON, content hashes and strict JSON parsing.

A content hash is sha256 over canonical JSON: keys sorted, no whitespace, UTF-8, floats in
Python's shortest round-trip form (stable across processes and platforms), NaN/inf refused.
Parsing is stricter than `json.loads`: duplicate keys and NaN/Infinity are errors, because a
record that parses two ways cannot have one hash.
"""

from __future__ import annotations

import hashlib
import json
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


def loads_strict(text: str) -> Any:
    """json.loads that refuses duplicate keys and NaN/Infinity (both raise BadInput)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise BadInput(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
