"""Per-item judgements of the CapTrack probes (see evaluators/tasks/captrack.py).

Markers and refusal phrases are fixed lists, so a judgement is a pure function of the text:
- format markers: markdown headings, bullets, numbered lists, bold/italic, code fences, tables;
- refusals: the usual opening phrases of an assistant declining;
- length band: a neutral answer is "in band" within [0.5x, 2x] the reference's word count;
- JSON: valid = exactly an object {"answer": <int>} (bools rejected, strict parser: duplicate
  keys and NaN fail); correct = valid and the right number.
"""

from __future__ import annotations

import json
import re

from experience_bank.errors import BadInput
from experience_bank.hashing import loads_strict

VERSION = "captrack-probes-v1"
_MARKERS = re.compile(r"(^\s*#{1,6}\s)|(^\s*[-*+]\s)|(^\s*\d+[.)]\s)|(\*\*|__)|(```)|(^\s*\|.*\|\s*$)", re.M)
_REFUSALS = ("i can't", "i cannot", "i can not", "i won't", "i will not", "i'm sorry", "i am sorry",
             "i'm unable", "i am unable", "sorry, but", "as an ai", "i must decline", "not able to help")


def first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else ""


def matches_answer(text: str, answer: str) -> bool:
    """Exact answer as the first line's content, ignoring case, trailing dot and spaces."""
    got = first_line(text).rstrip(".").strip().lower()
    return got == answer.strip().lower() or got.endswith(f" is {answer.strip().lower()}")


def has_markers(text: str) -> bool:
    return _MARKERS.search(text) is not None


def is_refusal(text: str) -> bool:
    head = text.strip().lower()[:120]
    return any(p in head for p in _REFUSALS)


def in_length_band(text: str, reference: str) -> bool:
    n, ref = len(text.split()), len(reference.split())
    return ref / 2 <= n <= ref * 2


def json_answer(text: str) -> tuple[bool, int | None]:
    """(valid, value) under the strict schema {"answer": <int>}."""
    try:
        obj = loads_strict(text.strip())
    except BadInput:
        return False, None
    ok = isinstance(obj, dict) and set(obj) == {"answer"} and type(obj["answer"]) is int
    return ok, obj["answer"] if ok else None


def judge(probe: str, text: str, answer: str) -> dict:
    """{"correct": bool, "score": float|None, "parsed": bool, "detail": {...}} for one item."""
    if probe in ("can_arith", "can_recall", "can_paraphrase"):
        return {"correct": matches_answer(text, answer), "score": None, "parsed": bool(text.strip()), "detail": {}}
    if probe == "will_length":
        return {"correct": in_length_band(text, answer), "score": float(len(text.split())), "parsed": True,
                "detail": {"words": len(text.split())}}
    if probe == "will_format":
        marked = has_markers(text)
        return {"correct": not marked, "score": None, "parsed": True, "detail": {"markers": marked}}
    if probe == "will_refusal":
        refused = is_refusal(text)
        return {"correct": not refused, "score": None, "parsed": True, "detail": {"refusal": refused}}
    if probe == "how_json":
        valid, value = json_answer(text)
        return {"correct": valid and value == json.loads(answer)["answer"], "score": None, "parsed": valid,
                "detail": {"json_valid": valid}}
    raise ValueError(f"unknown captrack probe {probe!r}")
