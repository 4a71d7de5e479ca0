"""A latency table fitted from whole-network timings (`nas latency-fit`).

A user can rarely time single layers on the target (a phone, an FPGA), but can time a few
whole networks there. The model is the table `nas latency-table` measures: predicted ms =
sum over the arch's layers of a cost per layer configuration + a constant. Here the costs are
fitted to the timings instead of measured:

- Layer keys whose counts are equal in every arch of the space (e.g. an operation in the cells
  of the three stages of a `cell201` network, which share one genotype) cannot be told apart by
  whole-network timings: they form one *group* with one per-layer cost. Keys present the same
  number of times in every arch (stem, head) are absorbed by the constant (their entries are 0).
  The groups are found on a random sample of the space (`PROBE_ARCHS`).
- Plain fit: non-negative least squares of the group costs and the constant, on relative errors
  (each timing's row divided by its milliseconds: a 1 ms network counts as much as a 100 ms one).
  It needs at least one distinct arch more than its free costs (so that each can be held out
  once), and every group timed at least once.
- With prior tables (other devices' tables of the space, measured or fitted): the prior guess
  of each group cost is a non-negative combination of the priors' costs fitted to the timings;
  the costs are then fitted as a ridge-regularised deviation from that guess (relative to it),
  the strength chosen by cross-validation on the timings among `RIDGE_GRID`, with the guess
  alone and the plain fit as candidates.

The points of the fit are distinct archs: repeated timings of one arch are one point (their
median, `Timings.per_arch`), so the hold-out never keeps an arch's twin in training. The held-out
error is k-fold cross-validation over the archs (`FOLDS` folds, one arch per fold when fewer)
of the whole procedure, choices included: Spearman's rho and MAPE of the held-out predictions,
reported with the number of archs (rough below `RELIABLE_ARCHS`).
"""
from __future__ import annotations

import math
import random
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from nas.core.arch import Arch, arch_id
from nas.core.errors import ConfigError, RunError, SearchError, check_int
from nas.core.files import check_writable
from nas.core.ranks import average_ranks
from nas.engine.run_dir import DEFAULT_RUNS_DIR
from nas.engine.latency.measure import DeviceRecord
from nas.engine.latency.table import LatencyTable, table_archs
from nas.engine.latency.timings import DEFAULT_COLUMN, Timings, read_timings, split_spec
from search_spaces.base import ArchSpace, LayerCost

PROBE_ARCHS = 256          # random archs on which equal layer counts are told apart
FOLDS = 10                 # cross-validation folds (leave-one-out below this many archs)
RIDGE_GRID = (0.01, 0.1, 1.0, 10.0)   # deviation strengths tried with a prior
PRIOR_MIN_TIMINGS = 3      # with a prior: a scale, a constant, and one held out
RELIABLE_ARCHS = 20        # fewer distinct archs: held-out figures are rough (benchmarks/notes/22-latency-fit.md: from
                           # 20 timed archs every draw ranked the other archs at Spearman >= 0.91)
_COVERS: dict[tuple[str, str, int], list[Arch]] = {}     # (space, fingerprint, seed) -> `table_archs`


@dataclass(frozen=True)
class LayerGroups:
    """The free costs of a space's latency model: groups of layer keys sharing one per-layer
    cost (`groups`), and the keys absorbed by the constant (`fixed`)."""

    groups: tuple[tuple[str, ...], ...]
    fixed: tuple[str, ...]

    @property
    def free(self) -> int:
        """Free costs of the plain fit: one per group, plus the constant."""
        return len(self.groups) + 1

    def design(self, rows: Sequence[Mapping[str, int]]) -> np.ndarray:
        """(archs, groups) matrix: how many layers of each group every arch has."""
        return np.array([[sum(row.get(key, 0) for key in group) for group in self.groups] for row in rows],
                        dtype=float).reshape(len(rows), len(self.groups))


def layer_counts(space: ArchSpace, arch: Mapping[str, Any]) -> Counter[str]:
    """How many layers of each configuration key `arch` has."""
    return Counter(layer.key for layer in space.layers(arch))


def find_groups(probe: Sequence[Mapping[str, int]]) -> LayerGroups:
    """Keys whose counts are equal in every row of `probe` form a group; keys of one count in
    every row are fixed (absorbed by the constant)."""
    keys = sorted({key for row in probe for key in row})
    columns: dict[tuple[int, ...], list[str]] = {}
    fixed = []
    for key in keys:
        column = tuple(row.get(key, 0) for row in probe)
        if len(set(column)) == 1:
            fixed.append(key)
        else:
            columns.setdefault(column, []).append(key)
    return LayerGroups(tuple(tuple(group) for group in columns.values()), tuple(fixed))


def nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin ||a x - b|| subject to x >= 0."""
    from scipy.optimize import nnls

    if a.shape[1] == 0:
        return np.zeros(0)
    return nnls(a, b, maxiter=50 * a.shape[1])[0]


@dataclass
class FittedCosts:
    """Per-layer cost of each group and the constant (ms); `how` says which candidate won."""

    costs: np.ndarray
    constant: float
    how: str

    def predict(self, design: np.ndarray) -> np.ndarray:
        return design @ self.costs + self.constant


def relative(a: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the least-squares problem `a x = y` divided by `y`: squared relative errors."""
    return a / y[:, None], np.ones(len(y))


def fit_plain(x: np.ndarray, y: np.ndarray) -> FittedCosts:
    """Non-negative least squares (of relative errors) of the group costs and the constant."""
    solution = nonnegative_lstsq(*relative(np.c_[x, np.ones(len(x))], y))
    return FittedCosts(solution[:-1], float(solution[-1]), "plain")


def fit_prior_mix(x: np.ndarray, y: np.ndarray, priors: np.ndarray) -> FittedCosts:
    """The group costs as a non-negative combination of the prior tables' (`priors`: (tables,
    groups)), plus a constant."""
    weights = nonnegative_lstsq(*relative(np.c_[x @ priors.T, np.ones(len(x))], y))
    return FittedCosts(weights[:-1] @ priors, float(weights[-1]), "prior")


def fit_deviation(x: np.ndarray, y: np.ndarray, guess: np.ndarray, strength: float) -> FittedCosts:
    """Costs = guess * (1 + d) with a ridge penalty `strength` on d (scaled to the design), d >= -1."""
    floor = max(float(guess.mean()) * 1e-3, 1e-9)
    scaled, target = relative(np.c_[x * np.maximum(guess, floor), np.ones(len(x))], y)
    groups = x.shape[1]
    penalty = math.sqrt(strength * max(float((scaled[:, :-1] ** 2).sum()) / max(groups, 1), 1e-12))
    a = np.r_[scaled, np.c_[penalty * np.eye(groups), np.zeros((groups, 1))]]
    solution = nonnegative_lstsq(a, np.r_[target, penalty * np.ones(groups)])
    return FittedCosts(solution[:-1] * np.maximum(guess, floor), float(solution[-1]), f"prior+deviation({strength:g})")


def _folds(n: int, seed: int = 0) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return [fold for fold in np.array_split(order, min(FOLDS, n)) if len(fold)]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (Pearson correlation of average ranks); NaN where either side is constant."""
    rx, ry = average_ranks(np.asarray(x, dtype=float)), average_ranks(np.asarray(y, dtype=float))
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def mape_pct(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error of `predicted` against `measured`."""
    return float(np.mean(np.abs(predicted - measured) / measured) * 100)


def fit_costs(x: np.ndarray, y: np.ndarray, priors: np.ndarray | None = None) -> FittedCosts:
    """The fitted costs: the plain fit without priors; with them the candidate (prior mix,
    deviations from it, plain fit where it has enough timings) of least cross-validated MAPE."""
    if priors is None or not len(priors):
        return fit_plain(x, y)
    candidates: list[Any] = [lambda a, b: fit_prior_mix(a, b, priors)]
    candidates += [lambda a, b, s=s: fit_deviation(a, b, fit_prior_mix(a, b, priors).costs, s) for s in RIDGE_GRID]
    if len(y) > x.shape[1] + 2:
        candidates.append(fit_plain)
    folds = _folds(len(y), seed=1)
    errors = []
    for fit in candidates:
        predicted = np.empty(len(y))
        for fold in folds:
            train = np.setdiff1d(np.arange(len(y)), fold)
            predicted[fold] = fit(x[train], y[train]).predict(x[fold])
        errors.append(mape_pct(predicted, y))
    return candidates[int(np.argmin(errors))](x, y)


def heldout_predictions(x: np.ndarray, y: np.ndarray, priors: np.ndarray | None = None) -> np.ndarray:
    """Each timing predicted by the whole procedure (`fit_costs`) fitted on the other folds."""
    predicted = np.empty(len(y))
    for fold in _folds(len(y)):
        train = np.setdiff1d(np.arange(len(y)), fold)
        predicted[fold] = fit_costs(x[train], y[train], priors).predict(x[fold])
    return predicted


def needed_timings(groups: LayerGroups, with_prior: bool) -> int:
    """The fewest distinct archs a fit can be made and held out from."""
    return PRIOR_MIN_TIMINGS if with_prior else groups.free + 1


