"""Properties of the gate arithmetic: UNKNOWN never promotes; severity is monotone; drift signs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_gate_factory import FAMILY_TARGETS, SPECS, world

from experience_bank.results import MetricSpec
from policies.captrack import SEVERITIES, metric_drift, severity
from policies.gate import GateConfig, gate

INITIAL = world("initial")
KEYS = [("ifeval", "prompt_strict"), ("ifeval", "inst_strict"), ("sql/target", "exec_acc"),
        ("finance/target", "em")] + [("captrack", s.name.partition(".")[2]) for s in SPECS]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True),
       st.sampled_from(["initial", "parent", "child"]), st.floats(0, 100))
def test_any_unknown_anywhere_never_promotes(keys, role, sql):
    roles = {"initial": world("initial"), "parent": world("initial"), "child": world("child", sql=sql)}
    for suite, metric in keys:
        r = roles[role][suite]
        roles[role][suite] = r.model_copy(update={"metrics": {**r.metrics, metric: None}})
    v = gate(roles["initial"], roles["parent"], roles["child"], GateConfig(), SPECS,
             target_suite="sql/target", target_metric="exec_acc", family_targets=FAMILY_TARGETS)
    assert not v.promote


@given(st.floats(-1000, 1000), st.floats(-1000, 1000))
def test_severity_is_monotone(a, b):
    lo, hi = min(a, b), max(a, b)
    assert SEVERITIES.index(severity(lo)) >= SEVERITIES.index(severity(hi))


@given(st.floats(1, 100), st.floats(0, 100))
def test_drift_direction_signs(base, value):
    up = metric_drift(MetricSpec(name="s.m", group="CAN", sub="C1", direction="higher", floor=0.0), base, value)
    down = metric_drift(MetricSpec(name="s.m", group="CAN", sub="C1", direction="lower", floor=0.0), base, value)
    style = metric_drift(MetricSpec(name="s.m", group="WILL", sub="W3", direction="change", floor=0.0), base, value)
    assert up.drift_pct == -down.drift_pct and style.drift_pct == -abs(up.drift_pct) <= 0.0
    assert up.decides and (up.drift_pct >= 0) == (value >= base)
