"""IFEval scoring is deterministic: repeated runs and separate processes give identical results,
including the checker that draws a random letter and the ones that call langdetect."""

import json
import subprocess
import sys

from evaluators import loaders
from evaluators.scoring import ifeval_check
from evaluators.scoring.suites import score

# key 1122 of input_data.jsonl asks for letter "#": Google's checker replaces it with a random letter
SCRIPT = """
import json, sys
from evaluators import loaders
from evaluators.scoring.suites import score
items = [x for x in loaders.ifeval() if x["id"] in {"ifeval:test:1122", "ifeval:test:1000", "ifeval:test:1001"}]
gens = ["Das ist eine kurze Antwort. " * 3, "this is all lowercase english text about a topic.", "SHORT REPLY"]
res = score("ifeval", items, gens)
print(json.dumps([res.metrics, [r.detail for r in res.items]], sort_keys=True))
"""


def _run() -> str:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=300)
    return out.stdout.strip().splitlines()[-1]


def test_same_text_same_score_across_processes():
    first, second = _run(), _run()
    assert first == second
    metrics, _ = json.loads(first)
    assert all(isinstance(v, float) for v in metrics.values())


def test_repeated_in_process_runs_agree():
    items = loaders.ifeval(n=40)
    gens = [x["messages"][0]["content"][:200] for x in items]  # echo: passes some, fails others
    runs = [score("ifeval", items, gens) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert 0.0 < runs[0].metrics["inst_loose"] < 100.0


def test_random_letter_checker_is_seeded():
    ids, kwargs = ["keywords:letter_frequency"], [{"letter": "#", "let_frequency": 2, "let_relation": "at least"}]
    text = "the quick brown fox jumps over the lazy dog " * 3
    results = {json.dumps(ifeval_check.check("p", text, ids, kwargs, seed=0)) for _ in range(5)}
    assert len(results) == 1
