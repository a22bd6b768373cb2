"""The CapTrack heat map: a real PNG and the same numbers as JSON; unknown stays unknown."""

from __future__ import annotations

import json

import pytest
from test_gate_factory import BASE_CAPTRACK, SPECS, world

from evaluators.heatmap import heatmap_data, write_heatmap
from experience_bank.errors import BadInput
from policies.captrack import captrack_profile
from policies.gate import GateConfig


def _column(profile):
    return {c.name: c.drift_pct for c in profile.groups + profile.subs}


def test_heatmap_png_and_json_hold_the_profile_numbers(tmp_path):
    base = world("initial")
    steps = {"step 1": world("s1", captrack={"can_arith": 40.0}),
             "step 2": world("s2", captrack={"will_len": 110.0, "will_refusal": 3.0})}
    # the drift alone: any gate's config gives the same numbers
    table = {name: _column(captrack_profile(base, r, SPECS, GateConfig())) for name, r in steps.items()}
    data = write_heatmap(table, tmp_path / "h.png", tmp_path / "h.json", title="episode")
    png = (tmp_path / "h.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
    stored = json.loads((tmp_path / "h.json").read_text())
    assert stored["columns"] == ["step 1", "step 2"] and stored["rows"] == data["rows"]
    cell = dict(zip(stored["rows"], stored["drift_pct"]))
    assert cell["CAN/C1"] == [pytest.approx(-10.0), pytest.approx(0.0)]   # mean(-20 %, 0 %)
    assert cell["WILL/W3"] == [pytest.approx(0.0), pytest.approx(-10.0)]  # style: any change is drift
    assert cell["WILL/W1"] == [None, None]  # refusal base is 0: reported, never coloured as 0
    assert BASE_CAPTRACK["will_refusal"] == 0.0


def test_heatmap_refuses_empty_or_non_finite():
    with pytest.raises(BadInput):
        heatmap_data({})
    with pytest.raises(BadInput, match="not finite"):
        heatmap_data({"a": {"CAN": float("nan")}})
    assert heatmap_data({"a": {"CAN": 1.0}, "b": {"HOW": 2.0}})["drift_pct"] == [[1.0, None], [None, 2.0]]
