"""The Validate rules `agent gonogo` measures beside the learned go/no-go (issue 27, item 5).

Each rule is the loop's own, reached through the one function the loop's validate node calls,
policies.trial_rules.acted_verdict, on the TrialFacts that a retrospective's paired run gives
(`trial_facts`); a rule's go is its verdict `pass` (an Inconclusive is no go: the fallback lease
that may still train it is an episode's budget, not the rule's prediction).

- `trial pass @0.20`: the trial's own verdict (trainers.trial.verdict under the retrospective's
  thresholds, retro_run.TRIAL_THRESHOLDS), what bcit and validate_all act on.
- `early stop extrapolation`: policies.early_stop on the trial's target curve, held to the
  adoption threshold MIN_EFFECT_PP (the run config's gate_min_gain_pp, the value the loop passes
  as the gate's min_gain_pp and the retrospective's effect band).
- `successive halving`: policies.halving, with each (world seed, training seed) one episode of
  the catalogue's trials, every one ranked on its 20 % target gain (`episodes`).
- `trial pass, extrapolated retention`: the trial's verdict after its retention check at full
  length (policies.extrapolate.trial_retention, guard IFEVAL_DROP_PP, the run config's
  gate_ifeval_drop_pp), as the loop applies it with a frozen extrapolation model: Fail where the
  extrapolated IFEval change is below the guard; the raw reading's check stays in the trial's own
  verdict. The extrapolation is learned from paired runs, so it is a FoldBaseline: fitted on the
  fold's other groups only (`extrapolated`), as `agent compare --fit-from` fits it on the other
  worlds; a model fitted on every run would be read on its own training data.
- `gradient-boosted, P(beneficial) >= 0.5` (`boosted`, a FoldBaseline): the go/no-go's own features
  (policies.gonogo_features, on the go/no-go's footing) into scikit-learn's histogram gradient
  boosting, go where it gives P(beneficial) >= 1/2: TuneAhead's model class beside the go/no-go's
  logistic heads, to measure the choice policies/gonogo.py argues for. Its settings (BOOSTING) were
  fixed before it was first run and are not tuned; it has no Learn-then-Test threshold, so it
  compares with the go/no-go's `p_beneficial>=0.5` row.
- `the card's majority on the other worlds` (`card_memory`, a FoldBaseline where the runs span several
  worlds): go iff most of the same card's full runs on the fold's other worlds were beneficial; a
  reference, not a loop rule: a user's own card has no history under its name.

Readings. Every rule reads the trial as the retrospective recorded it: its short runs against their
matched control (PairedRun.curve), the readings `trial pass @0.20` has always read, so the four rules
differ in their rule only (the extrapolation is fitted on that footing too). A loop's trial reads
against the parent; the go/no-go's features read that footing where every run has it
(Evaluation.footing).

Episode order. The loop meets candidates in proposal order and halving ranks each trial among the
episode's trials so far; a retrospective has no episode order, so the stated, fixed choice is the
catalogue's (agent.world.catalogue.card_ids, the order the retrospective runs its cells), a card
not in it after those, in the order read. Every cell of a retrospective ran its trial, so every run
enters its episode's ranking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier

from experience_bank.errors import BadInput
from agent.experiments.retro_cells import IFEVAL_DROP_PP, MIN_EFFECT_PP
from agent.experiments.retro_run import TRIAL_THRESHOLDS
from agent.world.catalogue import card_ids
from policies import extrapolate, gonogo_features
from policies.authorize import EpisodeState, Verdict
from policies.curves import CurvePoint, Footing, PairedRun, curve_table, footing_of
from policies.gonogo_eval import Baseline, FoldBaseline
from policies.trial_rules import RetentionGuard, TrialFacts, acted_verdict
from trainers.steps import MAX_TRIAL_FRACTION
from trainers.trial import verdict

TRIAL = "trial pass @0.20"
EARLY_STOP = "early stop extrapolation"
HALVING = "successive halving"
EXTRAPOLATED = "trial pass, extrapolated retention"
CARD_MEMORY = "the card's majority on the other worlds"
BOOSTED = "gradient-boosted, P(beneficial) >= 0.5"
BOOSTING = dict(max_depth=3, learning_rate=0.05, max_iter=200, min_samples_leaf=10)
"""HistGradientBoostingClassifier's settings for BOOSTED: shallow trees, a slow rate and leaves of ten
runs, for a few hundred rows; set before the first run, not tuned on any outcome."""
OWN_VERDICT = "bcit"
"""A policy without a trial rule of its own (not in policies.trial_rules.TRIAL_RULES): it acts on
the trial's verdict, after the retention check at full length where a model is frozen."""


def trial_point(run: PairedRun) -> CurvePoint:
    """The trial's own reading: the short run at the trial's fraction (trainers.steps.MAX_TRIAL_FRACTION)."""
    for p in run.curve:
        if abs(p.fraction - MAX_TRIAL_FRACTION) < 1e-9:
            return p
    raise BadInput(f"paired run {run.card_id} (seed {run.seed}) has no short run at {MAX_TRIAL_FRACTION:.2f}: "
                   "pass cells of `agent retrospective --execute`, which run the trial there")


def recorded(run: PairedRun) -> Verdict:
    """The trial's verdict under the retrospective's thresholds (its one owner, trainers.trial.verdict)."""
    point = trial_point(run)
    failures = ("sanity",) if point.hard_failure else ()
    return verdict(point.target_pp, point.retention_pp, (), TRIAL_THRESHOLDS, train_failures=failures)[0]


