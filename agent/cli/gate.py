"""`agent gate` and `agent profile`: the adoption rule and the CapTrack profile from the CLI.

Both evaluate models through `evaluators.evaluate(...)` on one split (it reuses the raw
generations it stored under --out), then apply the pure functions: `policies.gate.gate`,
`policies.captrack.captrack_profile`, `evaluators.forgetting.retention_summary`. Evaluation
output for a model lands in `<out>/<sha256 of its path>[:16]`, so a parent that is also the
initial model is generated once.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from experience_bank.errors import BadInput

from experience_bank.families import FAMILIES
import argparse
import evaluators
from agent.config import build_config
from agent.inputs import check_model_dir
from evaluators.forgetting import retention_summary
from evaluators.heatmap import write_heatmap
from evaluators.tasks import TASKS
from experience_bank.frozen import parse_model
from experience_bank.results import TrainResult

GATE_EXAMPLE = """example:
  agent gate --initial models/base --parent models/base --child runs/E1/s0/train \\
      --target sql/target.exec_acc --family-target finance=finance/target.f1 --config runs/default.yaml --json
exit status: 0 promote, 1 reject (rollback), 2 bad input."""

PROFILE_EXAMPLE = """example:
  agent profile --base models/base --model runs/E1/s0/train --heatmap runs/E1/profile.png --json"""


def register(sub) -> None:
    """Add `gate` and `profile` to the `agent` parser."""
    g = sub.add_parser("gate", help="apply the CapTrack adoption gate to a child model",
                       epilog=GATE_EXAMPLE, formatter_class=_raw())
    g.add_argument("--initial", required=True, help="initial (out-of-the-box) parent model directory")
    g.add_argument("--parent", required=True, help="current parent model directory")
    g.add_argument("--child", required=True, help="child model directory to judge")
    g.add_argument("--target", required=True, help="the candidate's target metric, SUITE.METRIC")
    g.add_argument("--family-target", action="append", default=[], metavar="FAMILY=SUITE.METRIC",
                   help="another capability of the run in U_prom (repeatable)")
    g.add_argument("--config", help="run config YAML (its gate_* keys)")
    g.add_argument("--train-result", help="TrainResult JSON of the child's run (its sanity checks)")
    g.add_argument("--out", default="runs/gate-evals", help="where evaluations are stored and reused")
    g.add_argument("--json", action="store_true", help="print the verdict as JSON")
    g.set_defaults(func=cmd_gate)
    p = sub.add_parser("profile", help="CapTrack profile and paired retention of a model vs its base",
                       epilog=PROFILE_EXAMPLE, formatter_class=_raw())
    p.add_argument("--base", required=True, help="base (out-of-the-box) model directory")
    p.add_argument("--model", required=True, help="adapted model directory")
    p.add_argument("--split", default="adoption", choices=("validation", "adoption", "test"))
    p.add_argument("--out", default="runs/gate-evals", help="where evaluations are stored and reused")
    p.add_argument("--heatmap", help="also write this PNG (and the same numbers beside it as .json)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_profile)


def _raw():
    return argparse.RawDescriptionHelpFormatter


# --- pieces the agent loop can reuse ----------------------------------------------------


def gate_config_for(run):
    """The gate's frozen config from a RunConfig (policies.gate.uniform_gate_config owns the rule)."""
    from policies.gate import uniform_gate_config  # noqa: PLC0415 (numpy)

    return uniform_gate_config(ifeval_max_drop_pp=run.gate_ifeval_drop_pp, min_gain_pp=run.gate_min_gain_pp,
                               kappa_pp=run.gate_kappa_pp, alpha=run.gate_alpha)


def family_targets(target: str, extra: list[str]) -> dict[str, str]:
    """{family: SUITE.METRIC}: the target's family first, then each FAMILY=SUITE.METRIC."""
    def family_of(key: str) -> str:
        fam = key.partition("/")[0]
        if fam not in FAMILIES or "." not in key:
            raise BadInput(f"{key!r} is not a family metric like sql/target.exec_acc; fix --target / --family-target")
        return fam

    out = {family_of(target): target}
    for pair in extra:
        fam, sep, key = pair.partition("=")
        if not sep or fam != family_of(key):
            raise BadInput(f"--family-target {pair!r}: write FAMILY=SUITE.METRIC with the suite of that family")
        if fam in out and out[fam] != key:
            raise BadInput(f"family {fam} given two targets ({out[fam]}, {key}); keep one")
        out[fam] = key
    return out


