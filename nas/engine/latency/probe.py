"""Subnets to time on a target device, chosen so that `nas latency-fit` can tell the layer groups
apart (`nas latency-probe`).

`latency-fit` models a network's milliseconds as the sum of one cost per layer group plus a
constant (`nas.engine.latency.fit`): a least-squares fit over the design matrix of the timed
archs (how many layers of each group each has, and a column of ones). Random archs make a poor
design: at one resolution a MobileNetV3 space has about a hundred groups, and a random set of
that size leaves some of them never used or used in lockstep. The probe picks, from a seeded
pool of the space's archs at one resolution (every arch of a small space; else archs covering
every layer key plus `PROBE_POOL` random ones), the set that a greedy D-optimal design picks:
each next arch is the pool's arch of largest variance `x^T (X^T X + ridge I)^-1 x` under the
archs chosen so far, i.e. of the largest gain in `log det(X^T X + ridge I)`. Its first picks
raise the rank of the design until it reaches the pool's; later ones shrink the variance of
the fitted costs. Some spaces cannot reach full column rank at all (a block whose depth never
varies always has one of its kernel/expansion keys: their counts sum to the constant), so the
probe reports the rank it reached beside the pool's: predictions of every arch in the pool's
span are then determined.

Folder (`--out`): `probe.json` (the settings and the chosen arch ids), `<arch_id>.yaml` and
`<arch_id>.onnx` per subnet (batch dynamic, the untrained supernet's weights: latency depends on
shapes, not values), and `timings.csv` with the columns `arch` (the arch file, which
`latency-fit` reads), `model`, `macs` and an empty `latency_ms` to fill in with the milliseconds
timed on the device. A rerun with the same settings resumes (files already written are kept;
`timings.csv`, which may hold the user's timings, is never rewritten).
"""
from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from nas.core.arch import Arch, arch_id, write_arch_file
from nas.core.errors import ConfigError, NasError, PathError, check_int
from nas.core.files import check_writable, write_json, write_text
from nas.core.locks import LOCK_FILE, folder_lock
from nas.engine.json_result import JsonResult
from nas.engine.latency.fit import PRIOR_MIN_TIMINGS, LayerGroups, config_or_run, layer_counts, space_groups
from nas.engine.latency.table import ENUMERATE_LIMIT, table_archs
from nas.engine.latency.timings import ARCH_COLUMN, DEFAULT_COLUMN
from nas.engine.onnx_file import missing_onnx_packages, save_checked_onnx
from nas.engine.run_dir import DEFAULT_RUNS_DIR
from search_spaces.base import ArchSpace

PROBE_POOL = 2000          # random archs the probe chooses from in a space too large to list
RIDGE = 1e-3               # keeps X^T X invertible while the design is short of rank
ONNX_TOLERANCE = 1e-4      # onnxruntime against the export, relative to the largest output
PROBE_FILE = "probe.json"
TIMINGS_FILE = "timings.csv"
MODEL_COLUMN = "model"


def design_matrix(space: ArchSpace, groups: LayerGroups, archs: Sequence[Arch]) -> np.ndarray:
    """`latency-fit`'s design of `archs`: layers per group, then a column of ones (the constant)."""
    x = groups.design([layer_counts(space, arch) for arch in archs])
    return np.c_[x, np.ones(len(archs))]


def d_optimal(rows: np.ndarray, count: int, ridge: float = RIDGE) -> list[int]:
    """Indices of `count` distinct rows of `rows` chosen greedily for D-optimality (module docstring)."""
    if count > len(rows):
        raise ValueError(f"{count} rows asked of {len(rows)}")
    information = ridge * np.eye(rows.shape[1])
    available = np.ones(len(rows), dtype=bool)
    chosen: list[int] = []
    for _ in range(count):
        variance = ((rows @ np.linalg.inv(information)) * rows).sum(axis=1)
        variance[~available] = -np.inf
        best = int(np.argmax(variance))
        chosen.append(best)
        available[best] = False
        information += np.outer(rows[best], rows[best])
    return chosen