def prior_costs(groups: LayerGroups, tables: Sequence[LatencyTable], space: ArchSpace) -> np.ndarray:
    """(tables, groups): each prior table's mean per-layer cost of every group."""
    rows = []
    for table in tables:
        table.check_space(space)
        missing = [key for group in groups.groups for key in group if key not in table.entries]
        if missing:
            raise ConfigError(f"prior: {table.path}: no entry for layer '{missing[0]}' "
                              f"({len(missing)} missing); it was built for other choices of the space")
        rows.append([float(np.mean([table.entries[key]["median_ms"] for key in group])) for group in groups.groups])
    return np.array(rows, dtype=float).reshape(len(tables), len(groups.groups))


@dataclass
class FitReport:
    """What `nas latency-fit` reports: the held-out error and how the table was fitted.

    `timings` counts the rows, `archs` the distinct archs they timed (the points of the fit and
    of its hold-out). Held-out figures from fewer than `RELIABLE_ARCHS` archs are rough
    (`rough`): a Spearman of 1.000 over 6 archs says little of the next thousand.
    """

    timings: int
    archs: int
    free_costs: int
    how: str
    heldout_spearman: float | None
    heldout_mape_pct: float
    fit_mape_pct: float
    priors: list[str] = field(default_factory=list)
    RELIABLE: ClassVar[int] = RELIABLE_ARCHS

    @property
    def rough(self) -> bool:
        """Whether the held-out figures come from too few archs to rely on."""
        return self.archs < RELIABLE_ARCHS

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rough": self.rough}


def space_groups(space: ArchSpace, archs: Sequence[Arch] = (), seed: int = 0) -> tuple[LayerGroups, dict[str, LayerCost]]:
    """The space's layer groups (found on an exact cover of its layers, a seeded random sample
    and `archs`) and one `LayerCost` per key (for the table's entries)."""
    rng = random.Random(seed)
    key = (space.name, space.fingerprint(), seed)
    if key not in _COVERS:       # listing a small space takes seconds: once per process
        _COVERS[key] = table_archs(space, seed=seed)
    probe_archs = [*_COVERS[key], *(space.sample(rng) for _ in range(PROBE_ARCHS)), *archs]
    layers: dict[str, LayerCost] = {}
    for arch in probe_archs:
        for layer in space.layers(arch):
            layers.setdefault(layer.key, layer)
    return find_groups([layer_counts(space, a) for a in probe_archs]), layers


def fit_table(space: ArchSpace, timings: Timings, priors: Sequence[LatencyTable] = (), device: str = "target",
              batch_size: int = 1, flag: str = "timings", offer_priors: bool = True) -> tuple[LatencyTable, FitReport]:
    """A latency table of `space` fitted to `timings` (see the module docstring), and its report.

    The points are the distinct archs (`Timings.per_arch`: repeated timings of an arch are one
    point, held out together). Raises `ConfigError` naming `flag` with too few distinct archs
    for the model, or (without priors) timings that never include some layer group; the way
    out through prior tables is offered only where the caller takes them (`offer_priors`).
    """
    points = timings.per_arch()
    groups, layers = space_groups(space, points.archs)
    rows = [layer_counts(space, arch) for arch in points.archs]
    x, y = groups.design(rows), np.array(points.ms, dtype=float)
    prior = prior_costs(groups, priors, space) if priors else None
    needed = needed_timings(groups, prior is not None)
    with_priors = f" (or {PRIOR_MIN_TIMINGS} with prior tables: {{priors}})" if offer_priors and not priors else ""
    if len(y) < needed:
        counted = f"{len(timings)} timings of {len(y)} distinct archs" if len(y) < len(timings) else f"{len(y)} timings"
        raise ConfigError(f"{flag}: {timings.path}: {counted}; the model has {groups.free} free costs "
                          f"({len(groups.groups)} layer groups + a constant) and needs at least {needed} "
                          f"distinct archs timed{with_priors}")
    if prior is None:
        untimed = [group[0] for group, column in zip(groups.groups, x.T) if not column.any()]
        if untimed:
            raise ConfigError(f"{flag}: {timings.path}: no timed arch has layer '{untimed[0]}' "
                              f"({len(untimed)} layer groups untimed); time archs that use every operation"
                              + (", or give prior tables ({priors})" if offer_priors else ""))
    fitted = fit_costs(x, y, prior)
    heldout = heldout_predictions(x, y, prior)
    predicted = fitted.predict(x)
    rho = spearman(heldout, y)
    report = FitReport(len(timings), len(y), groups.free, fitted.how, None if math.isnan(rho) else round(rho, 4),
                       round(mape_pct(heldout, y), 3), round(mape_pct(predicted, y), 3),
                       [str(t.path) for t in priors])
    entries = {key: _entry(layers[key], 0.0) for key in groups.fixed if key in layers}
    for group, cost in zip(groups.groups, fitted.costs):
        entries.update({key: _entry(layers[key], float(cost)) for key in group if key in layers})
    record = DeviceRecord(device, f"fitted from {len(y)} archs timed in {timings.path.name}:{timings.column}",
                          "", 0, "", batch_size, False)
    fit = [{"arch_id": arch_id(arch), "measured_ms": ms, "timings": count, "predicted_ms": round(float(p), 6),
            "heldout_ms": round(float(h), 6), "error_pct": round(100 * (float(p) - ms) / ms, 3)}
           for arch, ms, count, p, h in zip(points.archs, points.ms, points.counts, predicted, heldout)]
    table = LatencyTable(space.name, space.fingerprint(), record, entries, max(0.0, fitted.constant), fit,
                         fitted={"file": str(timings.path), "column": timings.column,
                                 "groups": [list(g) for g in groups.groups], "fixed": list(groups.fixed),
                                 **report.to_json()})
    return table, report


