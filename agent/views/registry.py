"""The MLflow model registry side of tracking (agent/views/tracking.py): versions and aliases of
one lineage's registered model, following what the run directory recorded.

A promoted child is a version tagged with its decision hash and weights hash; `champion` follows
`parent.json` (the truth) and the champion it replaced keeps `previous`; a fully trained child is
`challenger` while its gate runs, and a rolled-back one keeps its version tagged
`outcome=rolled_back`. Every function searches before it creates, so a second sync or a resumed
episode registers nothing twice. `client` is an `mlflow.MlflowClient`; the tracker holds it and
its guard (a failing registry warns once and the episode goes on).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.run.promotion import read_pointer
from agent.run.rundir import RunDir
from agent.views.modelcard import card_path

CHAMPION, PREVIOUS, CHALLENGER = "champion", "previous", "challenger"


def registered(client, lineage: str) -> None:
    """The lineage's registered model, created once."""
    from mlflow.exceptions import MlflowException  # noqa: PLC0415 (mlflow)

    try:
        client.get_registered_model(lineage)
    except MlflowException:
        client.create_registered_model(lineage, tags={"lineage": lineage})


def register(client, rd: RunDir, promoted: list, runs: Mapping[str, Any], lineage: str) -> None:
    """A version per promoted child (linked to its decision run), then `champion` where parent.json points."""
    registered(client, lineage)
    for event in promoted:
        version(client, rd, lineage, event.decision.decision_hash, event.candidate_id,
                runs[event.decision.decision_hash].info.run_id, f"{event.candidate_id}: {event.reason[:200]}")
    move_champion(client, rd, lineage)


def version(client, rd: RunDir, lineage: str, dh: str, candidate: str, run_id: str | None, description: str):
    """The version of the child a decision trained, created once; its model card and decision run
    are tagged as soon as they exist."""
    found = client.search_model_versions(f"name = '{lineage}' and tag.decision_hash = '{dh}'")
    run = rd.train(dh)
    train = None if run is None else run.model_dump(mode="json")
    card = card_path(Path(train["checkpoint"]).resolve())
    if found:
        ver = found[0]
    else:
        ver = client.create_model_version(lineage, source=str(card.parent), run_id=run_id, tags={
            "episode_id": rd.episode_id, "decision_hash": dh, "candidate": candidate,
            "sha256": train["checkpoint_sha256"]}, description=description)
    if card.is_file() and ver.tags.get("model_card") != str(card):  # written at promotion, after the challenger
        client.set_model_version_tag(lineage, ver.version, "model_card", str(card))
        client.update_model_version(lineage, ver.version, description=f"{description}\nmodel card: {card}")
    if run_id and ver.tags.get("decision_run_id") != run_id:
        client.set_model_version_tag(lineage, ver.version, "decision_run_id", run_id)
    return ver


def mark_challenger(client, rd: RunDir, lineage: str, decision_hash: str, candidate: str) -> None:
    """Register a fully trained child and point `challenger` at it (before its gate)."""
    registered(client, lineage)
    ver = version(client, rd, lineage, decision_hash, candidate, None, f"{candidate}: under evaluation")
    client.set_registered_model_alias(lineage, CHALLENGER, ver.version)


def settle_challenger(client, rd: RunDir, events: list, runs: Mapping[str, Any], lineage: str) -> None:
    """A committed child is no longer the challenger; a rolled-back one's version says so."""
    from mlflow.exceptions import MlflowException  # noqa: PLC0415 (mlflow)

    committed = {e.decision.decision_hash: e for e in events}
    try:
        current = client.get_registered_model(lineage).aliases.get(CHALLENGER)  # (searches omit aliases)
    except MlflowException:
        return  # nothing registered yet
    versions = client.search_model_versions(f"name = '{lineage}' and tag.episode_id = '{rd.episode_id}'")
    for ver in versions:
        event = committed.get(ver.tags.get("decision_hash"))
        if event is None:
            continue
        if event.outcome == "rolled_back" and ver.tags.get("outcome") != "rolled_back":
            version(client, rd, lineage, event.decision.decision_hash, event.candidate_id,
                    runs[event.decision.decision_hash].info.run_id, f"{event.candidate_id}: {event.reason[:200]}")
            client.set_model_version_tag(lineage, ver.version, "outcome", "rolled_back")
    if current is not None and client.get_model_version(lineage, current).tags.get("decision_hash") in committed:
        client.delete_registered_model_alias(lineage, CHALLENGER)


def move_champion(client, rd: RunDir, lineage: str) -> None:
    """`champion` follows parent.json (the truth); the champion it replaces becomes `previous`."""
    sha = read_pointer(rd.path).parent.sha256
    mine = client.search_model_versions(f"name = '{lineage}' and tag.sha256 = '{sha}'")
    if not mine:
        return  # the current parent is the initial model: nothing promoted to point at
    target = max(mine, key=lambda v: int(v.version))
    aliases = client.get_registered_model(lineage).aliases
    current = aliases.get(CHAMPION)
    if current == target.version:
        return
    if current is not None:
        client.set_registered_model_alias(lineage, PREVIOUS, current)
    client.set_registered_model_alias(lineage, CHAMPION, target.version)
