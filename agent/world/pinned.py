"""The pinned child of a portable build (agent/world/portable.py starts it with the kernel path
fixed in its environment, before torch loads).

    python -m agent.world.pinned env                        the build environment, as JSON
    python -m agent.world.pinned build RECIPE_JSON OUT_DIR  the base (and early/ beside it) built
                                                            into OUT_DIR, with {"step": n, "of": m}
                                                            lines as it pretrains
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experience_bank.errors import BadInput

from agent.world.embedded import Recipe, build_base_model, native_env
from agent.world.portable import NUMERICS_VAR


def _check_pinned() -> None:
    import torch  # noqa: PLC0415 (torch)

    level = torch.backends.cpu.get_cpu_capability()
    if platform.machine() not in ("x86_64", "AMD64") or level != "AVX2":
        raise BadInput(f"portable numerics pin torch to AVX2 kernels, which this machine "
                       f"({platform.machine()}, kernel level {level}) cannot run: unset {NUMERICS_VAR}")


def _recipe(text: str) -> Any:
    fields = json.loads(text)
    return Recipe(**{**fields, "mixture": tuple((ds, n) for ds, n in fields["mixture"])})


def main(argv: list[str]) -> int:
    try:
        _check_pinned()
        if argv[:1] == ["env"]:
            print(json.dumps(asdict(native_env())))
            return 0
        if argv[:1] == ["build"] and len(argv) == 3:
            def report(_what: str, step: int, of: int) -> None:
                print(json.dumps({"step": step, "of": of}), flush=True)

            build_base_model(_recipe(argv[1]), Path(argv[2]), report)
            return 0
    except BadInput as e:
        print(f"agent: error: {e}", file=sys.stderr)
        return 2
    print("usage: python -m agent.world.pinned env | build RECIPE_JSON OUT_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
