"""Function calling: source "xLAM-like" -> target "BFCL-like" (simple / multiple shapes).

A tool is a BFCL function document (name, description, parameters with types, enums,
required). The model answers with a JSON list of calls, `[{"name": f, "arguments": {...}}]`
(protocol `json-call`); the reference keeps BFCL's possible-answer form
`[{f: {param: [allowed values...]}}]` ("" among them = the optional parameter may be left
out), so both variants are scored by bfcl_eval's AST checker. Source: everyday tools, all
required arguments. Target: BFCL-style dotted maths/science names, optional parameters,
floats, and several candidate functions ("multiple").
"""

from __future__ import annotations

import json
import random

CITIES = ("Paris", "Tokyo", "Lima", "Cairo", "Oslo", "Delhi", "Austin", "Quito", "Seoul", "Perth", "Rome", "Nairobi")
NAMES = ("Alice", "Bob", "Chen", "Dana", "Eve", "Farah", "Goran", "Hugo", "Ines", "Jonas", "Kira", "Liam")
ITEMS = ("milk", "bread", "coffee", "rice", "apples", "eggs", "tea", "cheese")


def _p(type_: str, desc: str, enum: tuple = ()) -> dict:
    spec = {"type": type_, "description": desc}
    if enum:
        spec["enum"] = list(enum)
    return spec


def _doc(name: str, desc: str, params: dict, required: list[str]) -> dict:
    return {"name": name, "description": desc,
            "parameters": {"type": "dict", "properties": params, "required": required}}


# (doc, query template, argument generators); an argument absent from the query is optional.
SOURCE_TOOLS = (
    (_doc("get_weather", "Current weather", {"city": _p("string", "city"), "unit": _p("string", "unit", ("celsius", "fahrenheit"))}, ["city", "unit"]),
     "What is the weather in {city} in {unit}?", {"city": CITIES, "unit": ("celsius", "fahrenheit")}),
    (_doc("send_message", "Send a message", {"to": _p("string", "recipient"), "text": _p("string", "message")}, ["to", "text"]),
     "Send {to} the message {text}.", {"to": NAMES, "text": ("hello", "call me", "see you soon", "running late", "thanks")}),
    (_doc("set_alarm", "Set an alarm", {"hour": _p("integer", "hour"), "minute": _p("integer", "minute")}, ["hour", "minute"]),
     "Set an alarm for {hour}:{minute:02d}.", {"hour": tuple(range(1, 13)), "minute": (0, 10, 15, 20, 30, 45, 50)}),
    (_doc("add_to_cart", "Add an item to the cart", {"item": _p("string", "item"), "quantity": _p("integer", "count")}, ["item", "quantity"]),
     "Add {quantity} {item} to my cart.", {"item": ITEMS, "quantity": tuple(range(1, 10))}),
    (_doc("convert_currency", "Convert money", {"amount": _p("integer", "amount"), "source": _p("string", "from", ("USD", "EUR", "JPY", "GBP")), "target": _p("string", "to", ("USD", "EUR", "JPY", "GBP"))}, ["amount", "source", "target"]),
     "Convert {amount} {source} to {target}.", {"amount": tuple(range(5, 500, 5)), "source": ("USD", "EUR"), "target": ("JPY", "GBP")}),
    (_doc("book_taxi", "Book a taxi", {"pickup": _p("string", "from"), "destination": _p("string", "to")}, ["pickup", "destination"]),
     "Book a taxi from {pickup} to {destination}.", {"pickup": ("home", "work", "the airport", "the station"), "destination": CITIES}),
)
TARGET_TOOLS = (
    (_doc("geometry.triangle_area", "Area of a triangle", {"base": _p("integer", "base"), "height": _p("integer", "height"), "unit": _p("string", "unit")}, ["base", "height"]),
     "Find the area of a triangle with base {base} and height {height}.", {"base": tuple(range(2, 60)), "height": tuple(range(2, 60))}),
    (_doc("math.hypot", "Euclidean norm", {"x": _p("integer", "x"), "y": _p("integer", "y"), "z": _p("integer", "z")}, ["x", "y"]),
     "Compute the Euclidean norm of ({x}, {y}).", {"x": tuple(range(1, 40)), "y": tuple(range(1, 40))}),
    (_doc("physics.final_velocity", "Final velocity", {"initial_velocity": _p("float", "m/s"), "acceleration": _p("float", "m/s^2"), "time": _p("integer", "s")}, ["initial_velocity", "acceleration", "time"]),
     "Final velocity after {time} s from {initial_velocity} m/s at {acceleration} m/s^2?", {"initial_velocity": (0.0, 1.5, 2.0, 5.5, 10.0), "acceleration": (0.5, 1.0, 2.5, 9.8), "time": tuple(range(1, 30))}),
    (_doc("finance.compound_interest", "Compound interest", {"principal": _p("integer", "amount"), "rate": _p("float", "yearly rate"), "years": _p("integer", "years"), "n": _p("integer", "compounds per year")}, ["principal", "rate", "years"]),
     "Compound interest on {principal} at rate {rate} for {years} years?", {"principal": tuple(range(100, 5000, 100)), "rate": (0.01, 0.02, 0.05, 0.07), "years": tuple(range(1, 20))}),
    (_doc("stats.mean", "Mean of numbers", {"numbers": {"type": "array", "items": {"type": "integer"}, "description": "values"}}, ["numbers"]),
     "What is the mean of {numbers}?", {"numbers": tuple((a, b, c) for a in (2, 5, 8) for b in (3, 7, 11) for c in (1, 4, 9))}),
    (_doc("calendar.days_between", "Days between dates", {"start": _p("string", "YYYY-MM-DD"), "end": _p("string", "YYYY-MM-DD")}, ["start", "end"]),
     "How many days from {start} to {end}?", {"start": ("2024-01-01", "2024-03-15", "2023-06-30"), "end": ("2024-12-25", "2025-02-01", "2024-08-09")}),
)


