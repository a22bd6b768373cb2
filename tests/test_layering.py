"""The layering rule of docs/ARCHITECTURE.md, checked by parsing every import with ast."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("agent", "experience_bank", "policies", "trainers", "evaluators")
# Which of our packages each package may import (besides itself).
ALLOWED = {
    "experience_bank": set(),
    "policies": {"experience_bank"},
    "trainers": {"experience_bank"},
    "evaluators": {"experience_bank"},
    "agent": set(OURS),
}


def imported_packages(source: str) -> set[str]:
    """Top-level names of absolute imports (relative imports stay inside their package)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def violations(package: str) -> list[str]:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in sorted(imported_packages(path.read_text(encoding="utf-8")) & set(OURS)):
            if name != package and name not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    return bad


@pytest.mark.parametrize("package", OURS)
def test_package_respects_layering(package):
    assert (ROOT / package).is_dir()
    assert violations(package) == []


def test_the_checker_sees_violations():
    # Guards the checker itself: these must be caught, lazily imported or not.
    src = "import os\ndef f():\n    from trainers.sft import train\n    import agent.cli\nfrom . import x\n"
    assert imported_packages(src) == {"os", "trainers", "agent"}
