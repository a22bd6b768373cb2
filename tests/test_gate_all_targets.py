"""The loop's gate judges U_prom over every family's target (docs/GATE.md), not the card's own."""

from __future__ import annotations

from support import bank_factory as bf
import evaluators
from agent.config import RunConfig
from agent.loop.ports import WorldPorts
from experience_bank.results import TrainResult
from test_gate_factory import SPECS, suite, world
from support.graph_fakes import make_ctx


def _all(model: str, sql: float, fin: float, fn: float):
    res = world(model, sql=sql)
    res["finance/target"] = suite("finance/target", {"f1": fin}, [True] * 3 + [False] * 7, model=model)
    res["function/target"] = suite("function/target", {"ast_acc": fn}, [True] * 3 + [False] * 7, model=model)
    return res


def test_own_gain_does_not_buy_off_losses_on_the_other_targets(tmp_path, monkeypatch):
    ctx, _, bank = make_ctx(tmp_path)
    bank.close()
    monkeypatch.setattr(evaluators, "metric_specs", lambda: SPECS)  # the probe list is the evaluator's, not under test
    ports = WorldPorts(world=None, cfg=RunConfig(), allow=None, manifest=ctx.manifest)
    card = bf.record("S01").card  # an SQL card
    run = TrainResult(card_id="S01", run_key="k", parent_sha256=bf.sha("p"), checkpoint="c",
                      checkpoint_sha256=bf.sha("c"), steps=1, fraction=1.0, wall_seconds=1.0)
    initial, parent = _all("initial", 40.0, 30.0, 30.0), _all("initial", 40.0, 30.0, 30.0)
    worse = ports.gate(card, initial, parent, _all("child", 43.0, 20.0, 20.0), run)
    target = next(c for c in worse.checks if c.name == "target")
    assert not worse.promote and worse.decided_by == "target"
    assert abs(target.numbers["u_prom"] - (0.3 - 1.0 - 1.0) / 3) < 1e-9
    better = ports.gate(card, initial, parent, _all("child", 43.0, 30.0, 30.0), run)
    assert better.promote and abs(better.u_prom - 0.1) < 1e-9
