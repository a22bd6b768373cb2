"""Checkpoints on disk: weight hashes, atomic publication, Trainer-state discovery.

A run directory `out_dir` is published in one `os.rename` of a fully written sibling
temporary directory, so its existence means it is complete: a crash leaves only a
`*.tmp-*` directory (removed on the next attempt) and the Trainer checkpoints of the work
directory, from which the run resumes. Layout of a published run:

    out_dir/                 the child, loadable with from_pretrained (safetensors)
    out_dir/adapter/         the LoRA adapter the child was merged from (LoRA runs only)
    out_dir/trainer_state/   the last Trainer checkpoint (trials only: nu = continue resumes it)
    out_dir/result.json      the TrainResult, written last
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.hashing import file_sha256
from experience_bank.results import TrainResult

RESULT_FILE = "result.json"
STATE_DIR = "trainer_state"
ADAPTER_DIR = "adapter"


def adapter_of(model_dir: str | os.PathLike) -> str | None:
    """The LoRA adapter a published child kept (`ADAPTER_DIR`), or None for a full-weights child."""
    path = Path(model_dir) / ADAPTER_DIR
    return str(path) if (path / "adapter_config.json").is_file() else None


def weight_files(model_dir: str | os.PathLike) -> list[Path]:
    """The safetensors weight files of a model directory (pickled weights are refused)."""
    root = Path(model_dir)
    files = sorted(root.glob("*.safetensors"))
    if not files:
        pickled = sorted(root.glob("*.bin")) + sorted(root.glob("*.pt"))
        hint = " (it holds pickled weights; re-save with safetensors)" if pickled else ""
        raise BadInput(f"{root} holds no *.safetensors weights{hint}: pass a model directory saved with save_pretrained")
    return files


def weights_sha256(model_dir: str | os.PathLike) -> str:
    """sha256 of the weights: the file's own hash for one file; for shards, a hash over
    `name sha256` lines so that renaming or re-sharding changes the identity."""
    files = weight_files(model_dir)
    if len(files) == 1:
        return file_sha256(str(files[0]))
    lines = "".join(f"{f.name} {file_sha256(str(f))}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


_IDENTITY_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt")


def model_identity(model_dir: str | os.PathLike) -> dict[str, str]:
    """The weights hash and the hashes of the files that shape how they are used (config,
    tokenizer, chat template): what a run from this model depends on."""
    root = Path(model_dir)
    return {"weights": weights_sha256(root)} | {name: file_sha256(str(root / name)) for name in _IDENTITY_FILES
                                                if (root / name).is_file()}


def read_result(out_dir: str | os.PathLike) -> TrainResult | None:
    """The published result of a run directory, or None when nothing is published there."""
    path = Path(out_dir) / RESULT_FILE
    if not path.is_file():
        return None
    return TrainResult.model_validate_json(path.read_text())


def staging_dir(out_dir: str | os.PathLike) -> Path:
    """A fresh temporary sibling of out_dir (same filesystem, so the rename is atomic)."""
    out = Path(out_dir)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def discard_stale_staging(out_dir: str | os.PathLike) -> None:
    """Remove half-written temporary directories a crashed attempt left beside out_dir."""
    out = Path(out_dir)
    for stale in out.parent.glob(f"{out.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def publish(tmp: Path, out_dir: str | os.PathLike) -> Path:
    """Atomically move a completed staging directory to out_dir."""
    out = Path(out_dir)
    if out.exists():
        raise BadInput(f"{out} already exists and is not a finished run of this key: choose another --out")
    os.rename(tmp, out)
    return out


def checkpoint_step(path: Path) -> int:
    """N of a Trainer's `checkpoint-N` directory."""
    return int(path.name.rsplit("-", 1)[1])


def last_trainer_checkpoint(work_dir: str | os.PathLike) -> Path | None:
    """The newest complete `checkpoint-N` of a Trainer output dir (trainer_state.json is
    written last by the Trainer, so a checkpoint without it is a half-written one)."""
    root = Path(work_dir)
    if not root.is_dir():
        return None
    done = [p for p in root.glob("checkpoint-*") if (p / "trainer_state.json").is_file()]
    return max(done, key=checkpoint_step, default=None)


def resolve_state_dir(resume_from: str | os.PathLike) -> Path:
    """Accept a Trainer checkpoint dir or a published trial dir holding `trainer_state/`."""
    path = Path(resume_from)
    if (path / "trainer_state.json").is_file():
        return path
    if (path / STATE_DIR / "trainer_state.json").is_file():
        return path / STATE_DIR
    raise BadInput(f"{path} holds no Trainer state: pass the checkpoint of a trial run (nu = continue)")
