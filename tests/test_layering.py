"""The layering rule of docs/ARCHITECTURE.md, checked by parsing every import with ast."""

import ast
import functools
from dataclasses import dataclass
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


# --- inside agent/: layers, no import circle, lazy imports only of heavy modules -------------

AGENT_LAYERS = {
    "agent.__main__": 6,
    "agent.cli": 5,
    "agent.experiments": 4,
    "agent.loop": 3,
    "agent.views": 2,
    "agent.world": 2,
    "agent.run": 1,
    "agent": 0,
}
"""A module may import a module of a lower layer, or one of its own folder; never a peer folder
(views and world never import each other) and never up. "agent" is the files at the top
(config, inputs, progress): what every layer may read. docs/ARCHITECTURE.md, "Inside agent/"."""

HEAVY = {"torch", "trl", "transformers", "peft", "datasets", "accelerate", "vllm", "deepspeed", "matplotlib",
         "openai", "mlflow", "ray", "langgraph", "scipy", "numpy", "sqlite_utils", "sqlalchemy", "alembic", "rich",
         "gguf", "huggingface_hub"}
"""Third-party modules slow enough to import (0.2 s or more each, most of them seconds) that a
command which does not need them must not pay for them: only these, and modules of ours that
import one of them when loaded, may be imported inside a function."""


@dataclass(frozen=True)
class Import:
    target: str
    """The module imported (a submodule where `from pkg import name` names one)."""
    lazy: bool
    """Inside a function."""
    typing_only: bool
    """Under `if TYPE_CHECKING:` (never runs)."""
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for pkg in OURS for p in (ROOT / pkg).rglob("*.py")}


def _lazy_attributes(package: str) -> dict[str, str]:
    """A package's PEP 562 `_LAZY` table (name -> module): `from evaluators import evaluate`
    loads evaluators.evaluation, so that is what it imports."""
    for node in ast.parse(MODULES[package].read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


LAZY_ATTRIBUTES = {pkg: _lazy_attributes(pkg) for pkg in OURS}


def _resolve(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join(here + ([base] if base else []))
    return sorted({f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES
                   else LAZY_ATTRIBUTES.get(base, {}).get(a.name, base) for a in node.names})


@functools.cache
def imports_of(path: Path, module: str | None = None) -> tuple[Import, ...]:
    module = module or module_name(path)
    out: list[Import] = []

    def visit(node: ast.AST, lazy: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True, typing_only)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(child, lazy, True)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                out.extend(Import(t, lazy, typing_only, child.lineno)
                           for t in _resolve(child, module, path.name == "__init__.py"))
            else:
                visit(child, lazy, typing_only)

    visit(ast.parse(path.read_text(encoding="utf-8")), False, False)
    return tuple(out)


def _eager(module: str) -> set[str]:
    """What loading `module` loads: its module-level imports (a package's too), nothing typing-only."""
    targets = {i.target for i in imports_of(MODULES[module], module) if not i.lazy and not i.typing_only}
    parts = module.split(".")
    return targets | {".".join(parts[:k]) for k in range(1, len(parts))}


def heavy_modules() -> set[str]:
    """Our modules whose loading loads a HEAVY third-party module, directly or through ours."""
    heavy: set[str] = set()
    changed = True
    while changed:
        changed = False
        for m in MODULES:
            if m not in heavy and any(t.split(".")[0] in HEAVY or t in heavy for t in _eager(m)):
                heavy.add(m)
                changed = True
    return heavy


def layer_of(module: str) -> tuple[str, int] | None:
    """(folder, rank) of an agent module; None outside agent/."""
    for prefix, rank in AGENT_LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return prefix, rank
    return None


def agent_modules() -> dict[str, Path]:
    return {m: p for m, p in MODULES.items() if m.startswith("agent.") or m == "agent"}


def layer_violations(modules: dict[str, Path]) -> list[str]:
    bad = []
    for m, path in sorted(modules.items()):
        here = layer_of(m)
        if here is None:
            continue
        if here[0] == "agent" and m.count(".") > 1:
            bad.append(f"{m} is in a folder of no layer: add the folder to AGENT_LAYERS")
        for imp in imports_of(path, m):
            there = layer_of(imp.target)
            if there is None or there[0] == here[0]:
                continue
            if there[1] >= here[1]:
                bad.append(f"{m}:{imp.line} imports {imp.target} ({there[0]} is not below {here[0]})")
    return bad


def circles(modules: dict[str, Path]) -> list[list[str]]:
    """Strongly connected groups of two or more agent modules over their run-time imports."""
    graph = {m: {i.target for i in imports_of(p, m) if not i.typing_only and i.target in modules and i.target != m}
             for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def lazy_violations(modules: dict[str, Path], heavy: set[str]) -> list[str]:
    return [f"{m}:{i.line} imports {i.target} inside a function (not a heavy module: import it at the top)"
            for m, p in sorted(modules.items()) for i in imports_of(p, m)
            if i.lazy and not i.typing_only and i.target.split(".")[0] not in HEAVY and i.target not in heavy]


def test_agent_layers_point_down():
    assert layer_violations(agent_modules()) == []


def test_no_import_circle_inside_agent():
    assert circles(agent_modules()) == []


def test_only_heavy_modules_are_imported_lazily():
    assert lazy_violations(agent_modules(), heavy_modules()) == []


def test_the_agent_checks_see_violations(tmp_path):
    # Guards the checks themselves on a made-up package: an upward edge, a peer edge, a circle
    # and a lazy import of a light module are all caught.
    files = {"agent/run/a.py": "import agent.loop.b\n",
             "agent/loop/b.py": "import agent.run.a\ndef f():\n    import json\n    import torch\n",
             "agent/views/c.py": "import agent.world.d\n",
             "agent/world/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import agent.views.c\n"}
    modules = {}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
        modules[rel.removesuffix(".py").replace("/", ".")] = tmp_path / rel
    assert [v.split(" (")[0] for v in layer_violations(modules)] == [
        "agent.run.a:1 imports agent.loop.b", "agent.views.c:1 imports agent.world.d",
        "agent.world.d:3 imports agent.views.c"]
    assert circles(modules) == [["agent.loop.b", "agent.run.a"]]
    assert [v.split(" inside")[0] for v in lazy_violations(modules, set())] == ["agent.loop.b:3 imports json"]
