"""bcit_predictive's go/no-go model as a frozen boundary of a run (issue 27, item 3).

The model is a JSON file `agent gonogo SOURCES --model OUT.json` writes (policies.gonogo.GoNoGo:
coefficients, features, training-data hash, threshold, alpha, delta, library versions). A run
that uses it (policies.authorize.NEEDS_GONOGO) copies the file into its directory before the
manifest is frozen and records the copy's sha256 and the model's frozen numbers in the manifest
(GoNoGoInfo), like every other boundary. From then on every reader (the loop's validate node,
the audit) reads the copy, never the user's path; a copy that no longer matches the manifest,
or a user's file that changed before a resume, is refused with BadInput.

`--gonogo-model library` reads the model from the bank instead: the refit that consolidation stored
as an artefact of a library version (agent/run/gonogo_refit.py), the newest at or before the version
the episode starts on. The manifest records source `library`, and the model's own numbers say which
version stores it (library_version), its training hash and n_train; the run freezes its copy as for
a file. The bank's artefact cannot change (frozen rows), so a resume compares nothing else.
"""

from __future__ import annotations

from pathlib import Path

from agent.config import RunConfig
from agent.inputs import check_bank_file, read_text
from agent.run.frozen_file import check_source, frozen_text
from agent.run.manifest import GoNoGoInfo, Manifest
from agent.run.rundir import RunDir
from experience_bank.bank import Bank
from experience_bank.errors import BadInput
from experience_bank.migrations import would_migrate
from experience_bank.files import write_atomic
from experience_bank.hashing import sha256_text
from policies import gonogo
from policies.authorize import NEEDS_GONOGO
from policies.curves import CONTROL_FOOTING_WARNING

HOW_TO_FIT = ("fit one with `agent gonogo SOURCES --model OUT.json` (SOURCES: executed retrospective directories "
              "or a retrospective JSON) and pass --gonogo-model OUT.json (or gonogo_model: in the config)")
LIBRARY = "library"
"""`--gonogo-model library` (config `gonogo_model: library`): the refit the bank's library stores
(agent/run/gonogo_refit.py), the newest at or before the library version the episode starts on."""
LIBRARY_KIND = "gonogo"
"""The kind of library artefact the refit is stored as (Bank.artefact)."""


def library_text(bank_path: str, bank: Bank | None = None, version: int | None = None) -> tuple[int, str]:
    """(the library version storing it, the text) of the go/no-go refit the bank's library holds at
    `version` (default: the current one); BadInput with the fix where there is none. Opens the bank
    at `bank_path` when `bank` is not given (an up-to-date bank is only read)."""
    no_refit = (f"--gonogo-model {LIBRARY} reads the go/no-go refit that consolidation stores in bank {bank_path}'s "
                "library, and there is none yet: run an episode of bcit_predictive with a fitted model first "
                f"({HOW_TO_FIT}); its consolidation stores the refit")
    if bank is None:
        if not Path(bank_path).is_file():
            raise BadInput(no_refit)
        check_bank_file(bank_path)  # an SQLite bank, before opening migrates anything else into one
        if would_migrate(bank_path):  # older than library artefacts: it holds none, and a refusal writes nothing
            raise BadInput(no_refit)
        with Bank.open(bank_path) as opened:
            return library_text(bank_path, opened, version)
    found = bank.artefact(LIBRARY_KIND, version)
    if found is None:
        raise BadInput(no_refit)
    return found


def read_model(cfg: RunConfig, bank: Bank | None = None, version: int | None = None) -> tuple[str, GoNoGoInfo] | None:
    """(the model file's text, its manifest record) where the policy needs one, else None;
    BadInput when it is not given, missing or not a go/no-go model. Writes nothing. With
    `--gonogo-model library`, the bank's refit at library version `version` (`bank`: the episode's
    open bank; else the config's bank is opened)."""
    if cfg.policy not in NEEDS_GONOGO:
        return None
    if cfg.gonogo_model is None:
        raise BadInput(f"policy {cfg.policy} needs a fitted go/no-go model and none was given: {HOW_TO_FIT}")
    if cfg.gonogo_model == LIBRARY:
        text = library_text(cfg.bank, bank, version)[1]
    else:
        text = read_text(cfg.gonogo_model, "go/no-go model")
    try:
        m = gonogo.loads(text)
    except BadInput as exc:  # it names the defect, not the file or what to do
        raise BadInput(f"--gonogo-model {cfg.gonogo_model}: {exc}: {HOW_TO_FIT}") from None
    return text, GoNoGoInfo(sha256=sha256_text(text), source=cfg.gonogo_model, training_hash=m.training_hash,
                            feature_names=m.feature_names, threshold=m.threshold.threshold, alpha=m.alpha,
                            delta=m.delta, n_train=m.n_train, library_version=m.library_version,
                            sklearn_version=m.sklearn_version, footing=m.footing,
                            footing_warning=CONTROL_FOOTING_WARNING if m.footing == "control" else None,
                            prior_threshold=m.prior.threshold.threshold if m.prior is not None else None,
                            beneficial_floor=m.beneficial_floor)


def freeze_copy(rundir: RunDir, text: str) -> None:
    """Write the model's frozen copy (before the manifest: a started run always has it)."""
    write_atomic(rundir.gonogo_file, text)


def frozen_model(rundir: RunDir, manifest: Manifest) -> gonogo.GoNoGo | None:
    """The run's frozen model (None where its policy reads none); BadInput when the copy is gone
    or differs from the sha256 the manifest froze."""
    info = manifest.gonogo
    if info is None:
        return None
    return gonogo.loads(frozen_text(rundir.gonogo_file, info.sha256, info.source, "go/no-go model"))


def check_resume(rundir: RunDir, manifest: Manifest) -> None:
    """Before a resume: the frozen copy is intact, and the user's file, where it still exists, is the
    model the run froze (a refit file would otherwise be silently ignored)."""
    frozen_model(rundir, manifest)
    info = manifest.gonogo
    if info is not None and info.source != LIBRARY:  # a library artefact is frozen in the bank: nothing to compare
        check_source(info.source, info.sha256, rundir.gonogo_file, rundir.episode_id, "go/no-go model")
