"""Latency sources a search can name with `--latency-table`: a table file (measured layer by
layer, or fitted from timings) or a column of measured per-arch latencies.

`ArchLatencyTable` answers an arch's latency from the row of its canonical arch in a timings
CSV (`nas.engine.latency.timings`). An arch the file lacks is an error naming it,
unless the user asked for predictions: then a table fitted to the file's rows
(`nas.engine.latency.fit`) predicts it. Where several rows are one canonical arch
(repeated timings, or NAS-Bench-201 strings that differ only on dead edges), the median of the
rows written in canonical form is used, else the median of them all (`Timings.per_arch`; a
warning says how many archs are timed only in other forms).
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

from nas.core.arch import Arch, arch_id
from nas.core.errors import ConfigError, SearchError
from nas.engine.latency.measure import DeviceRecord
from nas.engine.latency.table import LatencyTable
from nas.engine.latency.fit import fit_table
from nas.engine.latency.timings import DEFAULT_COLUMN, ArchTimings, Timings, read_timings, split_spec
from search_spaces.base import ArchSpace


class ArchLatencyTable:
    """Measured milliseconds per canonical arch (one CSV column), with an optional fitted table
    for the archs it lacks. Quacks like `LatencyTable` where a search uses one."""

    measurable = False       # the target is not this machine: nothing to time here

    def __init__(self, space: ArchSpace, timings: Timings, batch_size: int = 1,
                 fallback: LatencyTable | None = None):
        self.space, self.space_fingerprint = space.name, space.fingerprint()
        self.path, self.column, self.fallback = timings.path, timings.column, fallback
        self.device = DeviceRecord(timings.column, f"measured per arch: {timings.path.name}:{timings.column}",
                                   "", 0, "", batch_size, False)
        points = _per_canonical_arch(timings)
        self.archs = points.archs       # the canonical archs its rows time
        self.ms = {arch_id(arch): ms for arch, ms in zip(points.archs, points.ms)}
        self.floors: dict[str, tuple[float, Arch]] = {}     # the search's latency floor per space (costs.py)

    def predict(self, space: ArchSpace, arch: Mapping[str, Any]) -> float:
        """The measured ms of `arch` (canonical), else the fallback's prediction, else `SearchError`."""
        key = arch_id(space.canonical(arch))
        if key in self.ms:
            return self.ms[key]
        if self.fallback is not None:
            return self.fallback.predict(space, arch)
        raise SearchError(f"latency_table: {self.path}:{self.column} has no timing of arch {key} "
                          f"({dict(space.canonical(arch))}); add it, or pass {{predict_missing=True}} to predict "
                          f"the archs it lacks from a table fitted to its rows")

    def check_space(self, space: ArchSpace) -> None:
        if (self.space, self.space_fingerprint) != (space.name, space.fingerprint()):
            raise SearchError(f"latency_table: {self.path} was read for another space ({self.space})")


def _per_canonical_arch(timings: Timings) -> ArchTimings:
    points = timings.per_arch()
    spelt = {arch_id(canonical) for raw, canonical in zip(timings.raw, timings.archs) if dict(raw) == canonical}
    merged = [arch for arch in points.archs if arch_id(arch) not in spelt]
    if merged:
        warnings.warn(f"{timings.path}: {len(merged)} archs are timed only in forms that differ from the "
                      f"network nas builds (e.g. operations on dead edges); their median timing is used")
    return points


def load_latency_source(spec: str, space: ArchSpace, batch_size: int = 1,
                        predict_missing: bool = False) -> LatencyTable | ArchLatencyTable:
    """What `--latency-table SPEC` names: a table file (`.json`: `nas latency-table` or `nas
    latency-fit`), which must be of `batch_size` (`ConfigError` naming `batch` otherwise), or
    `CSV[:COLUMN]` of measured per-arch ms (column default `latency_ms`), taken to be timed at
    `batch_size`."""
    path, column = split_spec(spec)
    if path.suffix == ".json":
        if column is not None:
            raise ConfigError(f"latency_table: {spec}: a .json table has no columns; give the file alone")
        if predict_missing:
            raise ConfigError(f"predict_missing: applies to a CSV latency table; {path} predicts every arch")
        table = LatencyTable.load(path)
        table.check_space(space)
        if table.device.batch_size != batch_size:
            raise ConfigError(f"batch: {batch_size}, but the latency table {path} was "
                              f"{'fitted' if table.fitted is not None else 'measured'} at batch "
                              f"{table.device.batch_size}; give {{batch={table.device.batch_size}}} or a table of "
                              f"batch {batch_size}")
        return table
    timings = read_timings(path, space, column or DEFAULT_COLUMN, flag="latency_table")
    fallback = None
    if predict_missing:
        fallback = fit_table(space, timings, device=timings.column, batch_size=batch_size, flag="latency_table",
                             offer_priors=False)[0]
    return ArchLatencyTable(space, timings, batch_size, fallback)
