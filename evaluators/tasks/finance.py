"""Finance table QA: source "FinQA-like" -> target "TAT-QA-like".

Source: a two-year table of a company's metrics, a question that needs one step of
FinQA's program language (change, sum, average, percentage change, or `greater` with a
yes/no answer); the gold quotes the evidence row and the program (`cost | 47 | 61`,
`61 - 47 = 14`) before the answer, like FinQA's.
Target: a segment table with a unit ("in millions") plus a one-sentence paragraph;
answers are spans (one or several cells or a paragraph phrase), arithmetic (with the
table's scale) or counts. Both answer in one protocol (`answer-scale`):

    Answer: <span or number>[ | <span> ...]
    Scale: <none|thousand|million|billion|percent>

The tiny world model reads these, so prompts stay a few lines long.
"""

from __future__ import annotations

import random

COMPANIES = ("Acme", "Borealis", "Cobalt", "Dunmore", "Everly", "Fenwick", "Galena", "Harbor",
             "Ionic", "Juniper", "Kestrel", "Lumen", "Marlow", "Nimbus", "Orion", "Pinnacle",
             "Quarry", "Redwood", "Summit", "Tidewell", "Umber", "Vantage", "Westfield", "Zephyr")
METRICS = ("revenue", "cost", "profit", "expenses", "assets", "cash", "debt", "sales", "income", "equity")
SEGMENTS = ("Cloud", "Retail", "Services", "Hardware", "Software", "Licensing", "Consulting",
            "Support", "Mobile", "Energy", "Media", "Logistics")
DRIVERS = ("higher demand", "new customers", "price increases", "lower costs", "a new product",
           "strong exports", "an acquisition", "online sales")
SCALES = ("thousand", "million", "billion")
YEARS = tuple(range(2012, 2024))


def fmt(x: float) -> str:
    """Shortest decimal form, at most 2 decimals (answers are rounded like TAT-QA's gold)."""
    text = f"{round(x, 2):.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def render_answer(spans: list[str], scale: str) -> str:
    return f"Answer: {' | '.join(spans)}\nScale: {scale or 'none'}"


def _years(rng: random.Random) -> tuple[int, int]:
    y = rng.choice(YEARS[:-1])
    return y, y + 1


def _value(rng: random.Random) -> float:
    # two-digit values (a quarter with one decimal): arithmetic a 1-5M-parameter model can
    # learn, while tables x questions x years keep the space far larger than any pool
    return round(rng.uniform(10, 99), 1) if rng.random() < 0.25 else float(rng.randint(10, 99))


def _arith(kind: str, a: float, b: float) -> tuple[float, str, str]:
    """(value, scale-kind, derivation) of one arithmetic question over a and b."""
    if kind == "change":
        return b - a, "unit", f"{fmt(b)} - {fmt(a)} = {fmt(b - a)}"
    if kind == "sum":
        return a + b, "unit", f"{fmt(a)} + {fmt(b)} = {fmt(a + b)}"
    if kind == "average":
        return (a + b) / 2, "unit", f"({fmt(a)} + {fmt(b)}) / 2 = {fmt((a + b) / 2)}"
    pct = (b - a) / a * 100
    return pct, "percent", f"({fmt(b)} - {fmt(a)}) / {fmt(a)} * 100 = {fmt(pct)}"


_ASK = {"change": "What was the change in {m} from {y0} to {y1}?",
        "sum": "What was the total {m} in {y0} and {y1}?",
        "average": "What was the average {m} in {y0} and {y1}?",
        "percent": "What was the percentage change in {m} from {y0} to {y1}?"}


