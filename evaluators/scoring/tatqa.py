"""TAT-QA exact match and F1, written from the benchmark's description (not its code).

Semantics:
- an answer is a bag of spans; each span is normalised (lower case, no punctuation or
  articles, numbers parsed: "1,234.50" -> 1234.5, "(12)" -> -12, "12%" -> 12, then printed
  with 2 decimals so 7 == 7.00);
- EM: the normalised bags are equal; F1: spans are aligned one-to-one (Hungarian
  assignment over per-span token F1, a pair sharing no number scores 0) and the mean
  alignment F1 is taken over the larger bag (DROP's bag-of-words F1);
- for arithmetic and count answers F1 := EM (a near-miss number is wrong, not half right);
- the scale must match (none/thousand/million/billion/percent): a wrong scale scores 0.
  A `%` inside the predicted span implies scale percent.
"""

from __future__ import annotations

import re
import string

import numpy as np
from scipy.optimize import linear_sum_assignment

VERSION = "tatqa-em-f1-v1"
SCALES = ("", "thousand", "million", "billion", "percent")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NUMBER = re.compile(r"^\(?-?\$?[\d,]*\.?\d+\)?%?$")


def to_number(token: str) -> float | None:
    """A numeric token as float (commas, $, %, and accounting parentheses for negatives)."""
    t = token.strip()
    if not t or not _NUMBER.match(t):
        return None
    negative = t.startswith("(") and t.endswith(")") or t.startswith("-") or t.startswith("(-")
    digits = t.strip("()").lstrip("-").lstrip("$").rstrip("%").replace(",", "")
    try:
        value = float(digits)
    except ValueError:
        return None
    return -value if negative else value


def _norm_token(token: str) -> str:
    number = to_number(token)
    if number is not None:
        return f"{round(number, 2) + 0.0:.2f}"  # + 0.0 turns -0.0 into 0.0: "-0.00" == "0"
    return token.strip(string.punctuation)


def normalize(span: str) -> str:
    text = _ARTICLES.sub(" ", span.lower())
    tokens = (_norm_token(t) for t in text.split())
    return " ".join(t for t in tokens if t)


def _is_num(token: str) -> bool:
    return re.fullmatch(r"-?\d+\.\d\d", token) is not None


def _span_f1(pred: str, gold: str) -> float:
    p, g = pred.split(), gold.split()
    gold_nums, pred_nums = {t for t in g if _is_num(t)}, {t for t in p if _is_num(t)}
    if gold_nums and not gold_nums & pred_nums:
        return 0.0  # a span about a number must get the number right
    common = sum(min(p.count(t), g.count(t)) for t in set(p))
    if not p or not g or not common:
        return float(not p and not g)
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def bag_f1(pred: list[str], gold: list[str]) -> float:
    """Mean one-to-one alignment F1 over the larger bag (partial credit for multi-span)."""
    if not pred or not gold:
        return float(pred == gold)
    scores = np.array([[_span_f1(p, g) for p in pred] for g in gold])
    rows, cols = linear_sum_assignment(-scores)
    return float(scores[rows, cols].sum() / max(len(pred), len(gold)))


def pred_scale(spans: list[str], scale: str) -> str:
    scale = (scale or "").strip().lower()
    scale = "" if scale in ("none", "") else scale
    return "percent" if any(s.strip().endswith("%") for s in spans) and not scale else scale


def em_f1(gold_type: str, gold: list[str], gold_scale: str, pred: list[str], scale: str) -> tuple[float, float]:
    """(EM, F1) in [0, 1] for one answer."""
    if pred_scale(pred, scale) != (gold_scale or ""):
        return 0.0, 0.0
    g = [normalize(s) for s in gold]
    p = [normalize(s) for s in pred if normalize(s)]
    em = float(sorted(p) == sorted(g))
    if gold_type in ("arithmetic", "count"):
        return em, em
    return em, bag_f1(p, g)


def parse(text: str) -> tuple[list[str], str] | None:
    """Spans and scale from the `answer-scale` protocol; None when there is no Answer line."""
    answer = re.search(r"Answer:\s*(.*)", text)
    if not answer:
        return None
    scale = re.search(r"Scale:\s*([A-Za-z]+)", text)
    spans = [s.strip() for s in answer.group(1).split("|") if s.strip()]
    return spans, scale.group(1) if scale else ""
