"""A Hugging Face model card on every promotion (agent/views/modelcard.py), read back with
huggingface_hub's ModelCard.load; the registry links each promoted version to it and the child
under evaluation carries the `challenger` alias."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import bank_factory as bf  # noqa: E402
import test_tracking as tt  # noqa: E402
from experience_bank.records import ModelRef  # noqa: E402
from experience_bank.results import GateCheck, GateVerdict  # noqa: E402


class WatchingPorts(tt.PromotingPorts):
    """Records which version the registry's `challenger` alias names while the gate runs."""

    uri = ""
    seen: list

    def gate(self, card, initial, parent, child, run):
        from agent.views.tracking import lineage_name

        manifest = json.loads((Path(self.run_dir) / "manifest.json").read_text())
        lineage = lineage_name(manifest["config"]["world"], manifest["initial"]["sha256"])
        version = tt._client(self.uri).get_model_version_by_alias(lineage, "challenger")
        self.seen.append((card.id, version.tags["candidate"], version.tags["sha256"] == run.checkpoint_sha256))
        return super().gate(card, initial, parent, child, run)


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("carded")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    WatchingPorts.uri, WatchingPorts.seen = uri, []
    original = tt.PromotingPorts
    tt.PromotingPorts = WatchingPorts
    try:
        final = tt.tracked_fake(tmp / "E-fake", uri)
    finally:
        tt.PromotingPorts = original
    return tmp / "E-fake", uri, final, list(WatchingPorts.seen)


def test_the_challenger_is_the_child_under_evaluation(episode):
    _, _, _, seen = episode
    assert seen == [("S02", "S02", True), ("S03", "S03", True), ("S05", "S05", True), ("S06", "S06", True)]


def test_every_promoted_folder_carries_a_card_that_huggingface_hub_loads(episode):
    from agent.run.rundir import RunDir

    run_dir, uri, final, _ = episode
    events = [json.loads(x) for x in (run_dir / "outcomes.jsonl").read_text().splitlines()]
    parent = json.loads((run_dir / "parent.json").read_text())["parent"]
    card = ModelCard.load(Path(parent["path"]) / "README.md")
    data = card.data.to_dict()
    assert data["base_model"] == "fake/model" and data["base_model_relation"] == "finetune"
    assert data["library_name"] == "transformers" and {"trl", "posttrain-agent", "sft"} <= set(data["tags"])
    assert data["datasets"] == sorted(data["posttrain_agent"]["datasets"])
    assert data["posttrain_agent"]["weights_sha256"] == parent["sha256"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert data["posttrain_agent"]["manifest_hash"] == manifest["manifest_hash"] == final["manifest_hash"]
    # eval results: the child's adoption numbers, as the run stored them, with n and split
    stored = RunDir(run_dir).evaluation(parent["sha256"], "adoption")
    got = {(r.dataset_name, r.metric_type): (r.metric_value, r.dataset_split, r.dataset_args["n"])
           for r in card.data.eval_results}
    assert got == {(s, m): (v, "adoption", len(r.items)) for s, r in stored.items() for m, v in r.metrics.items()}
    dh = data["posttrain_agent"]["decision_hash"]
    assert f"decision hash: `{dh}`" in card.text and f"manifest hash: `{manifest['manifest_hash']}`" in card.text
    assert "S/A/H/Q:" in card.text and "| target | yes |" in card.text
    assert len(events) >= 3
    # three promotions, three cards; the registry's versions name them
    cards = sorted(run_dir.glob("**/README.md"))
    assert len({ModelCard.load(p).data.to_dict()["posttrain_agent"]["decision_hash"] for p in cards}) == 3


def _verdict(paired: dict) -> GateVerdict:
    check = GateCheck(name="ifeval_guard", passed=True, numbers={"drop_pp": 1.0, **paired}, reason="held")
    return GateVerdict(promote=True, decided_by="all_passed", checks=(check,), u_prom=0.4,
                       child_sha256=bf.sha("c"), parent_sha256=bf.sha("p"), initial_sha256=bf.sha("p"))


def test_text_lists_each_checks_paired_delta_and_mcnemar_p_and_an_adapter_is_an_adapter(tmp_path):
    from support import graph_fakes as fakes
    from agent.views.modelcard import write_model_card
    from policies.gate import paired_numbers
    from policies.stats import paired_stats

    before = {f"i{k}": k % 3 == 0 for k in range(30)}
    after = {f"i{k}": k % 2 == 0 for k in range(30)}
    stats = paired_stats(before, after, "ifeval")
    verdict = _verdict(paired_numbers(stats))
    event = _event()
    card = bf.record("S02").card
    run = fakes.TrainResult(card_id="S02", run_key="k", parent_sha256=bf.sha("p"), checkpoint=str(tmp_path),
                            checkpoint_sha256=bf.sha("c"), steps=4, fraction=1.0, wall_seconds=1.0, steps_run=4)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    parent = ModelRef(id="org/base", sha256=bf.sha("p"), arch="qwen3", chat_template_sha256=bf.sha("t"))
    ife = fakes._suite("ifeval", "prompt_strict", 40.0, bf.sha("c"), "adoption")
    path = write_model_card(adapter, event=event, card=card, run=run, verdict=verdict, child_eval={"ifeval": ife},
                            parent=parent, manifest_hash=bf.sha("m"))
    loaded = ModelCard.load(path)
    assert loaded.data.base_model_relation == "adapter" and loaded.data.base_model == "org/base"
    assert f"paired_delta_pp={stats.delta_pp:.4g}" in loaded.text and f"mcnemar_p={stats.mcnemar_p:.4g}" in loaded.text
    assert f"n_items={stats.n}" in loaded.text
    assert write_model_card(adapter, event=event, card=card, run=run, verdict=verdict, child_eval={"ifeval": ife},
                            parent=parent, manifest_hash=bf.sha("m")).read_text() == path.read_text()  # resumable


def _event():
    from experience_bank.decisions import Event

    record = bf.record("S02")
    from support.graph_fakes import FakePorts  # noqa: F401 (the fakes' features)
    from policies.features import features_from_row
    from experience_bank.decisions import Decision

    f = features_from_row({"id": "S02", "grade": "B", "delta_src": 5.0, "kappa": 10.0, "family": 1, "data": 1,
                           "runtime": 1, "parent": 1, "protocol": 1, "H": 0, "nu": "restart", "chi": 0,
                           "is_new": False})
    d = Decision(candidate_id="S02", action="train", rule="bcit:train", numbers={}, policy="bcit", policy_version="1",
                 features=f, decision_hash=bf.sha("d"))
    return Event(episode_id="E-1", seq=0, candidate_id=record.card.id, decision=d, action="train",
                 cost_device_hours=0.1, wall_seconds=1.0, metrics={}, outcome="promoted", reason="gate: all_passed",
                 trial_delta=1.5, target_gain=2.5, target_metric="sql/target.exec_acc")
