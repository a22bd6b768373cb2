"""Canonical JSON, content hashes and strict JSON parsing.

A content hash is sha256 over canonical JSON: keys sorted, no whitespace, UTF-8, floats in
Python's shortest round-trip form (stable across processes and platforms), NaN/inf refused.
The bytes are those of `json.dumps`; a validated record takes orjson's path to them (10x
faster, which is what a 1e6-record import is made of) wherever orjson's output is provably
the same bytes, and `json.dumps` elsewhere.
Parsing is stricter than `json.loads`: duplicate keys and NaN/Infinity are errors, because a
record that parses two ways cannot have one hash.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

import orjson
from pydantic import BaseModel

from experience_bank.errors import BadInput


def _plain(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    return obj


_ORJSON = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
           | orjson.OPT_PASSTHROUGH_SUBCLASS)
# Where orjson's number text can differ from Python's repr: an exponent (Python writes 1e-05,
# orjson 1e-5; both always sign it) and 1e-5 <= |x| < 1e-4, which orjson writes as 0.0000...
# A string that merely looks like one only costs the slow path. Strings, key order (code
# points = UTF-8 byte order) and integers are the same bytes; tests/test_hashing.py compares
# both paths over generated values. Two literal searches, not one regex: a character class
# at the start of a pattern makes `re` try every position (9 us a record against 2).
_EXPONENT = re.compile(rb"e[-+]")
_DIGITS = b"0123456789"


def _maybe_not_repr(out: bytes) -> bool:
    if b"0.0000" in out:
        return True
    if _EXPONENT.search(out) is None:  # the usual record: no loop at all
        return False
    return any(m.start() > 0 and out[m.start() - 1] in _DIGITS for m in _EXPONENT.finditer(out))


def _json(plain: Any) -> str:
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _encode(plain: Any, validated: bool) -> str:
    """Canonical JSON of a plain value; orjson's bytes where they are provably json.dumps's.

    `validated`: the value is a dump of a model whose validation refuses NaN/inf (orjson
    writes NaN as null where json.dumps raises)."""
    if validated:
        try:
            out = orjson.dumps(plain, option=_ORJSON)
        except TypeError:  # a value orjson does not take (a >64-bit int, a surrogate): json.dumps decides
            out = None
        if out is not None and not _maybe_not_repr(out):
            return out.decode()
    return _json(plain)


def _validated(obj: Any) -> bool:
    return isinstance(obj, BaseModel) and obj.model_config.get("allow_inf_nan") is False


def json_dumps_canonical(obj: Any) -> str:
    """canonical_json through `json.dumps` alone: the definition the orjson path must match."""
    return _json(_plain(obj))


def canonical_json(obj: Any) -> str:
    """The one serialisation that every hash in the project is taken over."""
    return _encode(_plain(obj), _validated(obj))


def canonical_json_and_part(obj: BaseModel, part: str) -> tuple[str, str]:
    """canonical_json of a record and of one of its fields, from one model dump (a record's
    row needs its body and its source context's hash: half the cost of an import)."""
    plain, validated = obj.model_dump(mode="json"), _validated(obj)
    return _encode(plain, validated), _encode(plain[part], validated)


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


def _canonical_value(text: str) -> Any | None:
    """The value of a text that is canonical JSON already (what the bank stores and exports),
    parsed by orjson; None where the strict parser below must decide.

    Exact: orjson keeps the last of duplicate keys, so a text with duplicates re-serialises
    shorter and is not equal; it refuses NaN, overflow and unpaired surrogates itself; integers
    within 53 bits are within 64; nesting is at most the number of brackets. When the text is
    equal to the value's canonical bytes, json.loads would have read the same value."""
    if text.count("{") + text.count("[") > MAX_DEPTH:
        return None
    try:
        value = orjson.loads(text)
        out = orjson.dumps(value, option=_ORJSON | orjson.OPT_STRICT_INTEGER)
    except (ValueError, TypeError):  # orjson.JSONDecodeError / JSONEncodeError
        return None
    # Equal bytes: the text is orjson's own writing of the value (exponent floats included), and
    # both parsers round every number text to the same double.
    return value if out == text.encode("utf-8", "surrogatepass") else None


def loads_strict(text: str) -> Any:
    """json.loads that refuses duplicate keys, NaN/Infinity, overflowing numbers, integers beyond
    64 bits, nesting deeper than MAX_DEPTH and unpaired surrogates (every one raises BadInput).
    A canonical text (a stored or exported record) takes orjson's path to the same value: 15x
    faster on a 1.9 KB record (6.6 us against 98), which is what importing 1e6 records is made of."""
    if not isinstance(text, str):
        raise BadInput(f"JSON input must be text, got {type(text).__name__}: decode it as UTF-8 first")
    if (value := _canonical_value(text)) is not None:
        return value
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
