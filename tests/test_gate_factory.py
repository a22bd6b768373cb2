"""Small SuiteResult factory shared by the gate, forgetting and heat-map tests (no tests here)."""

from __future__ import annotations

import hashlib

from experience_bank.results import EvalIdentity, ItemResult, MetricSpec, SuiteResult


def sha(tag: str) -> str:
    """A valid 64-hex sha256 for a readable tag."""
    return hashlib.sha256(tag.encode()).hexdigest()


def suite(name: str, metrics: dict, correct=(), *, model: str = "child", split: str = "adoption",
          n_unparseable: int = 0, data: str = "adoption-data") -> SuiteResult:
    """One SuiteResult; `correct` is the per-item outcome list (None = UNKNOWN)."""
    items = tuple(ItemResult(item_id=f"{name}-{k}", correct=c) for k, c in enumerate(correct))
    ident = EvalIdentity(suite=name, split=split, data_sha256=sha(f"{name}/{data}"), scorer_version="v1",
                         model_sha256=sha(model), chat_template_sha256=sha("tpl"), backend="transformers",
                         batch_size=8, max_new_tokens=64, seed=0)
    return SuiteResult(identity=ident, generations_sha256=sha(f"gen/{model}/{name}"), metrics=metrics, items=items,
                       n_unparseable=n_unparseable, n_unknown=sum(c is None for c in correct))


SPECS = (
    MetricSpec(name="captrack.can_arith", group="CAN", sub="C1", direction="higher", floor=1.0),
    MetricSpec(name="captrack.can_fact", group="CAN", sub="C1", direction="higher", floor=1.0),
    MetricSpec(name="captrack.will_len", group="WILL", sub="W3", direction="change", floor=1.0),
    MetricSpec(name="captrack.will_refusal", group="WILL", sub="W1", direction="lower", floor=1.0),
    MetricSpec(name="captrack.how_json", group="HOW", sub="H2", direction="higher", floor=1.0),
)
BASE_CAPTRACK = {"can_arith": 50.0, "can_fact": 40.0, "will_len": 100.0, "will_refusal": 0.0, "how_json": 80.0}
FAMILY_TARGETS = {"sql": "sql/target.exec_acc", "finance": "finance/target.em"}
CAPTRACK_ITEMS = [True] * 20 + [False] * 20
"""Per-item outcomes of the captrack suite: 40 items without probe names, so every metric rests
on all of them, above the gate's 30-item minimum for a severe verdict (tests/test_gate_noise.py
builds probe-named items)."""


def world(model: str, *, prompt=60.0, inst=70.0, ifeval_items=None, sql=40.0, fin=30.0, captrack=None,
          sql_unparseable=0, **kw) -> dict[str, SuiteResult]:
    """All suites of one model; defaults are the initial parent's scores."""
    ifeval_items = [True] * 240 + [False] * 160 if ifeval_items is None else ifeval_items
    cap = {**BASE_CAPTRACK, **(captrack or {})}
    return {
        "ifeval": suite("ifeval", {"prompt_strict": prompt, "inst_strict": inst}, ifeval_items, model=model, **kw),
        "sql/target": suite("sql/target", {"exec_acc": sql}, [True] * 4 + [False] * 6, model=model,
                            n_unparseable=sql_unparseable, **kw),
        "finance/target": suite("finance/target", {"em": fin}, [True] * 3 + [False] * 7, model=model, **kw),
        "captrack": suite("captrack", cap, CAPTRACK_ITEMS, model=model, **kw),
    }