def probe_pool(space: ArchSpace, seed: int = 0, size: int = PROBE_POOL) -> list[Arch]:
    """Distinct canonical archs to choose from: every arch of a space of at most `ENUMERATE_LIMIT`
    raw archs, else a cover of its layer keys and `size` seeded random archs."""
    if space.raw_size() <= ENUMERATE_LIMIT:
        archs = space.enumerate()
    else:
        rng = random.Random(seed)
        archs = [*table_archs(space, seed=seed), *(space.sample(rng) for _ in range(size))]
    return list({arch_id(arch): space.canonical(arch) for arch in archs}.values())


def at_resolution(space: ArchSpace, resolution: int | None) -> tuple[ArchSpace, int | None]:
    """The sub-space of `space` at one input resolution (default: its largest), and that resolution
    (None for a space without a resolution choice)."""
    values = space.choices().get("resolution")
    if values is None:
        if resolution is not None:
            raise ConfigError(f"resolution: space '{space.name}' has no resolution choice; leave it out")
        return space, None
    if resolution is None:
        resolution = max(values)
    if resolution not in values:
        raise ConfigError(f"resolution: {resolution} is not a resolution of the space "
                          f"(choose from {', '.join(map(str, values))})")
    return (space.restrict("resolution", [resolution]) if len(values) > 1 else space), resolution


@dataclass(frozen=True)
class ProbeResult(JsonResult):
    """What `nas latency-probe` wrote: the folder, its timings file, the chosen arch ids, the
    resolution, the fit's free costs, the rank of the chosen design beside the pool's, how many
    ONNX files this call wrote, and notes for the user."""

    dir: Path
    timings: Path
    archs: list[str]
    resolution: int | None
    free_costs: int
    rank: int
    pool_rank: int
    written: int
    notes: list[str]


def latency_probe(target: str | Path, count: int, out: str | Path, resolution: int | None = None, seed: int = 0,
                  overrides: Sequence[str] = (), runs_dir: str | Path = DEFAULT_RUNS_DIR,
                  progress: Callable[[int, int], None] | None = None) -> ProbeResult:
    """Write `count` subnets of `target`'s space (a run, or a config with `overrides`) at one
    `resolution` (default: the space's largest) into `out`, chosen for `latency-fit` (module
    docstring), as ONNX files with a `timings.csv` to fill in; resumes an interrupted probe of the
    same settings. `progress(done, total)` is called after each subnet."""
    from nas.engine.run import build_space
    from supernets.base import seeded_supernet

    check_int("N", count, PRIOR_MIN_TIMINGS, " (latency-fit needs at least that many timed archs)")
    check_int("seed", seed, 0)
    missing = missing_onnx_packages()
    if missing:
        raise NasError(f"needs {' and '.join(missing)} to write ONNX files, not installed; install the onnx extra: "
                       "pip install -e '.[onnx]' (in a checkout of nas)")
    _, config = config_or_run(target, overrides, runs_dir)
    space = build_space(config)
    sub, resolution = at_resolution(space, resolution)
    out = Path(out)
    check_out(out)
    groups, _ = space_groups(sub)
    pool = probe_pool(sub, seed)
    if count > len(pool):
        raise ConfigError(f"N: {count} subnets asked, but the space has {len(pool)} distinct archs"
                          + (f" at resolution {resolution}" if resolution is not None else ""))
    rows = design_matrix(sub, groups, pool)
    picked = d_optimal(rows, count)
    chosen = [pool[i] for i in picked]
    settings = {"space": space.name, "space_fingerprint": sub.fingerprint(), "resolution": resolution,
                "seed": seed, "archs": [arch_id(arch) for arch in chosen]}
    notes = _notes(space, sub, groups, count, resolution)
    with folder_lock(out, f"latency probe {out}"):
        _check_settings(out, settings)
        write_json(out / PROBE_FILE, {**settings, "free_costs": groups.free,
                                      "rank": int(np.linalg.matrix_rank(rows[picked])),
                                      "pool_rank": int(np.linalg.matrix_rank(rows))})
        written = _write_subnets(seeded_supernet(space, config.train.seed), space, chosen, out, progress)
        timings = out / TIMINGS_FILE
        if not timings.exists():
            write_text(timings, timings_csv(space, chosen))
    record = json.loads((out / PROBE_FILE).read_text())
    return ProbeResult(out, timings, settings["archs"], resolution, groups.free, record["rank"], record["pool_rank"],
                       written, notes)