def _model_dir(path: str) -> str:
    """A loadable local model folder (agent.inputs.check_model_dir), checked before anything is written."""
    if not Path(path).is_dir():
        raise BadInput(f"model directory {path} not found: pass a local model folder")
    check_model_dir(path, "--model")
    return path


def evaluate_model(path: str, suites: list[str], split: str, out: str) -> dict:
    """Evaluate (or reuse the stored generations of) one model on `suites`."""
    key = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
    return evaluators.evaluate(_model_dir(path), sorted(set(suites)), split, out_dir=str(Path(out) / key))


def _sanity(path: str | None) -> tuple:
    if path is None:
        return ()

    if not Path(path).is_file():
        raise BadInput(f"train result {path} not found: pass the TrainResult JSON the train command wrote")
    return parse_model(TrainResult, Path(path).read_text(encoding="utf-8")).sanity


# --- commands ---------------------------------------------------------------------------


def cmd_gate(args) -> int:
    from policies.gate import gate  # noqa: PLC0415 (numpy)

    config = gate_config_for(build_config(args.config))
    targets = family_targets(args.target, args.family_target)
    sanity = _sanity(args.train_result)
    specs = tuple(evaluators.metric_specs())
    suites = [config.ifeval_suite] + [s.name.partition(".")[0] for s in specs]
    suites += [k.partition(".")[0] for k in targets.values()]
    for path in (args.initial, args.parent, args.child):
        _model_dir(path)  # every path checked before anything is evaluated or written
    results = {role: evaluate_model(path, suites, "adoption", args.out)
               for role, path in (("initial", args.initial), ("parent", args.parent), ("child", args.child))}
    suite, _, metric = args.target.partition(".")
    verdict = gate(results["initial"], results["parent"], results["child"], config, specs,
                   target_suite=suite, target_metric=metric, family_targets=targets, sanity=sanity)
    if args.json:
        print(verdict.model_dump_json(indent=2))
    else:
        print(f"{'PROMOTE' if verdict.promote else 'REJECT'} (decided by {verdict.decided_by}), U_prom={verdict.u_prom}")
        for c in verdict.checks:
            print(f"  {'pass' if c.passed else 'FAIL'}  {c.name:14s} {c.reason}")
    return 0 if verdict.promote else 1


def profile_report(base: dict, model: dict, specs: tuple) -> dict:
    """CapTrack profile + paired retention as plain JSON (what `agent profile --json` prints),
    its regimes judged as the gate of a default run config judges them."""
    from policies.captrack import captrack_profile  # noqa: PLC0415 (numpy)

    prof = captrack_profile(base, model, specs, gate_config_for(build_config()))
    paired = [s for s in sorted(set(base) & set(model)) if base[s].items and model[s].items]
    return {"base_sha256": next(iter(base.values())).identity.model_sha256,
            "model_sha256": next(iter(model.values())).identity.model_sha256,
            "profile": prof.model_dump(mode="json"),
            "retention": retention_summary(base, model, paired).model_dump(mode="json")}


def heatmap_column(report: dict) -> dict[str, float | None]:
    """One heat-map column (groups, then sub-capabilities) from a profile report."""
    prof = report["profile"]
    return {c["name"]: c["drift_pct"] for c in prof["groups"] + prof["subs"]}


def cmd_profile(args) -> int:
    specs = tuple(evaluators.metric_specs())
    _model_dir(args.base), _model_dir(args.model)
    base = evaluate_model(args.base, list(TASKS), args.split, args.out)
    model = evaluate_model(args.model, list(TASKS), args.split, args.out)
    report = profile_report(base, model, specs)
    if args.heatmap:
        png = Path(args.heatmap)
        write_heatmap({Path(args.model).name: heatmap_column(report)}, png, png.with_suffix(".json"))
    if args.json:
        print(json.dumps(report, indent=2, allow_nan=False))
    else:
        for c in report["profile"]["groups"] + report["profile"]["subs"]:
            capped = f" (capped from {c['raw_severity']}: {c['capped_by']})" if c["capped_by"] else ""
            print(f"  {c['name']:12s} drift {c['drift_pct']}  {c['severity']}{capped}")
        r = report["retention"]
        print(f"  retention mean {r['mean_retention_pct']}  worst task {r['worst_task']} F={r['worst_forgetting_pct']}")
    return 0
