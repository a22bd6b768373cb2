"""TAT-QA exact match and F1 with the official scorer's semantics (tatqa_metric.py at 870accc).

Our own code, written from the facts of the official one, so that our numbers are the
published ones. Facts it follows (each has a case in tests/test_official_semantics.py):
- the answer is judged as ONE string: its spans are sorted as raw strings (so case and `$`
  decide the order), each rendered and joined with spaces; a number span becomes its
  SCALED value to 4 decimals (`123.2` + million == `123200000` + none), a text span gets
  the scale word appended; a span with `%` is its own percentage (`34.12%` -> 0.3412) and
  is never multiplied by the scale;
- a single unscaled numeric prediction also counts as the fraction it may mean
  (`0.2342` is right for 23.42 percent);
- normalisation is per space-separated token: lower case, punctuation dropped from
  non-numbers, numbers parsed (`$`, `,`, `(`, `)` ignored; `(12)` is -12 only without a
  thousands comma: `(1,234)` is +1234), articles removed;
- EM: the normalised strings are equal; F1: token-SET F1 of the two strings, rounded to
  2 decimals (no span alignment, no requirement that numbers inside text match);
  arithmetic and count answers score F1 := EM; an empty prediction scores 0.
Scale handling, number parsing and rounding are theirs, quirks included, because
published numbers include them.
"""

from __future__ import annotations

import math
import re
import string

import numpy as np

VERSION = "tatqa-official-870accc-v2"
SCALES = ("", "thousand", "million", "billion", "percent")
_SCALE_WORDS = (("hundred", 100), ("thousand", 1000), ("million", 1_000_000), ("billion", 1_000_000_000),
                ("percent", 0.01))
_NOT_IN_NUMBER = frozenset("'\"\\$€£¥%(),[]")
_FIRST_NUMBER = re.compile(r"([+-]?\d+(\.\d+)?)|([+-]?\.\d+)")
_WORD_SCALE = re.compile(r"[\d.]+\s?[a-zA-Z]+")
_NEGATIVE = re.compile(r"\([\d.\s]+\)")  # no comma inside: "(1,234)" stays positive, as theirs
_PERCENT = re.compile(r"[\d.\s]+%")
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def scale_factor(word: str) -> float:
    """The multiplier a scale word names (the first of hundred..percent it contains), else 1."""
    low = word.lower()
    return next((factor for name, factor in _SCALE_WORDS if name in low), 1)


def _clean(text: str) -> str:
    return "".join(ch for ch in text if ch not in _NOT_IN_NUMBER)


def _first_number(text: str) -> int | float | None:
    match = _FIRST_NUMBER.search(_clean(text))
    if match is None or not match.group(1):  # a leading ".5" matches only the third group: None
        return None
    if len(match.group(1)) > 4000:  # past Python's int-from-str limit the official raises; we read no number
        return None
    return float(match.group(1)) if "." in match.group(1) else int(match.group(1))


def is_number(text: str) -> bool:
    """A number, optionally followed by a scale word (`1.2 million`), after dropping $ , ( ) %."""
    words = " ".join(_clean(w) for w in text.split()).split()
    if not words:
        return False
    try:
        value = float(words[0])  # Python's float: "1e3", "1_000" and "inf" count, as theirs
    except ValueError:
        return False
    if math.isnan(value):
        return False
    return len(words) < 2 or scale_factor(words[1]) != 1


def to_number(text: str) -> int | float | None:
    """The value, with a scale word, accounting parentheses and `%` applied, to 4 decimals."""
    number = _first_number(text)
    if number is None:
        return None
    word = _WORD_SCALE.search(text)
    scale = scale_factor(word.group(0)) if word else 1
    negative = -1 if _NEGATIVE.search(text.strip()) else 1
    percent = 0.01 if _PERCENT.search(text.strip()) else 1
    return round(number * scale * negative * percent, 4)


