"""The outcome-blind compiler over real records (uses the shared bank factories)."""

from experience_bank.records import Conflict, CurrentContext, ModelRef
from policies import EpisodeState, PolicyConfig, authorize, compile, decide
from support.bank_factory import proposal, record, sha


def ctx(**kw) -> CurrentContext:
    base = dict(parent=ModelRef(id="world/base", sha256=sha("model"), arch="qwen3", chat_template_sha256=sha("tpl")),
                stage=1, families=("sql",), tasks={"sql": "sql/target"}, datasets={"sql/source/train": sha("data")},
                runtimes=("trl-sft", "trl-grpo"), eval_protocol="world-eval-v1", output_protocols={"sql": "sql"})
    return CurrentContext(**{**base, **kw})


def test_fields_and_scores_of_a_matching_record():
    f = compile(record(delta=8.0, grade="B"), ctx())
    assert (f.S, f.A, f.Q, f.H, f.chi, f.is_new) == (0.6, 1.0, 0.6, 0, 0, False)


def test_data_hash_mismatch_is_unresolved_and_missing_is_mismatch():
    assert compile(record(), ctx(datasets={"sql/source/train": sha("other")})).fields.data == 0.5
    assert compile(record(), ctx(datasets={})).fields.data == 0.0


def test_named_conflicts_fire_only_when_contradicted():
    rec = record(grade="A", replicates=2, delta=20.0)
    b = rec.applicability.model_copy(update={"conflicts": (
        Conflict(name="requires output protocol sql", field="output_protocol", op="ne", value="sql"),
        Conflict(name="needs trl-grpo", field="runtimes", op="not_contains", value="trl-grpo"),
        Conflict(name="base parent only", field="stage", op="gt", value=2))})
    rec = rec.model_copy(update={"applicability": b})
    assert compile(rec, ctx()).H == 0
    fired = compile(rec, ctx(stage=3, output_protocols={"sql": "json-call"}))
    assert fired.H == 1 and fired.conflicts == ("requires output protocol sql", "base parent only")
    # no_applicability: the conflicts and B_i are gone, fields come from x_s only
    plain = compile(rec, ctx(stage=3, output_protocols={"sql": "json-call"}), use_applicability=False)
    assert plain.H == 0 and plain.fields.protocol == 0.0


def test_proposal_has_no_source_strength():
    f = compile(proposal(), ctx())
    assert f.is_new and f.S is None and f.Q is None and f.chi == 0
    assert compile(proposal(), ctx(), use_applicability=False).A == 0.5


def test_attaching_outcomes_cannot_change_features_or_decisions():
    # Outcomes live in a separate structure; a record carrying them in provenance artefacts or
    # the produced_by text (the only free-form slots) compiles to the same fields and decision.
    rec = record(grade="A", replicates=2, delta=12.0)
    tagged = rec.model_copy(update={"provenance": rec.provenance.model_copy(
        update={"produced_by": "outcome: harmful, BIRD -9.0 pp", "artefacts": ("outcomes/S01.json",)})})
    f1, f2 = compile(rec, ctx()), compile(tagged, ctx())
    strip = lambda f: f.model_dump(exclude={"record_hash"})  # noqa: E731 (the hash names the bytes, nothing else)
    assert strip(f1) == strip(f2)
    for p in ("bcit", "flat_additive", "no_applicability"):
        d1 = decide(rec, ctx(), p, EpisodeState(), PolicyConfig())
        d2 = decide(tagged, ctx(), p, EpisodeState(), PolicyConfig())
        assert (d1.action, d1.rule, d1.numbers) == (d2.action, d2.rule, d2.numbers)
    assert authorize(f1, "bcit", EpisodeState(), PolicyConfig()).action == "train"
