"""The trial's forgetting extrapolation as a frozen boundary of a run (issue 27, item 2).

The model is a JSON file `agent extrapolate --retrospective SRC --save OUT.json` writes
(policies.extrapolate.Fit: per (method, adapter) group, the growth of each IFEval strict change
from the trial's fraction to full length, with its leave-one-out scale). A run given one (the
run config's `extrapolation_model`, `agent run --extrapolation-model FILE`), whatever its policy,
copies the file into its directory before the manifest is frozen and records the copy's sha256
and the fit's facts in the manifest (ExtrapolationInfo). From then on the loop's validate node
and the audit read the copy (agent/run/frozen_file.py); a copy that no longer matches the
manifest, or a user's file changed before a resume, is BadInput.
"""

from __future__ import annotations

from agent.config import RunConfig
from agent.inputs import read_text
from agent.run.frozen_file import check_source, frozen_text
from agent.run.manifest import ExtrapolationInfo, Manifest
from agent.run.rundir import RunDir
from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.hashing import sha256_text
from policies import extrapolate
from policies.curves import CONTROL_FOOTING_WARNING
from policies.trial_rules import RetentionGuard

NOUN = "extrapolation model"


def read_model(cfg: RunConfig) -> tuple[str, ExtrapolationInfo] | None:
    """(the model file's text, its manifest record) where the config names one, else None; BadInput
    when it is missing, not an extrapolation model, or fitted at another trial fraction than the
    run's. Writes nothing."""
    if cfg.extrapolation_model is None:
        return None
    text = read_text(cfg.extrapolation_model, NOUN)
    try:
        fit = extrapolate.loads(text)
    except BadInput as exc:  # it names the defect, not the file or what to do
        raise BadInput(f"--extrapolation-model {cfg.extrapolation_model}: {exc}: fit one with `agent extrapolate "
                       "--retrospective DIR ... --save OUT.json` and pass --extrapolation-model OUT.json") from None
    fractions = sorted({g.trial_fraction for g in fit.groups})
    if not fit.groups or fractions != [cfg.trial_fraction]:
        raise BadInput(f"extrapolation model {cfg.extrapolation_model} was fitted at trial fractions {fractions}, "
                       f"the run's trials stop at {cfg.trial_fraction:g}: fit it on retrospective cells whose trials "
                       "stop there, or set trial_fraction to match")
    return text, ExtrapolationInfo(
        sha256=sha256_text(text), source=cfg.extrapolation_model, training_hash=fit.training_hash, n_runs=fit.n_runs,
        groups=tuple(f"{g.method}/{g.adapter}" for g in fit.groups), trial_fraction=fractions[0], footing=fit.footing,
        footing_warning=CONTROL_FOOTING_WARNING if fit.footing == "control" else None)


def freeze_copy(rundir: RunDir, text: str) -> None:
    """Write the model's frozen copy (before the manifest: a started run always has it)."""
    write_atomic(rundir.extrapolation_file, text)


def frozen_guard(rundir: RunDir, manifest: Manifest) -> RetentionGuard | None:
    """The run's frozen extrapolation with the run's frozen IFEval guard (None where it froze none);
    BadInput when the copy is gone or differs from the sha256 the manifest froze."""
    info = manifest.extrapolation
    if info is None:
        return None
    fit = extrapolate.loads(frozen_text(rundir.extrapolation_file, info.sha256, info.source, NOUN))
    return RetentionGuard(fit=fit, drop_pp=manifest.gate.ifeval_max_drop_pp)


def check_resume(rundir: RunDir, manifest: Manifest) -> None:
    """Before a resume: the frozen copy is intact, and the user's file, where it still exists, is the
    model the run froze."""
    frozen_guard(rundir, manifest)
    info = manifest.extrapolation
    if info is not None:
        check_source(info.source, info.sha256, rundir.extrapolation_file, rundir.episode_id, NOUN)