def _norm_token(token: str) -> str:
    token = token.lower()
    if not is_number(token):
        token = "".join(ch for ch in token if ch not in _PUNCTUATION)
    if is_number(token):
        token = str(to_number(token))  # "None" when no digits parse, as theirs
    return " ".join(_ARTICLES.sub(" ", token).split())


def normalize(text: str) -> str:
    """Lower case, no punctuation or articles, numbers as values; tokens split at single spaces."""
    return " ".join(part for part in (_norm_token(t) for t in text.split(" ")) if part.strip())


def answer_string(spans: list, scale: str) -> str:
    """The one string an answer is judged as: raw-sorted spans, numbers scaled, scale words appended."""
    out = []
    for span in sorted(spans):
        text = str(span)
        value = to_number(text) if is_number(text) else None
        if value is None:
            out.append(f"{text} {scale}" if scale else text)
        elif "%" in text:  # already a percentage: not scaled again
            out.append("%.4f" % value)
        else:
            out.append("%.4f" % (round(value, 2) * scale_factor(scale)))
    return " ".join(out)


def _prediction_strings(pred: list, scale: str) -> list[str]:
    strings = [answer_string(pred, scale)]
    only = str(pred[0])
    if len(pred) == 1 and not scale and "%" not in only and is_number(only):
        value = to_number(only)  # 0.2342 may mean 23.42 percent
        if value is not None:
            strings.append("%.4f" % value)
    return strings


def token_f1(pred: str, gold: str) -> float:
    """F1 of the two normalised strings' token SETS, rounded to 2 decimals as the official."""
    p, g = set(normalize(pred).split()), set(normalize(gold).split())
    common = len(p & g)
    precision = common / float(len(p)) if p else 1.0
    recall = common / float(len(g)) if g else 1.0
    f1 = 0.0 if precision == 0.0 and recall == 0.0 else (2 * precision * recall) / (precision + recall)
    return float(np.round(f1, 2))


def _em_f1_strings(pred: str, gold: str) -> tuple[float, float]:
    return float(normalize(pred) == normalize(gold)), token_f1(pred, gold)


def gold_spans(answer_type: str, answer) -> list[str]:
    """The gold as the official reads it: span lists as given, arithmetic as str, count as str(int)."""
    if answer_type in ("span", "multi-span"):
        return list(answer) if isinstance(answer, (list, tuple)) else [answer]
    if isinstance(answer, (list, tuple)) and len(answer) == 1:
        answer = answer[0]  # our references wrap a scalar answer in a list
    if answer_type == "count":
        return [str(int(float(answer) if isinstance(answer, str) else answer))]
    return [str(answer)]


def protocol_scale(scale: str | None) -> str:
    """The `Scale:` line's word as a scale: `none` (our protocol's word for no scale) is ""."""
    scale = (scale or "").strip()
    return "" if scale.lower() == "none" else scale


def em_f1(gold_type: str, gold, gold_scale: str, pred: list[str], scale: str) -> tuple[float, float]:
    """(EM, F1) in [0, 1] for one answer, as the official TaTQAEmAndF1 scores it."""
    spans = gold_spans(gold_type, gold)
    if not pred or not spans:
        return 0.0, 0.0
    gold_string = answer_string(spans, gold_scale or "")
    em, f1 = max(_em_f1_strings(p, gold_string) for p in _prediction_strings(pred, protocol_scale(scale)))
    return (em, em) if gold_type in ("arithmetic", "count") else (em, f1)


def parse(text: str) -> tuple[list[str], str] | None:
    """Spans and scale from the `answer-scale` protocol; None when there is no Answer line."""
    answer = re.search(r"Answer:\s*(.*)", text)
    if not answer:
        return None
    scale = re.search(r"Scale:\s*([A-Za-z]+)", text)
    spans = [s.strip() for s in answer.group(1).split("|") if s.strip()]
    return spans, scale.group(1) if scale else ""
