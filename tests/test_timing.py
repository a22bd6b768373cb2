"""time_breakdown() on constructed ledger rows, and on rows a real in-memory Ledger returns."""

import math

import pytest

from agent.views.timing import CONTROL_PLANE_GOAL, time_breakdown
from experience_bank.errors import BadInput
from trainers.ledger import Ledger


def row(key, kind, wall):
    return {"episode_id": "ep", "key": key, "kind": kind, "device_hours": 0.1, "wall_seconds": wall}


def test_splits_the_episode_into_four_parts_with_shares():
    rows = [row("t1", "trial", 30.0), row("t2", "trial", 12.5), row("f1", "train", 100.0),
            row("e1", "eval", 40.0), row("e2", "eval", 15.0), row("e3", "eval", 0.0)]
    out = time_breakdown(rows, 200.0)
    parts = out["parts"]
    assert parts["trials"] == {"seconds": 42.5, "share": 42.5 / 200, "n": 2}
    assert parts["full_runs"] == {"seconds": 100.0, "share": 0.5, "n": 1}
    assert parts["evaluations"] == {"seconds": 55.0, "share": 55 / 200, "n": 3}
    assert parts["control_plane"]["seconds"] == pytest.approx(2.5)
    assert parts["control_plane"]["share"] == pytest.approx(0.0125)
    assert math.fsum(p["share"] for p in parts.values()) == pytest.approx(1.0)
    assert out["episode_wall_s"] == 200.0 and out["control_plane_within_goal"] is False


def test_control_plane_goal_is_a_strict_share_of_the_episode():
    charged = [row("f", "train", 100.0 * (1 - CONTROL_PLANE_GOAL) + 0.01)]
    assert time_breakdown(charged, 100.0)["control_plane_within_goal"] is True
    assert time_breakdown([row("f", "train", 99.0)], 100.0)["control_plane_within_goal"] is False


def test_no_charges_is_all_control_plane():
    out = time_breakdown([], 7.0)
    assert out["parts"]["control_plane"] == {"seconds": 7.0, "share": 1.0, "n": 0}
    assert all(out["parts"][p]["n"] == 0 and out["parts"][p]["seconds"] == 0 for p in ("trials", "full_runs",
                                                                                    "evaluations"))


def test_rows_from_a_real_ledger():
    ledger = Ledger(":memory:")
    ledger.charge("ep", "trial:a", kind="trial", device_hours=0.2, wall_seconds=11.0)
    ledger.charge("ep", "eval:x:validation", kind="eval", device_hours=0.25, wall_seconds=6.0)
    ledger.charge("other", "eval:y", kind="eval", device_hours=0.25, wall_seconds=500.0)
    out = time_breakdown(ledger.charges("ep"), 20.0)
    assert out["parts"]["trials"]["seconds"] == 11.0 and out["parts"]["evaluations"]["n"] == 1
    assert out["parts"]["control_plane"]["seconds"] == pytest.approx(3.0)


@pytest.mark.parametrize("rows, wall, message", [
    ([row("x", "lunch", 1.0)], 10.0, "kind 'lunch'"),
    ([row("x", "eval", float("nan"))], 10.0, "wall_seconds nan"),
    ([row("x", "eval", -1.0)], 10.0, "wall_seconds -1.0"),
    ([row("x", "eval", "3")], 10.0, "wall_seconds '3'"),
    ([], 0.0, "episode wall-clock 0.0"),
    ([], float("inf"), "episode wall-clock inf"),
    ([row("x", "train", 11.0)], 10.0, "charges 11.0 s of wall-clock but the episode took 10.0 s"),
])
def test_bad_rows_or_wall_are_one_line_errors(rows, wall, message):
    with pytest.raises(BadInput, match=message):
        time_breakdown(rows, wall)


def test_node_seconds_adds_each_nodes_spans():
    from agent.views.timing import node_seconds

    marks = [("__start__", 0.0), ("propose", 0.5), ("validate", 1.0), ("commit", 61.0), ("validate", 62.0),
             ("report", 92.0), ("end", 93.5)]
    out = node_seconds(marks)
    assert list(out) == ["validate", "report", "commit", "__start__", "propose"]
    assert out["validate"] == {"seconds": 90.0, "runs": 2} and out["report"] == {"seconds": 1.5, "runs": 1}
    assert node_seconds([("only", 3.0)]) == {}
    with pytest.raises(BadInput, match="go backwards"):
        node_seconds([("a", 2.0), ("b", 1.0)])