def check_out(out: Path) -> None:
    """Raise `PathError` naming `out` unless it is a new folder or a probe's."""
    if out.exists() and not out.is_dir():
        raise PathError(f"out: {out} is a file, not a folder")
    if out.is_dir():
        others = sorted(p.name for p in out.iterdir() if not _probe_file(p.name))
        if others:
            raise PathError(f"out: {out} holds files that are not a latency probe's ({', '.join(others[:3])}); "
                            "choose a new or empty folder")
    check_writable(out.parent if not out.exists() else out, "out")


def _probe_file(name: str) -> bool:
    return name in (PROBE_FILE, TIMINGS_FILE, LOCK_FILE) or name.endswith((".onnx", ".yaml")) or name.startswith(".")


def _check_settings(out: Path, settings: dict[str, Any]) -> None:
    """Raise `ConfigError` where `out` holds a probe of other settings (its timings are for other archs)."""
    path = out / PROBE_FILE
    if not path.is_file():
        return
    earlier = json.loads(path.read_text())
    differs = [key for key in settings if earlier.get(key) != settings[key]]
    if differs:
        shown = ", ".join(f"{key} {earlier.get(key)}" for key in differs if key != "archs") or "other archs"
        raise ConfigError(f"out: {out} holds a probe of other settings ({shown}); choose a new folder, or rerun "
                          "with its settings to resume it")


def _notes(space: ArchSpace, sub: ArchSpace, groups: LayerGroups, count: int, resolution: int | None) -> list[str]:
    notes = []
    if count < groups.free + 1:
        notes.append(f"{count} subnets are fewer than the {groups.free + 1} a fit of its own needs ({groups.free} "
                     "free costs): fit them with prior tables of other devices (latency-fit's prior)")
    if sub is not space:
        notes.append(f"the subnets are at resolution {resolution} alone: fit and search with a space of that "
                     f"resolution (a config: space.options.resolutions=[{resolution}]), where every timed layer "
                     "group is the table's")
    return notes


def _write_subnets(supernet: torch.nn.Module, space: ArchSpace, archs: Sequence[Arch], out: Path,
                   progress: Callable[[int, int], None] | None) -> int:
    """Each arch's `<id>.yaml` and `<id>.onnx` (checked against the export), skipping those written."""
    written = 0
    generator = torch.Generator().manual_seed(0)
    for done, arch in enumerate(archs, start=1):
        ident = arch_id(arch)
        if not (out / f"{ident}.yaml").is_file():
            write_arch_file(arch, out / f"{ident}.yaml")
        if not (out / f"{ident}.onnx").is_file():
            size = space.input_size(arch)
            example = torch.randn(2, space.in_chans, size, size, generator=generator)
            static = supernet.export(arch).eval()
            try:
                save_checked_onnx(static, example, out / f"{ident}.onnx", 1e-5, ONNX_TOLERANCE)
            except RuntimeError:
                (out / f"{ident}.onnx").unlink(missing_ok=True)
                raise
            written += 1
        if progress is not None:
            progress(done, len(archs))
    return written


def timings_csv(space: ArchSpace, archs: Sequence[Arch]) -> str:
    """The probe's timings file: one row per arch, its milliseconds left empty."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow([ARCH_COLUMN, MODEL_COLUMN, "macs", DEFAULT_COLUMN])
    for arch in archs:
        ident = arch_id(arch)
        writer.writerow([f"{ident}.yaml", f"{ident}.onnx", space.macs(arch), ""])
    return text.getvalue()
