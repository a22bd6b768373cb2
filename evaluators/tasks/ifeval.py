"""IFEval-style retention prompts: a short writing request plus one or two verifiable
instructions, worded by Google's own registry (so the checker and the prompt agree).

Each item carries `instruction_id_list` and `kwargs` in IFEval's input_data.jsonl layout, and a
gold response built to satisfy every instruction (tests check it scores 100 with the real
checkers). Pairs that contradict each other (lowercase + capitals, JSON + bullets, ...) are
never drawn.
"""

from __future__ import annotations

import json
import random

from evaluators.scoring import ifeval_check

TOPICS = ("rivers", "gardens", "trains", "bread", "the moon", "owls", "winter", "music", "bicycles", "tea",
          "libraries", "mountains", "rain", "chess", "bees", "maps", "lighthouses", "markets", "kites",
          "forests", "islands", "clocks", "painting", "deserts", "bridges", "coffee", "whales", "school")
TASKS = ("Write a short note about {t}.", "Describe {t} in a few sentences.", "Tell me about {t}.",
         "Write a short blog post about {t}.", "Explain why people like {t}.")
KEYWORDS = ("simple", "bright", "quiet", "local", "careful", "happy", "green", "early")
END_PHRASES = ("Any other questions?", "Is there anything else I can help with?", "Hope this helps.")

# id -> (kwargs sampler, ids it cannot be combined with)
_FORMAT = {"detectable_format:json_format", "detectable_format:number_bullet_lists", "startend:quotation",
           "detectable_format:title", "detectable_content:postscript", "startend:end_checker"}
INSTRUCTIONS = {
    "change_case:english_lowercase": (lambda r: {}, {"change_case:english_capital"}),
    # langdetect misreads short upper-case text next to a title: keep capitals with plain prose
    "change_case:english_capital": (lambda r: {}, {"change_case:english_lowercase", "detectable_format:title"}),
    "punctuation:no_comma": (lambda r: {}, set()),
    "keywords:existence": (lambda r: {"keywords": [r.choice(KEYWORDS)]}, {"keywords:frequency"}),
    "keywords:frequency": (lambda r: {"keyword": r.choice(KEYWORDS), "frequency": r.choice((2, 3)),
                                      "relation": "at least"}, {"keywords:existence"}),
    "length_constraints:number_words": (lambda r: {"num_words": r.choice((60, 80, 100)), "relation": "less than"},
                                        set()),
    "startend:end_checker": (lambda r: {"end_phrase": r.choice(END_PHRASES)}, {"detectable_format:json_format"}),
    # a quote glued to the first "* " hides that bullet from the bullet checker
    "startend:quotation": (lambda r: {}, {"detectable_format:json_format", "detectable_format:number_bullet_lists"}),
    "detectable_format:number_bullet_lists": (lambda r: {"num_bullets": r.choice((2, 3))},
                                              {"detectable_format:json_format"}),
    "detectable_format:title": (lambda r: {}, {"detectable_format:json_format"}),
    "detectable_content:postscript": (lambda r: {"postscript_marker": "P.S."}, {"detectable_format:json_format"}),
    "detectable_format:json_format": (lambda r: {}, _FORMAT - {"detectable_format:json_format"}),
}


def _sentences(topic: str, keyword_lines: list[str]) -> list[str]:
    # no commas anywhere, and enough plain English words for langdetect to say "en"
    base = [f"Many people enjoy {topic} on a calm day.", f"You can learn about {topic} from books."]
    return base + keyword_lines


def gold_response(topic: str, ids: list[str], kwargs: list[dict]) -> str:
    """A response that satisfies every instruction (applied in a fixed, compatible order)."""
    kw = dict(zip(ids, kwargs))
    lines: list[str] = []
    if "keywords:existence" in kw:
        lines.append(f"It is a {kw['keywords:existence']['keywords'][0]} thing to enjoy.")
    if "keywords:frequency" in kw:
        word = kw["keywords:frequency"]["keyword"]
        lines += [f"It is {word}."] * kw["keywords:frequency"]["frequency"]
    sents = _sentences(topic, lines)
    if "detectable_format:number_bullet_lists" in kw:  # the plain sentences become the bullets
        n = kw["detectable_format:number_bullet_lists"]["num_bullets"]
        bullets = (sents[:2] + ["It is worth a look."])[:n]
        sents = ([" ".join(lines)] if lines else []) + [f"* {b}" for b in bullets]
    text = "\n".join(sents)
    if "detectable_format:title" in kw:
        text = f"<<Notes on {topic}>>\n{text}"
    if "detectable_format:json_format" in kw:
        text = json.dumps({"note": text.replace("\n", " ")})
    if "detectable_content:postscript" in kw:
        text += "\nP.S. Thank you for reading."
    if "startend:end_checker" in kw:
        text += " " + kw["startend:end_checker"]["end_phrase"]
    if "change_case:english_lowercase" in kw:
        text = text.lower()
    if "change_case:english_capital" in kw:
        text = text.upper()
    if "startend:quotation" in kw:
        text = f'"{text}"'
    return text


def _pick(rng: random.Random) -> list[str]:
    first = rng.choice(sorted(INSTRUCTIONS))
    if rng.random() < 0.4:
        return [first]
    allowed = [i for i in sorted(INSTRUCTIONS) if i != first and i not in INSTRUCTIONS[first][1]
               and first not in INSTRUCTIONS[i][1]]
    return [first, rng.choice(allowed)]


def make(rng: random.Random) -> tuple[str, str, dict]:
    topic = rng.choice(TOPICS)
    ids = _pick(rng)
    kwargs = [INSTRUCTIONS[i][0](rng) for i in ids]
    request = rng.choice(TASKS).format(t=topic)
    prompt = " ".join([request] + [ifeval_check.describe(i, k) for i, k in zip(ids, kwargs)])
    ref = {"instruction_id_list": ids, "kwargs": kwargs, "completion": gold_response(topic, ids, kwargs)}
    return prompt, prompt, ref
