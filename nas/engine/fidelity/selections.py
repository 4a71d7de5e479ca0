"""Which arch selections a ground truth measured, so that `--extends M` grows the one it holds.

Selections of different sizes share few archs, and a grown selection (`--archs 48 --extends 24`)
is not the plain one of its size. So each measurement records its selection in the ground
truth's folder, `selections/<lineage>[-sel<seed>].json` (`{"selection": "48-ext24",
"selection_seed": 0, "arch_ids": [...]}`, the lineage as `arch_selection.lineage` names it),
and a bare `--extends M` means an M-arch selection this ground truth holds (for that selection
seed): the plain one when it was measured, else the one grown M-arch selection that was; the
plain one when none was recorded (a ground truth measured before these records). Several grown
M-arch selections and no plain one must be named by their lineage (`--extends 48-ext24`).
"""
from __future__ import annotations

import errno
import json
from collections.abc import Sequence
from pathlib import Path

from nas.core.errors import ConfigError, RunError
from nas.core.files import write_json
from nas.engine.fidelity.arch_selection import lineage, parse_extends

FOLDER = "selections"


def _path(folder: Path, name: str, seed: int) -> Path:
    return folder / FOLDER / (f"{name}-sel{seed}.json" if seed else f"{name}.json")


def recorded(folder: Path, seed: int) -> list[str]:
    """The lineages of the selections of selection seed `seed` measured in the ground truth `folder`."""
    names = []
    for path in sorted((folder / FOLDER).glob("*.json")):
        try:
            entry = json.loads(path.read_text())
            name, entry_seed = entry["selection"], entry["selection_seed"]
            parse_extends(name)
        except (OSError, ValueError, TypeError, KeyError, ConfigError) as e:
            raise RunError(f"{path}: not a selection record ({type(e).__name__}: {e}); remove it") from None
        if entry_seed == seed:
            names.append(name)
    return names


def resolve_extends(folder: Path, extends: int | str | None, seed: int) -> str | None:
    """The lineage of the selection `extends` names (see the module docstring), or None."""
    if extends is None:
        return None
    sizes = parse_extends(extends)
    if len(sizes) > 1:
        return lineage(sizes)
    plain = str(sizes[0])
    same = [name for name in recorded(folder, seed) if parse_extends(name)[-1] == sizes[0]]
    if plain in same or not same:
        return plain
    if len(same) > 1:
        raise ConfigError(f"extends: the ground truth measured {len(same)} grown selections of {plain} archs "
                          f"({', '.join(same)}) and not the plain one: name the one to grow by its lineage")
    return same[0]


def grown_name(count: int, extends: str | None) -> str:
    """The lineage of the `count`-arch selection that grows `extends` (a lineage, or None)."""
    if extends is None:
        return str(count)
    sizes = parse_extends(extends)
    return extends if sizes[-1] == count else lineage((*sizes, count))


def record(folder: Path, name: str, seed: int, arch_ids: Sequence[str]) -> None:
    """Record that the ground truth `folder` measures the selection `name` (once, atomically,
    when a measurement plans it). A folder this user may only read (a script that reads a
    ground truth without training) gets no record: nothing can grow there anyway."""
    path = _path(folder, name, seed)
    if path.is_file():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"selection": name, "selection_seed": seed, "arch_ids": list(arch_ids)})
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