def _entry(layer: LayerCost, ms: float) -> dict[str, Any]:
    return {"median_ms": ms, "p90_ms": ms, "in_shape": list(layer.in_shape), "macs": layer.macs,
            "params": layer.params}


def dead_edge_archs(timings: Timings) -> int:
    """Timed archs whose written form differs from the canonical network `nas` builds (e.g.
    operations on dead edges that `nas` prunes): their timings include work `nas` skips."""
    return sum(dict(raw) != canonical for raw, canonical in zip(timings.raw, timings.archs))


def latency_fit(target: str | Path, timings: str | Path, column: str = DEFAULT_COLUMN, priors: Sequence[str] = (),
                name: str | None = None, batch: int = 1, out: str | Path | None = None,
                overrides: Sequence[str] = (), runs_dir: str | Path = DEFAULT_RUNS_DIR) -> tuple[Path, FitReport]:
    """Fit the latency table of `target`'s space (a run, or a config with `overrides`) to the
    timings of `column` in the CSV `timings` (`nas latency-fit`) and write it.

    `priors`: other devices' tables of the space (`.json`) or timings (`CSV[:COLUMN]`).
    `name`: the target device's name in the table (default: the column's), a plain name
    (`nas.engine.run_dir.check_name`: it names the file). `out` defaults to
    `RUN/latency/fit-<name>-b<batch>.json` (required for a config). Returns the file and the report.
    """
    from nas.core.config import load_config, resolve_config_path
    from nas.engine.run import build_space
    from nas.engine.run_dir import check_name, find_run

    check_int("batch", batch, 1)
    if name is not None:
        check_name(name, "name")
    run_dir = None
    try:
        resolve_config_path(target)
    except ConfigError:
        try:
            run_dir = find_run(target, runs_dir)
        except RunError:
            raise ConfigError(f"CONFIG_OR_RUN: {target}: no shipped config, YAML file or run (under "
                              f"{runs_dir}) of that name") from None
    if run_dir is not None and overrides:
        raise ConfigError("set: overrides apply to a config, not to a trained run")
    config = load_config(run_dir.config if run_dir is not None else target, () if run_dir is not None else overrides)
    space = build_space(config)
    device = name or column
    if out is None:
        if run_dir is None:
            raise ConfigError("give the table's file ({out=PATH.json}) when fitting for a config, not a run",
                              param="out")
        if name is None:
            try:
                check_name(column)
            except RunError:
                raise ConfigError(f"name: the column {column!r} is no plain name for the table's file; give "
                                  "{name=NAME}") from None
        out = run_dir.root / "latency" / f"fit-{device}-b{batch}.json"
    out = Path(out)
    if out.suffix != ".json":
        raise ConfigError(f"out: {out}: a latency table is a .json file")
    check_writable(out.parent, "out")
    data = read_timings(timings, space, column)
    dead = dead_edge_archs(data)
    if dead:
        warnings.warn(f"{data.path}: {dead} of {len(data)} archs are written with operations nas never runs "
                      f"(e.g. on dead edges, which nas prunes); their timings include that work")
    table, report = fit_table(space, data, load_priors(priors, space), device, batch)
    table.save(out)
    return out, report


def load_priors(specs: Sequence[str], space: ArchSpace) -> list[LatencyTable]:
    """`--prior` tables: table files, or `CSV[:COLUMN]` timings of another device fitted first."""
    tables = []
    for spec in specs:
        path, column = split_spec(spec)
        if path.suffix == ".json":
            table = LatencyTable.load(path)
            try:
                table.check_space(space)
            except SearchError as e:
                raise ConfigError(f"prior: {path}: built for another space ({table.space}); give tables of "
                                  f"'{space.name}' with these options") from e
        else:
            table = fit_table(space, read_timings(path, space, column or DEFAULT_COLUMN, flag="prior"),
                              device=column or DEFAULT_COLUMN)[0]
            table.path = path
        tables.append(table)
    return tables
