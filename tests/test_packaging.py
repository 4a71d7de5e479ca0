"""Packaging: every third-party module the package imports is declared in pyproject.toml, the
installed versions meet the declared floors, and the license the metadata names is shipped."""
from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nas", "search_spaces", "supernets", "searchers", "estimators")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Extras for developers only: the package itself never imports them.
DEV_EXTRAS = {"dev"}


def normalise(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def top_level_imports(path: Path) -> set[str]:
    """Top-level modules of every absolute import in a file, wherever the import statement sits."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def third_party_imports() -> dict[str, set[str]]:
    """Third-party top-level module -> files importing it."""
    users: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for module in top_level_imports(path):
                if module not in sys.stdlib_module_names and module not in PACKAGES:
                    users.setdefault(module, set()).add(str(path.relative_to(ROOT)))
    return users


def declared() -> set[str]:
    """Distributions the package may import: its dependencies and its optional, non-dev extras."""
    requirements = list(PYPROJECT["dependencies"])
    for extra, items in PYPROJECT.get("optional-dependencies", {}).items():
        if extra not in DEV_EXTRAS:
            requirements += items
    return {normalise(Requirement(item).name) for item in requirements}


def test_the_scan_sees_the_imports_we_know_about():
    users = third_party_imports()
    for module in ("torch", "timm", "optuna", "yaml", "tqdm", "safetensors", "sqlalchemy", "PIL", "sklearn"):
        assert module in users, module


def test_every_third_party_import_is_declared():
    distributions = metadata.packages_distributions()
    allowed = declared()
    missing = []
    for module, files in sorted(third_party_imports().items()):
        # An optional module that is not installed has no metadata: its import name is its distribution.
        names = {normalise(d) for d in distributions.get(module, [module])}
        if not names & allowed:
            missing.append(f"{module} (distribution {', '.join(sorted(names))}; imported in {', '.join(sorted(files))})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_installed_versions_meet_the_declared_floors():
    for item in PYPROJECT["dependencies"]:
        requirement = Requirement(item)
        installed = metadata.version(requirement.name)
        assert requirement.specifier.contains(installed, prereleases=True), f"{requirement}: installed {installed}"


def test_optuna_floor_has_trial_set_constraint():
    import optuna

    floor = next(Requirement(d) for d in PYPROJECT["dependencies"] if Requirement(d).name == "optuna")
    assert "5.0" in {spec.version for spec in floor.specifier if spec.operator == ">="}
    assert callable(getattr(optuna.trial.Trial, "set_constraint", None))


def test_the_declared_license_is_shipped():
    assert PYPROJECT["license"] == "Apache-2.0"
    assert PYPROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