def make_source(rng: random.Random) -> tuple[str, str, dict]:
    company = rng.choice(COMPANIES)
    metrics = rng.sample(METRICS, 2)
    y0, y1 = _years(rng)
    table = {m: (_value(rng), _value(rng)) for m in metrics}
    m = rng.choice(metrics)
    kind = rng.choice((*_ASK, "greater"))
    rows = "\n".join(f"{name} | {fmt(a)} | {fmt(b)}" for name, (a, b) in table.items())
    if kind == "greater":  # FinQA's `greater` operation: a yes/no answer
        a, b = table[m]
        answer, atype, scale = "yes" if b > a else "no", "span", ""
        question = f"Was {m} in {y1} greater than in {y0}?"
        derivation = f"greater({fmt(b)}, {fmt(a)}) = {answer}"
    else:
        value, scale_kind, derivation = _arith(kind, *table[m])
        answer, atype, scale = fmt(value), "arithmetic", "percent" if scale_kind == "percent" else ""
        question = _ASK[kind].format(m=m, y0=y0, y1=y1)
    prompt = f"{company} table:\nitem | {y0} | {y1}\n{rows}\nQuestion: {question}"
    # The gold quotes its evidence row and program before the answer, as FinQA's gold has
    # supporting facts and a program: lookup, copy and arithmetic become separate steps a
    # small model can learn.
    evidence = rows.splitlines()[metrics.index(m)]
    ref = {"answer_type": atype, "answer": [answer] if atype == "span" else answer, "scale": scale,
           "derivation": derivation, "completion": f"{evidence}\n{derivation}\n{render_answer([answer], scale)}"}
    return prompt, prompt, ref


def _target_table(rng: random.Random) -> tuple[str, list[str], dict, int, int, str, str]:
    company = rng.choice(COMPANIES)
    segs = rng.sample(SEGMENTS, rng.choice((3, 4)))
    y0, y1 = _years(rng)
    table = {s: (_value(rng), _value(rng)) for s in segs}
    return company, segs, table, y0, y1, rng.choice(SCALES), rng.choice(DRIVERS)


def _target_question(rng, segs, table, y0, y1, scale, driver, seg_driver):
    """(question, answer_type, spans, scale, derivation) for one target item."""
    kind = rng.choice(("arith", "arith", "span", "multi", "count", "text"))
    if kind == "arith":
        s, op = rng.choice(segs), rng.choice(tuple(_ASK))
        value, scale_kind, derivation = _arith(op, *table[s])
        q = _ASK[op].format(m=f"{s} revenue", y0=y0, y1=y1)
        return q, "arithmetic", [fmt(value)], "percent" if scale_kind == "percent" else scale, derivation
    if kind == "span":
        best = max(segs, key=lambda s: table[s][1])
        return f"Which segment had the highest revenue in {y1}?", "span", [best], "", f"max {y1} = {best}"
    threshold = round(sorted(v[1] for v in table.values())[rng.randrange(len(segs))] - 0.5)
    above = [s for s in segs if table[s][1] > threshold]
    if kind == "multi" and len(above) >= 2:
        return (f"Which segments had revenue above {threshold} in {y1}?", "multi-span", above, "",
                f"above {threshold}: {', '.join(above)}")
    if kind in ("multi", "count"):
        return (f"How many segments had revenue above {threshold} in {y1}?", "count", [str(len(above))], "",
                f"above {threshold}: {', '.join(above) or 'none'}")
    return f"What drove the growth of {seg_driver}?", "span", [driver], "", f"text: {driver}"


def make_target(rng: random.Random, cot: bool = False) -> tuple[str, str, dict]:
    company, segs, table, y0, y1, scale, driver = _target_table(rng)
    seg_driver = rng.choice(segs)
    question, atype, spans, ans_scale, derivation = _target_question(rng, segs, table, y0, y1, scale, driver,
                                                                     seg_driver)
    rows = "\n".join(f"{s} | {fmt(a)} | {fmt(b)}" for s, (a, b) in table.items())
    text = f"{seg_driver} grew mainly due to {driver}."
    prompt = f"{company} revenue (in {scale}s):\nsegment | {y0} | {y1}\n{rows}\nText: {text}\nQuestion: {question}"
    completion = render_answer(spans, ans_scale)
    ref = {"answer_type": atype, "answer": spans if atype in ("span", "multi-span") else spans[0],
           "scale": ans_scale, "derivation": derivation,
           "completion": f"{derivation}\n{completion}" if cot else completion}
    return prompt, prompt, ref
