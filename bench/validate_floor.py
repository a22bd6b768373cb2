"""Where the Validate predictors' held-out errors come from (issue 27's aims: extrapolation under 1 pp,
go/no-go at 90 %), on committed seeded retrospectives, held out by world.

    PYTHONPATH=. .venv/bin/python bench/validate_floor.py docs/results/retrospective-v5-w0 \\
        docs/results/retrospective-v5-w1 docs/results/retrospective-v5-w2 [--cache $AGENT_CACHE]

1. Extrapolation. The product's model (policies.extrapolate: full = the trial's 20 % reading + a
   group's growth, per method and adapter kind) against three candidates a reader would try next,
   each fitted on the other worlds' runs of the same group: a regression of the full-run change on
   the 20 % reading (shrinks a noisy reading toward the group), on all three curve readings (5, 10,
   20 %), and the product's growth plus a ridge regression of the growth on the card's recipe (log
   learning rate, LoRA, replay share, KL beta, temperature, constant schedule; catalogue of
   agent.world.catalogue, which the retrospectives ran). Mean |predicted - full| in pp per metric.
   If none beats the product's, the error is not the model's form but what it reads.
2. What the trial reads (--cache). The paired SE of the IFEval prompt-strict change between two
   models on the same 200 validation prompts (the trial's reading), over every pair of cached
   evaluations of one world whose scores differ by under 3 pp (a trial against its parent is such a
   pair): the noise floor of any prediction from one reading.
3. Go/no-go calibration. policies.gonogo chooses its threshold by Learn-then-Test on cross-fitted
   P(harmful): within each training fold, one world's runs scored by a model fitted on the other
   training world alone. Per held-out world: harmful runs among the k lowest calibration scores
   (k = ltt.min_authorized, the fewest a threshold can pass on with none harmful, and more),
   beside the same count on the held-out world scored by the fold's model fitted on both worlds.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _groups(runs):
    out = {}
    for r in runs:
        out.setdefault((r.method, r.adapter or "*"), []).append(r)
    return out


def _lstsq(rows, y, ridge: float = 0.0):
    a = np.column_stack([np.ones(len(rows)), np.asarray(rows, dtype=float)])
    if ridge == 0.0:  # least squares (minimum norm where a reading is constant over the group)
        return np.linalg.lstsq(a, np.asarray(y, dtype=float), rcond=None)[0]
    penalty = ridge * np.eye(a.shape[1])
    penalty[0, 0] = 0.0
    return np.linalg.solve(a.T @ a + penalty, a.T @ np.asarray(y, dtype=float))


def _apply(coef, rows):
    return np.column_stack([np.ones(len(rows)), np.asarray(rows, dtype=float)]) @ coef


@functools.cache
def _knobs() -> dict[str, dict]:
    from agent.world.catalogue import _SPEC

    return {row[0]: row[5] for row in _SPEC}


def _recipe(card_id: str) -> list[float]:
    k = _knobs()[card_id]
    return [math.log10(k["lr"]), float("lora" in k), k.get("replay", 0.0), k.get("beta", 0.0), k.get("temp", 1.0),
            float(k.get("sched") == "constant")]


def extrapolation(runs) -> dict[str, dict[str, float]]:
    from policies.curves import RETENTION

    def reading(r, m):
        return r.curve[-1].retention_pp[m]

    models = {
        "offset (the product's)": lambda tr, te, m: [reading(r, m) + np.mean([x.full.retention_pp[m] - reading(x, m)
                                                                            for x in tr]) for r in te],
        "regression on the 20 % reading": lambda tr, te, m: _apply(
            _lstsq([[reading(r, m)] for r in tr], [r.full.retention_pp[m] for r in tr]), [[reading(r, m)] for r in te]),
        "regression on the 3 curve readings": lambda tr, te, m: _apply(
            _lstsq([[p.retention_pp[m] for p in r.curve] for r in tr], [r.full.retention_pp[m] for r in tr]),
            [[p.retention_pp[m] for p in r.curve] for r in te]),
        "offset + ridge on the recipe": lambda tr, te, m: [reading(r, m) + g for r, g in zip(te, _apply(
            _lstsq(_z(tr, tr), [x.full.retention_pp[m] - reading(x, m) for x in tr], ridge=10.0), _z(tr, te)))],
    }
    out = {}
    for name, model in models.items():
        out[name] = {}
        for m in RETENTION:
            errors = []
            for w in sorted({r.world_seed for r in runs}):
                train = _groups([r for r in runs if r.world_seed != w])
                for key, test in _groups([r for r in runs if r.world_seed == w]).items():
                    pred = model(train[key], test, m)
                    errors += [abs(p - r.full.retention_pp[m]) for p, r in zip(pred, test)]
            out[name][m] = float(np.mean(errors))
    return out


def _z(train, rows):
    x = np.array([_recipe(r.card_id) for r in train])
    mu, sd = x.mean(0), x.std(0)
    sd[sd == 0] = 1.0
    return (np.array([_recipe(r.card_id) for r in rows]) - mu) / sd


def reading_noise(cache: Path, close_pp: float = 3.0) -> list[dict]:
    by_data: dict[str, dict[str, dict[str, float]]] = {}
    for f in cache.glob("runs/entries/eval/*/*/files/ifeval.validation.result.json"):
        r = json.loads(f.read_text())
        by_data.setdefault(r["identity"]["data_sha256"], {})[r["identity"]["model_sha256"]] = {
            it["item_id"]: 100.0 * float(it["correct"]) for it in r["items"]}
    out = []
    for data, models in sorted(by_data.items()):
        ses = []
        for a, b in itertools.combinations(models.values(), 2):
            ids = sorted(set(a) & set(b))
            d = np.array([a[i] - b[i] for i in ids])
            if len(ids) > 1 and abs(d.mean()) < close_pp:
                ses.append(d.std(ddof=1) / math.sqrt(len(ids)))
        if ses:
            out.append({"data": data[:12], "models": len(models), "items": len(ids), "close_pairs": len(ses),
                        "paired_se_median_pp": float(np.median(ses)),
                        "paired_se_iqr_pp": [float(np.percentile(ses, 25)), float(np.percentile(ses, 75))]})
    return out


def calibration(sources: list[Path]) -> list[dict]:
    from agent.cli.measure import gonogo_inputs, gonogo_rule
    from policies import gonogo, gonogo_features, ltt
    from policies.curves import footing_of

    runs, records = gonogo_inputs(sources)
    rule = gonogo_rule(0.1, 0.1)
    footing, _ = footing_of(runs)
    floor = ltt.min_authorized(rule["alpha"], rule["delta"])
    ks = (floor, 2 * floor, 3 * floor)
    out = []
    for w in sorted({r.world_seed for r in runs}):
        train = [r for r in runs if r.world_seed != w]
        test = [r for r in runs if r.world_seed == w]
        labels = gonogo._labels(train, rule["band"], rule["ifeval_drop_pp"])
        x = gonogo_features.matrix(train, records, footing)
        _, groups = gonogo.groups_of(train)
        p_cal = gonogo.out_of_group(x, labels, groups, gonogo.DEFAULT_C)[1]
        model = gonogo.fit(train, records, footing=footing, **rule)
        _, p_test = gonogo.predict(model, gonogo_features.matrix(test, records, footing))
        harm_cal = np.array([lab == "harmful" for lab in labels])
        harm_test = np.array([r.outcome(band=rule["band"], ifeval_drop_pp=rule["ifeval_drop_pp"]) == "harmful"
                              for r in test])
        out.append({"held_out": w, "threshold": model.threshold.threshold,
                    "calibration": {k: int(harm_cal[np.argsort(p_cal)[:k]].sum()) for k in ks},
                    "held_out_world": {k: int(harm_test[np.argsort(p_test)[:k]].sum()) for k in ks}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="executed seeded retrospectives (docs/results/retrospective-v5-w*)")
    ap.add_argument("--cache", type=Path, default=None, help="AGENT_CACHE whose cached IFEval evaluations to read (2.)")
    args = ap.parse_args()
    from agent.experiments.extrapolation import load_runs
    from policies.curves import footing_of
    from policies.extrapolate import _seated

    runs = load_runs(args.sources)
    runs = _seated(runs, footing_of(runs)[0])
    print(f"1. extrapolation, held out by world ({len(runs)} paired runs): mean |predicted - full| pp")
    for name, errs in extrapolation(runs).items():
        print(f"   {name:36s} " + "  ".join(f"{m} {e:.2f}" for m, e in errs.items()))
    if args.cache is not None:
        print("2. the trial's reading: paired SE of IFEval prompt strict between close models (200 prompts)")
        for row in reading_noise(args.cache):
            print(f"   data {row['data']}: {row['models']} models, {row['close_pairs']} pairs within 3 pp, "
                  f"median {row['paired_se_median_pp']:.2f} pp [IQR {row['paired_se_iqr_pp'][0]:.2f}, "
                  f"{row['paired_se_iqr_pp'][1]:.2f}]")
    print("3. go/no-go: harmful runs among the k lowest P(harmful), cross-fitted calibration vs held-out world")
    for row in calibration([Path(s) for s in args.sources]):
        print(f"   world {row['held_out']} held out (threshold {row['threshold']}): calibration "
              + ", ".join(f"{v}/{k}" for k, v in row["calibration"].items()) + "; held-out world "
              + ", ".join(f"{v}/{k}" for k, v in row["held_out_world"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