def render_tools(docs: list[dict], style: str) -> str:
    """Compact signatures: `name(a: type, b?: type)`; optional params carry a `?`."""
    lines = []
    for d in docs:
        props, req = d["parameters"]["properties"], d["parameters"]["required"]
        args = ", ".join(f"{k}{'' if k in req else '?'}: {v['type']}" for k, v in props.items())
        lines.append(f"{d['name']}({args})" if style == "source" else f"- {d['name']}({args}): {d['description']}")
    return ("Tools: " + "; ".join(lines)) if style == "source" else "Functions:\n" + "\n".join(lines)


def _fill(rng: random.Random, gens: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in ((k, rng.choice(g)) for k, g in gens.items())}


def _query(template: str, args: dict) -> str:
    shown = {k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in args.items()}
    return template.format(**shown)


def make(rng: random.Random, variant: str, noise: float = 0.0) -> tuple[str, str, dict]:
    """One item. variant: source | target. noise: share of examples with one argument resampled."""
    pool = SOURCE_TOOLS if variant == "source" else TARGET_TOOLS
    n_tools = rng.choice((1, 2, 3)) if variant == "source" else rng.choice((1, 1, 2, 3, 4))
    chosen = rng.sample(range(len(pool)), n_tools)
    doc, template, gens = pool[chosen[0]]
    args = _fill(rng, gens)
    question = _query(template, args)
    if noise and rng.random() < noise:  # label noise: the answer disagrees with the question
        k = rng.choice(tuple(gens))
        args[k] = _fill(rng, {k: gens[k]})[k]
    docs = [pool[i][0] for i in sorted(chosen)]
    optional = [k for k in doc["parameters"]["properties"] if k not in doc["parameters"]["required"]]
    gold = [{doc["name"]: {**{k: [v] for k, v in args.items()}, **{k: [""] for k in optional}}}]
    category = "simple_python" if len(docs) == 1 else "multiple"
    completion = json.dumps([{"name": doc["name"], "arguments": args}])
    prompt = f"{render_tools(docs, variant)}\nQuery: {question}"
    ref = {"functions": docs, "ground_truth": gold, "category": category, "completion": completion}
    # split by the question; the distractor set only varies items within a split
    return f"{variant}|{question}||{' '.join(sorted(d['name'] for d in docs))}", prompt, ref
