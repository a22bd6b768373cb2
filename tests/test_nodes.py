"""Single nodes on small fakes: stop rules, routing, idempotent re-runs of side-effecting nodes."""

from __future__ import annotations

import json
from types import SimpleNamespace

from agent.loop import nodes
from support.graph_fakes import make_ctx


def _rt(ctx):
    return SimpleNamespace(context=ctx)


def _state(initial, ctx, **kw):
    s = dict(initial)
    s["candidates"] = list(ctx.entries)
    s.update(kw)
    return s


def test_select_stop_rules(tmp_path):
    ctx, initial, bank = make_ctx(tmp_path, budget_h=1.0, max_rejections=2)
    rt = _rt(ctx)
    assert nodes.select(_state(initial, ctx), rt)["candidate_id"] == "S01"
    assert nodes.select(_state(initial, ctx, consecutive_rejections=2), rt)["stop_reason"] == "consecutive_rejections"
    assert nodes.select(_state(initial, ctx, cursor=len(ctx.entries)), rt)["stop_reason"] == "candidates_exhausted"
    ctx.ledger.charge(ctx.episode_id, "x", kind="test", device_hours=1.0, wall_seconds=0.0, detail="spend it all")
    assert nodes.select(_state(initial, ctx), rt)["stop_reason"] == "budget_exhausted"
    bank.close()


def test_authorize_twice_freezes_one_decision(tmp_path):
    ctx, initial, bank = make_ctx(tmp_path)
    rt = _rt(ctx)
    s = _state(initial, ctx)
    s |= nodes.select(s, rt)
    a, b = nodes.authorize(s, rt), nodes.authorize(s, rt)
    assert a == b and a["action"] == "reject"
    assert len((tmp_path / "decisions.jsonl").read_text().splitlines()) == 1
    assert nodes.after_authorize(s | a) == "commit"
    bank.close()


def test_train_twice_trains_and_charges_once(tmp_path):
    ctx, initial, bank = make_ctx(tmp_path)
    rt = _rt(ctx)
    s = _state(initial, ctx, cursor=2)  # S03: direct train
    s |= nodes.select(s, rt)
    s |= nodes.authorize(s, rt)
    first, second = nodes.train(s, rt), nodes.train(s, rt)
    assert first == second and first["train_status"] == "done"
    calls = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["phase"] for c in calls] == ["start", "done"]
    assert len(ctx.ledger.charges(ctx.episode_id)) == 1
    bank.close()


def test_run_that_cannot_fit_is_not_started(tmp_path):
    ctx, initial, bank = make_ctx(tmp_path, budget_h=0.5)
    rt = _rt(ctx)
    s = _state(initial, ctx, cursor=2)
    s |= nodes.select(s, rt)
    s |= nodes.authorize(s, rt)
    out = nodes.train(s, rt)
    assert out["train_status"] == "not_started" and nodes.after_train(s | out) == "commit"
    assert not (tmp_path / "calls.jsonl").exists() and ctx.ledger.charges(ctx.episode_id) == []
    bank.close()


def test_outcome_mapping():
    base = {"action": "validate", "rule": "r", "decided_by": "d", "trial_verdict": "", "train_status": "",
            "verdict": "", "proceed": False}
    assert nodes._outcome(base | {"action": "reject"}) == ("rejected", "r")
    assert nodes._outcome(base | {"trial_verdict": "fail"})[0] == "trial_failed"
    assert nodes._outcome(base | {"trial_verdict": "pass", "proceed": True, "train_status": "not_started"})[0] == \
        "not_started"
    assert nodes._outcome(base | {"trial_verdict": "pass", "proceed": True, "verdict": "promote"})[0] == "promoted"
    assert nodes._outcome(base | {"action": "train", "verdict": "rollback"})[0] == "rolled_back"


def test_progress_display_live_and_quiet(tmp_path, monkeypatch):
    import agent.progress
    from agent.config import build_config
    from agent.loop.episode import _display

    ctx, initial, bank = make_ctx(tmp_path)

    def shown(quiet: bool) -> list[str]:
        lines = []
        with _display(build_config(None, {"quiet": quiet}), ctx, lines.append):
            ctx.progress("authorize", {"candidate_id": "S02", "action": "validate", "spent_h": 1.5})
            ctx.progress("validate", {"trial_verdict": "pass"})
        return lines

    quiet, piped = shown(True), shown(False)  # pytest's stdout is not a terminal: lines either way
    assert quiet == piped and len(quiet) == 2
    assert "S02" in quiet[-1] and "trial_verdict=pass" in quiet[-1] and "98.500" in quiet[-1]
    monkeypatch.setattr(agent.progress, "live_display", lambda q: not q)  # as on a terminal
    assert shown(False) == [] and len(shown(True)) == 2
    bank.close()
