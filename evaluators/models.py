"""Load a local HF model folder: safetensors only, hub switched off.

The same path loads the self-built world model and any local HF folder (the real profile).
A missing folder, config or weights file is BadInput naming the expected layout.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.hashing import file_sha256, sha256_text

LAYOUT = "a local HF folder with config.json, *.safetensors and tokenizer files (save_pretrained output)"


def check_dir(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    if not path.is_dir():
        raise BadInput(f"model folder {path} does not exist: expected {LAYOUT}")
    if not (path / "config.json").is_file():
        raise BadInput(f"{path}/config.json is missing: expected {LAYOUT}")
    if not list(path.glob("*.safetensors")):
        raise BadInput(f"no *.safetensors in {path}: expected {LAYOUT} (pickled .bin weights are refused)")
    return path


def weights_sha256(model_dir: str | Path) -> str:
    """The file's own sha256 for one weights file; for shards, sha256 over `name sha256` lines.

    The same convention as trainers' checkpoint hash and the world's ModelRef, so an
    EvalIdentity names the same weights as the checkpoint that produced them.
    """
    files = sorted(check_dir(model_dir).glob("*.safetensors"))
    if len(files) == 1:
        return file_sha256(str(files[0]))
    return hashlib.sha256("".join(f"{f.name} {file_sha256(str(f))}\n" for f in files).encode()).hexdigest()


def chat_template_sha256(tokenizer) -> str:
    return sha256_text(tokenizer.chat_template or "")


def identity(model_dir: str | Path) -> tuple[str, str]:
    """(weights sha256, chat-template sha256) without loading the weights (a run-cache lookup)."""
    path = check_dir(model_dir)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoTokenizer

    return weights_sha256(path), chat_template_sha256(AutoTokenizer.from_pretrained(path, local_files_only=True))


def load(model_dir: str | Path, dtype: str = "float32", device: str | None = None):
    """(model, tokenizer) in eval mode on `device` (default: cuda when present, else cpu); the
    tokenizer pads on the left for batched generation."""
    path = check_dir(model_dir)
    os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never reach the hub
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True, local_files_only=True,
                                                 dtype=getattr(torch, dtype))
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, padding_side="left")
    if tokenizer.chat_template is None:
        raise BadInput(f"{path} has no chat template: save the tokenizer with one (chat_template.jinja)")
    if tokenizer.pad_token is None:  # decoder-only models often ship none; EOS is masked out anyway
        tokenizer.pad_token = tokenizer.eos_token
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), tokenizer
