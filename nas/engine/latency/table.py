"""A per-layer latency lookup table that predicts a subnet's latency (`nas latency-table`).

A `LatencyTable` (HAT, Wang et al. 2020; OFA's latency lookup table) holds one measured entry
per distinct layer configuration (`LayerCost.key` of `space.layers(arch)`), each timed once by
running that layer's modules of an export on a random input of its `in_shape`. Predicted
latency = sum of the entries of an arch's layers + `constant_ms`, where the constant is the
mean of (measured - summed) over a few whole exported archs (least squares for one offset),
clipped at 0: it absorbs per-call overhead the layer timings miss.

Table file (`<device>-b<batch>.json`, e.g. `cpu-b1.json`, `cuda0-b1.json`): `{"format_version":
1, "space": name, "space_fingerprint", "device": DeviceRecord, "warmup", "repeats",
"constant_ms", "entries": {key: {"median_ms", "p90_ms", "in_shape", "macs", "params"}},
"fit": [{"arch_id", "measured_ms", "p90_ms", "layers_ms", "predicted_ms", "error_pct"}]}`.
Each entry is timed by `nas.engine.latency.measure`. A table fitted from whole-network timings
(`nas.engine.latency.fit`) has the same file plus `"fitted": {...}` (the timings, the layer
groups, the held-out error); its device is the user's name for the target, where nothing can
be measured from here.
"""
from __future__ import annotations

import json
import random
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from nas.core.arch import Arch, arch_id
from nas.core.errors import RunError, SearchError
from nas.core.files import write_json
from nas.core.wording import command
from nas.engine.devices import resolve_device
from nas.engine.latency.measure import DeviceRecord, device_record, measure, thread_count
from search_spaces.base import ArchSpace, LayerCost, Supernet

FORMAT_VERSION = 1
ENUMERATE_LIMIT = 20_000   # spaces with at most this many raw archs are listed exhaustively
COVER_PATIENCE = 5_000     # random cover: stop after this many draws without a new layer key

BUILD_TABLE = f"build one with `{command('latency-table', 'RUN', device='D', batch='B')}`"


def table_filename(device: str | torch.device, batch_size: int) -> str:
    """`cpu-b1.json`, `cuda0-b8.json`: the file name of a table for `device` and `batch_size`."""
    return f"{str(torch.device(device)).replace(':', '')}-b{batch_size}.json"


