"""Imports run one way: core <- plugins <- engine <- api <- cli (checked on the source, statically)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nas", "search_spaces", "supernets", "searchers", "estimators")

# layer -> the first-party layers it may import (besides itself)
ALLOWED = {
    "nas.core": set(),
    "search_spaces": {"nas.core"},
    "supernets": {"nas.core", "search_spaces"},
    "searchers": {"nas.core", "search_spaces"},
    "estimators": {"nas.core", "search_spaces", "supernets"},
    "nas.engine": {"nas.core", "search_spaces", "supernets", "searchers", "estimators"},
    "nas.api": {"nas.core", "nas.engine", "search_spaces", "supernets", "searchers", "estimators"},
    "nas.cli": {"nas.core", "nas.api"},     # the CLI calls only the public API
    "nas.__main__": {"nas.cli"},
    "nas": {"nas.api"},   # the package __init__ loads the API lazily
}


def layer_of(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def first_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    # `from nas import api` imports nas.api; the bare package (a lazy __init__) is no layer
    return {name for name in found if name.split(".")[0] in PACKAGES and name != "nas"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_every_import_points_down_the_layers():
    problems = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            here = layer_of(module_name(path))
            assert here is not None, path
            for imported in first_party_imports(path):
                target = layer_of(imported)
                if target is None or target == here or target in ALLOWED[here]:
                    continue
                problems.append(f"{path.relative_to(ROOT)} ({here}) imports {imported} ({target})")
    assert not problems, "\n".join(problems)


# The engine's stages: each one's entry, result types and machinery live in its folder (or module).
STAGES = ("nas.engine.training", "nas.engine.searching", "nas.engine.fidelity", "nas.engine.export",
          "nas.engine.latency")
# stage -> the other stages it may import: a standalone training (fidelity) and a finalist's
# fine-tune (searching) reuse the trainer's optimizer, gradient clipping and schedules; an
# export's fine-tune is a standalone training from the inherited weights (fidelity's loop); a
# search reads the latency stage's tables (and builds the run's first when missing); a
# family's export and summary read the family search's record (`nas.engine.searching.family`)
STAGE_IMPORTS = {"nas.engine.fidelity": {"nas.engine.training"},
                 "nas.engine.searching": {"nas.engine.training", "nas.engine.latency"},
                 "nas.engine.export": {"nas.engine.training", "nas.engine.fidelity", "nas.engine.searching"}}


def stage_of(module: str) -> str | None:
    return next((s for s in STAGES if module == s or module.startswith(s + ".")), None)


def stage_problem(here: str, imported: str) -> str | None:
    """What is wrong with engine module `here` importing `imported`, or None."""
    if imported == "nas.api" or imported.startswith("nas.api."):
        return f"{here} imports the API ({imported})"
    target, own = stage_of(imported), stage_of(here)
    if target is None or target == own:
        return None
    if own is None:
        return f"{here} (shared engine floor) imports the stage {imported}"
    if target not in STAGE_IMPORTS.get(own, set()):
        return f"{here} ({own}) imports another stage: {imported}"
    return None


def test_the_engine_floor_is_shared_and_stages_stay_apart():
    """Engine modules outside the stages (run, evaluator, checkpoint, data...) import no stage;
    a stage imports another only where `STAGE_IMPORTS` says; nothing in the engine imports the API."""
    problems = [stage_problem(module_name(path), imported)
                for path in sorted((ROOT / "nas" / "engine").rglob("*.py")) for imported in first_party_imports(path)]
    assert not [p for p in problems if p], "\n".join(p for p in problems if p)


def test_stage_problem_flags_each_crossing():
    assert stage_problem("nas.engine.run", "nas.engine.training.trainer") is not None
    assert stage_problem("nas.engine.searching.loop", "nas.engine.fidelity.report") is not None
    assert stage_problem("nas.engine.export", "nas.api") is not None
    assert stage_problem("nas.engine.fidelity.standalone", "nas.engine.training.trainer") is None
    assert stage_problem("nas.engine.searching.stage", "nas.engine.searching.loop") is None
    assert stage_problem("nas.engine.export", "nas.engine.run") is None


def import_graph() -> dict[str, set[str]]:
    """module -> the first-party modules it imports (anywhere in its source). A package's
    `__init__` is an edge only from outside it: Python loads a module's parents first anyway."""
    paths = {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}

    def module_of(name: str) -> str:
        while name not in paths:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for module, path in paths.items():
        targets = {module_of(name) for name in first_party_imports(path)}
        graph[module] = {t for t in targets if t != module and not module.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`: one path that returns to its start per circle found
    (depth-first, each module entered once)."""
    found, done, path = [], set(), []

    def visit(module: str) -> None:
        path.append(module)
        for target in sorted(graph[module]):
            if target in path:
                found.append(path[path.index(target):] + [target])
            elif target not in done:
                visit(target)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module)
    return found


def test_cycles_finds_a_circle_and_only_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_module_imports_itself_back():
    """No import circle anywhere (no engine module imports `nas.api`, the data modules do
    not import each other both ways): every floor, and every module in it, can be read bottom up."""
    graph = import_graph()
    assert not cycles(graph), "\n".join(" -> ".join(c) for c in cycles(graph))


@pytest.mark.slow
def test_importing_the_vocabulary_loads_no_engine():
    import subprocess
    import sys

    code = ("import sys, nas.core.arch, nas.core.config, search_spaces, supernets, searchers; "
            "print(sorted(m for m in sys.modules if m.startswith(('nas.engine', 'nas.api'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_importing_the_api_loads_no_stage_machinery():
    """`nas.api` imports every stage's entry, but Optuna and timm load with the stage that uses
    them (a CLI command, `nas eval` say, starts without them)."""
    import subprocess
    import sys

    code = ("import sys, nas.api; "
            "print(sorted(m for m in ('optuna', 'timm', 'nas.engine.training.trainer', "
            "'nas.engine.searching.loop', 'nas.engine.fidelity.runner') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
