"""The run manifest: everything an episode's outcome may depend on, frozen and hashed before
the first node runs (reliability §A2: hash the inputs and commit them before launching).

Nothing in it changes during the episode; a resumed episode reads it back from
`runs/ID/manifest.json`, checks its hash and uses its config, not the new command line's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from experience_bank.files import write_atomic
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, content_hash

MANIFEST = "manifest.json"


def build_manifest(*, episode_id: str, config: dict[str, Any], budget_h: float, base_dir: str, base_sha: str,
                   world: dict[str, Any], library_version: int, candidate_hashes: list[str],
                   evaluators: dict[str, Any], datasets: dict[str, str], allowlist: dict[str, Any]) -> dict[str, Any]:
    """The manifest body; `manifest_hash` is the content hash of everything else in it."""
    body = {
        "episode_id": episode_id,
        "config": config,
        "budget_device_hours": budget_h,
        "initial": {"dir": base_dir, "sha256": base_sha},
        "world": world,
        "seeds": {"run": config["seed"]},
        "library_version": library_version,
        "candidates_sha256": content_hash(candidate_hashes),
        "n_candidates": len(candidate_hashes),
        "thresholds": {k: config[k] for k in ("tau_l", "tau_h", "fallback_lease", "max_proposals", "trial_fraction",
                                              "trial_min_gain_pp", "trial_fail_drop_pp")},
        "gate": {"ifeval_max_drop_pp": config["gate_ifeval_drop_pp"], "min_gain_pp": config["gate_min_gain_pp"],
                 "kappa_pp": config["gate_kappa_pp"], "alpha": config["gate_alpha"]},
        "evaluators": evaluators,
        "data_roles": datasets,
        "resources": {"devices": config["devices"], "torch_threads": config["torch_threads"],
                      "launcher": config["launcher"], "backend": config["backend"]},
        "cost": {"mode": config["cost_mode"], "devices": config["devices"],
                 "eval_device_hours": config["eval_device_hours"]},
        "stop": {"budget_device_hours": budget_h, "max_consecutive_rejections": config["max_consecutive_rejections"],
                 "max_candidates": config["max_candidates"]},
        "trial_fraction": config["trial_fraction"],
        "fallback_lease": config["fallback_lease"],
        "proposer": {"kind": config["proposer"], "base_url": config["base_url"], "model": config["model"],
                     "allowlist": allowlist},
    }
    return body | {"manifest_hash": content_hash(body)}


def freeze(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Write the manifest once (atomically); a second write must be byte-identical."""
    path = run_dir / MANIFEST
    text = canonical_json(manifest)
    if path.exists():
        if path.read_text(encoding="utf-8") != text:
            raise BadInput(f"{path} already holds another manifest: use a new --out directory or --resume it")
        return
    write_atomic(path, text)


def load(run_dir: Path) -> dict[str, Any]:
    """A frozen manifest, its hash checked."""
    path = run_dir / MANIFEST
    if not path.is_file():
        raise BadInput(f"{run_dir} has no {MANIFEST}: it is not a run directory; start it with agent run --out")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    body = {k: v for k, v in manifest.items() if k != "manifest_hash"}
    if content_hash(body) != manifest.get("manifest_hash"):
        raise BadInput(f"{path} does not match its manifest_hash: it was edited; restore it or start a new run")
    return manifest