@dataclass
class LatencyTable:
    """Per-layer latencies of a space on one device (see the module docstring for the file)."""

    space: str
    space_fingerprint: str
    device: DeviceRecord
    entries: dict[str, dict[str, Any]]
    constant_ms: float = 0.0
    fit: list[dict[str, Any]] = field(default_factory=list)
    warmup: int = 0
    repeats: int = 0
    path: Path | None = None
    fitted: dict[str, Any] | None = None
    floors: dict[str, tuple[float, Arch]] = field(default_factory=dict, repr=False, compare=False)  # costs.py

    @property
    def measurable(self) -> bool:
        """Whether the table's device is one this process can time (not a fitted table's target)."""
        return self.fitted is None

    def layers_ms(self, space: ArchSpace, arch: Mapping[str, Any]) -> float:
        """Sum of the table entries of `arch`'s layers (no constant)."""
        total = 0.0
        for layer in space.layers(arch):
            entry = self.entries.get(layer.key)
            if entry is None:
                where = f" {self.path.name}" if self.path else ""
                raise SearchError(
                    f"latency table{where} has no entry for layer '{layer.key}'",
                    fix=f"rebuild it for this space with `{self.device.rebuild()}`")
            total += entry["median_ms"]
        return total

    def predict(self, space: ArchSpace, arch: Mapping[str, Any]) -> float:
        """Predicted milliseconds of `arch`: sum of its layers' entries + `constant_ms`."""
        return self.layers_ms(space, arch) + self.constant_ms

    def verify(self, space: ArchSpace, model: nn.Module, arch: Mapping[str, Any],
               budget: float | None = None) -> dict[str, Any]:
        """`arch`'s predicted latency against a measurement of `model` (its export) on the
        table's device: `{"predicted_ms", "measured_ms", "p90_ms", "error_pct", "within_budget",
        "device"}` (`within_budget` None without a `budget`)."""
        device = self.device
        timing = measure(model, device.device, device.batch_size, space.layers(arch)[0].in_shape,
                         getattr(torch, device.dtype), threads=device.threads, channels_last=device.channels_last)
        predicted = self.predict(space, arch)
        return {"predicted_ms": predicted, "measured_ms": timing.median_ms, "p90_ms": timing.p90_ms,
                "error_pct": 100.0 * (predicted - timing.median_ms) / timing.median_ms,
                "within_budget": None if budget is None else timing.median_ms <= budget,
                "device": asdict(timing.device)}

    def check_space(self, space: ArchSpace) -> None:
        """Raise `SearchError` unless the table was built for `space` (same choices)."""
        if (self.space, self.space_fingerprint) != (space.name, space.fingerprint()):
            raise SearchError(f"latency table {self.path or ''} was built for another space "
                              f"({self.space}, {self.space_fingerprint})", fix=f"rebuild it with `{self.device.rebuild()}`")

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, "space": self.space, "space_fingerprint": self.space_fingerprint,
                "device": asdict(self.device), "warmup": self.warmup, "repeats": self.repeats,
                "constant_ms": self.constant_ms, "entries": self.entries, "fit": self.fit,
                **({"fitted": self.fitted} if self.fitted is not None else {})}

    def save(self, path: str | Path) -> Path:
        """Write the table as JSON (atomically)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, self.to_dict(), indent=1)
        self.path = path
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LatencyTable":
        """Read a table written by `save`."""
        path = Path(path)
        if not path.is_file():
            raise RunError(f"{path}: no latency table", fix=BUILD_TABLE)
        try:
            data = json.loads(path.read_text())
            if data.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format_version {data.get('format_version')!r}, expected {FORMAT_VERSION}")
            return cls(data["space"], data["space_fingerprint"], DeviceRecord(**data["device"]), data["entries"],
                       float(data["constant_ms"]), data["fit"], data["warmup"], data["repeats"], path,
                       data.get("fitted"))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise RunError(f"{path}: not a latency table ({e})", fix=BUILD_TABLE) from e


def table_archs(space: ArchSpace, seed: int = 0, patience: int = COVER_PATIENCE) -> list[Arch]:
    """Archs whose layers cover the space's layer configurations, few archs per new key.

    Spaces of at most `ENUMERATE_LIMIT` raw archs are listed (exact cover); larger ones are
    sampled (seeded) until `patience` draws in a row add no new layer key, plus min and max.
    Only archs that add a key are kept, most-keys-first.
    """
    if space.raw_size() <= ENUMERATE_LIMIT:
        pool = space.enumerate()
    else:
        rng, pool, seen, idle = random.Random(seed), [space.min(), space.max()], set(), 0
        seen.update(layer.key for arch in pool for layer in space.layers(arch))
        while idle < patience:
            arch = space.sample(rng)
            new = {layer.key for layer in space.layers(arch)} - seen
            if new:
                pool.append(arch)
                seen |= new
            idle = 0 if new else idle + 1
    keyed = sorted(((a, {layer.key for layer in space.layers(a)}) for a in pool), key=lambda p: -len(p[1]))
    covered: set[str] = set()
    cover = []
    for arch, keys in keyed:
        if keys - covered:
            cover.append(arch)
            covered |= keys
    return cover


def _layer_module(model: nn.Module, layer: LayerCost) -> nn.Module:
    return nn.Sequential(*[model.get_submodule(path) for path in layer.modules])


def build_table(supernet: Supernet, archs: Sequence[Mapping[str, Any]], device: str | torch.device = "cpu",
                batch_size: int = 1, dtype: torch.dtype = torch.float32, threads: int | None = None,
                warmup: int = 5, repeats: int = 20, fit_archs: int = 5, channels_last: bool = True,
                progress: Callable[[int, int], None] | None = None) -> LatencyTable:
    """Measure every distinct layer configuration of `archs` once, then fit the constant.

    Args:
        supernet: Exports the archs whose layers are timed.
        archs: Archs whose layers the table must cover (e.g. `table_archs(space)`).
        device, batch_size, dtype, threads, channels_last: As for `measure`.
        warmup, repeats: Per measurement.
        fit_archs: Whole exported archs timed to fit `constant_ms` (min, max and spread
            between them by summed layer latency).
        progress: Called as `progress(done, total)` after each layer measurement.
    """
    space, device = supernet.space, resolve_device(device)
    archs = [space.canonical(a) for a in archs]
    todo: dict[str, tuple[int, LayerCost]] = {}
    for index, arch in enumerate(archs):
        for layer in space.layers(arch):
            todo.setdefault(layer.key, (index, layer))
    by_arch: dict[int, list[LayerCost]] = {}
    for index, layer in todo.values():
        by_arch.setdefault(index, []).append(layer)
    entries: dict[str, dict[str, Any]] = {}
    record = device_record(device, threads, dtype, batch_size, channels_last)
    with thread_count(record.threads):
        _measure_layers(supernet, archs, by_arch, record, entries, dtype, warmup, repeats, progress, len(todo))
        table = LatencyTable(space.name, space.fingerprint(), record, entries, warmup=warmup, repeats=repeats)
        _fit_constant(table, supernet, archs, fit_archs, dtype, channels_last)
    return table


def _measure_layers(supernet: Supernet, archs: list[Arch], by_arch: dict[int, list[LayerCost]],
                    record: DeviceRecord, entries: dict[str, dict[str, Any]], dtype: torch.dtype, warmup: int,
                    repeats: int, progress: Callable[[int, int], None] | None, total: int) -> None:
    for index, layers in by_arch.items():
        model = supernet.export(archs[index])
        for layer in layers:
            timing = measure(_layer_module(model, layer), record.device, record.batch_size, layer.in_shape, dtype,
                             warmup, repeats, record.threads, record.channels_last)
            entries[layer.key] = {"median_ms": timing.median_ms, "p90_ms": timing.p90_ms,
                                  "in_shape": list(layer.in_shape), "macs": layer.macs, "params": layer.params}
            if progress is not None:
                progress(len(entries), total)


def _fit_constant(table: LatencyTable, supernet: Supernet, archs: list[Arch], count: int,
                  dtype: torch.dtype, channels_last: bool) -> None:
    space, device = supernet.space, table.device
    ordered = sorted(archs, key=lambda a: table.layers_ms(space, a))
    picks = [ordered[round(i * (len(ordered) - 1) / max(1, count - 1))] for i in range(min(count, len(ordered)))]
    unique = list({arch_id(a): a for a in picks}.values())
    fit = []
    for arch in unique:
        timing = measure(supernet.export(arch), device.device, device.batch_size, space.layers(arch)[0].in_shape,
                         dtype, max(table.warmup, 5), max(table.repeats, 20), device.threads, channels_last)
        fit.append({"arch_id": arch_id(arch), "measured_ms": timing.median_ms, "p90_ms": timing.p90_ms,
                    "layers_ms": table.layers_ms(space, arch)})
    table.constant_ms = max(0.0, statistics.fmean(f["measured_ms"] - f["layers_ms"] for f in fit)) if fit else 0.0
    for f in fit:
        f["predicted_ms"] = f["layers_ms"] + table.constant_ms
        f["error_pct"] = 100.0 * (f["predicted_ms"] - f["measured_ms"]) / f["measured_ms"]
    table.fit = fit


def write_latency_table(supernet: Supernet, out_dir: str | Path, device: str | torch.device = "cpu",
                        batch_size: int = 1, threads: int | None = None, seed: int = 0,
                        progress: Callable[[int, int], None] | None = None, **kwargs: Any) -> tuple[Path, LatencyTable]:
    """What `nas latency-table` does: cover the space, build the table, save it in `out_dir`.

    Returns the file (`out_dir/<device>-b<batch>.json`) and the table; `kwargs` go to `build_table`.
    """
    device = resolve_device(device)
    archs = table_archs(supernet.space, seed=seed)
    table = build_table(supernet, archs, device, batch_size, threads=threads, progress=progress, **kwargs)
    path = table.save(Path(out_dir) / table_filename(device, batch_size))
    return path, table