def trial_facts(run: PairedRun, retention: RetentionGuard | None = None) -> TrialFacts:
    """What the loop's validate node hands a trial rule, read off the run's trial (the module's `Readings`)."""
    return TrialFacts(recorded(run), curve_table(run.curve), MIN_EFFECT_PP, gain=trial_point(run).target_pp,
                      card=run, retention=retention)


def _goes(policy: str, run: PairedRun, state: EpisodeState,
          retention: RetentionGuard | None = None) -> tuple[bool, EpisodeState]:
    own, after, _ = acted_verdict(policy, trial_facts(run, retention), state)
    return own.verdict == "pass", after


def trial_passes(run: PairedRun) -> bool:
    return _goes(OWN_VERDICT, run, EpisodeState())[0]


def early_stop_passes(run: PairedRun) -> bool:
    return _goes("early_stop_extrapolation", run, EpisodeState())[0]


def _key(run: PairedRun) -> tuple[int, str, int]:
    return run.world_seed, run.card_id, run.seed


def episodes(runs: Sequence[PairedRun]) -> list[list[PairedRun]]:
    """Each (world seed, training seed)'s runs, in the catalogue's order (the module's `Episode order`);
    BadInput where a run comes twice (a source passed twice would rank a trial against itself)."""
    keys = [_key(r) for r in runs]
    if len(set(keys)) != len(keys):
        raise BadInput("the same (world seed, card, seed) came twice: pass each retrospective once")
    order = {c: i for i, c in enumerate(card_ids())}
    by_episode: dict[tuple[int, int], list[PairedRun]] = {}
    for r in runs:
        by_episode.setdefault((r.world_seed, r.seed), []).append(r)
    return [sorted(e, key=lambda r: order.get(r.card_id, len(order))) for e in by_episode.values()]


def halving(runs: Sequence[PairedRun]) -> Baseline:
    """Successive halving's go for each of `runs`, every episode walked from an empty EpisodeState."""
    go: dict[tuple[int, str, int], bool] = {}
    for episode in episodes(runs):
        state = EpisodeState()
        for run in episode:
            go[_key(run)], state = _goes("successive_halving", run, state)
    return lambda run: go[_key(run)]


def extrapolated(train: Sequence[PairedRun]) -> Baseline:
    """A FoldBaseline: the trial's verdict after its retention check at full length, the extrapolation
    fitted on `train` (a fold's runs without its held-out group) on the trial's footing (control)."""
    try:
        guard = RetentionGuard(fit=extrapolate.fit(train, footing="control"), drop_pp=IFEVAL_DROP_PP)
    except BadInput as exc:
        raise BadInput(f"`{EXTRAPOLATED}` fits the forgetting extrapolation on each fold's other runs: {exc}") from None
    return lambda run: _goes(OWN_VERDICT, run, EpisodeState(), guard)[0]


def _beneficial(run: PairedRun) -> bool:
    return run.outcome(band=MIN_EFFECT_PP, ifeval_drop_pp=IFEVAL_DROP_PP) == "beneficial"


def card_memory(train: Sequence[PairedRun]) -> Baseline:
    """A FoldBaseline that remembers full runs by card id: go iff most of the card's full runs among
    `train` were beneficial (policies.outcomes, under the retrospective's band and guard); no go for a
    card it never saw. Held out by world, `train` is the other worlds: what a bank keyed by card would
    know of the same recipe elsewhere, with nothing of the run's own curve. The go/no-go reads no card
    id, so this says how much of a card's outcome carries across worlds by its name alone."""
    seen: dict[str, list[bool]] = {}
    for r in train:
        seen.setdefault(r.card_id, []).append(_beneficial(r))

    def goes(run: PairedRun) -> bool:
        votes = seen.get(run.card_id, [])
        return 2 * sum(votes) > len(votes)
    return goes


def boosted(records: Mapping[str, gonogo_features.Record] | None, footing: Footing) -> FoldBaseline:
    """A FoldBaseline maker: gradient boosting on the go/no-go's features of the fold's runs (`records`
    as the go/no-go reads them, the curves on `footing`); go iff P(beneficial) >= 1/2. A fold whose runs
    hold one class only goes on every run or none, as that class says."""
    def fold(train: Sequence[PairedRun]) -> Baseline:
        y = np.array([_beneficial(r) for r in train])
        if y.all() or not y.any():
            return lambda run, everything=bool(y.all()): everything
        model = HistGradientBoostingClassifier(**BOOSTING).fit(gonogo_features.matrix(train, records, footing), y)
        return lambda run: bool(model.predict_proba(gonogo_features.matrix([run], records, footing))[0, 1] >= 0.5)
    return fold


def baselines(runs: Sequence[PairedRun], records: Mapping[str, gonogo_features.Record] | None = None
              ) -> tuple[dict[str, Baseline], dict[str, FoldBaseline]]:
    """(the rules that learn nothing, the rules made per fold) for policies.gonogo_eval.evaluate on `runs`
    (`records`: the records the go/no-go reads, for the boosted model's features); the card memory only
    where the runs span several worlds (held out by card, a fold never saw its card)."""
    per_fold: dict[str, FoldBaseline] = {EXTRAPOLATED: extrapolated,
                                         BOOSTED: boosted(records, footing_of(runs)[0])}
    if len({r.world_seed for r in runs}) > 1:
        per_fold[CARD_MEMORY] = card_memory
    return {TRIAL: trial_passes, EARLY_STOP: early_stop_passes, HALVING: halving(runs)}, per_fold
