"""The search folder's record of its shipped model (`shipped.json`), true to what is there now.

An export of a search's `best.yaml` writes `shipped.json` into the search folder: the export's
folder and its metrics. The record is a pointer, checked whenever it is read (`shipped_status`):
the export folder's own `metrics.json` is what the search's answer has now, so a deleted export
folder, one exported again with other settings, or one now holding another arch or another
run's export never stands for the search's answer. An export belongs to a search only when it
comes from the run the search measured (same run folder, same space): an export of another
run's arch writes no record there (`foreign_export`). An export from other weights of that run
(a later or earlier checkpoint step than the search measured) is recorded with a note saying
so (`other_weights`). Every value read back is checked (fractions in [0, 1], counts, the known
kinds): a damaged record is one error line, as a damaged `summary.json` is.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from nas.core.errors import SearchError, clip
from nas.core.schema import number_in
from nas.core.wording import command
from nas.engine.untrained import UNTRAINED

SHIPPED = "shipped.json"
METRICS = "metrics.json"
SHIPPED_KINDS = ("finetuned", "inherited", "scratch")     # scratch: trained alone (a config's family)
FRACTIONS = ("val_top1", "test_top1", "val_top5", "test_top5")


def search_source(folder: str | Path) -> dict[str, Any]:
    """What the search in `folder` measured: `run` (its folder), `checkpoint`, `step`,
    `space_fingerprint` and `weights` (the digest of the run's weights), each None where the
    search's files do not say (`search.json`'s settings, `summary.json`'s `source`)."""
    found: dict[str, Any] = {"run": None, "checkpoint": None, "step": None, "space_fingerprint": None,
                             "weights": None}
    for name, section in (("search.json", "settings"), ("summary.json", "source")):
        try:
            data = json.loads((Path(folder) / name).read_text())
        except (OSError, ValueError):
            continue
        part = data.get(section) if isinstance(data, dict) else None
        if isinstance(part, dict):
            found.update({key: part[key] for key in found if part.get(key) is not None})
    return found


def foreign_export(source: Mapping[str, Any], exported: Mapping[str, Any]) -> str | None:
    """Why an export (`exported`: its `run` folder, `space_fingerprint`, `weights` digest and
    `step`, as metrics.json records them) is not an export of the search's answer (`source`:
    `search_source`), or None when it is (or nothing says otherwise). The weights decide where
    both sides record them: the same weights are the same run wherever its folder lies now (a
    moved run), other weights at the step the search measured are another run (or the run
    trained again); a later step of the run is other weights of it (`other_weights`). Without a
    digest, the run's folder decides. A search of an untrained config measured no run: any run
    of its space exports its answer."""
    trained = source.get("checkpoint") != UNTRAINED
    ours, theirs = source.get("weights"), exported.get("weights")
    run = exported.get("run")
    digests = ours is not None and theirs is not None
    if trained and digests and ours != theirs and exported.get("step") == source.get("step"):
        return (f"the search measured the weights {short_digest(ours)} at step {source.get('step')}, the export is "
                f"of the weights {short_digest(theirs)} at the same step (another run, or the run trained again)")
    if trained and not (digests and ours == theirs) and source.get("run") is not None and run is not None \
            and Path(str(source["run"])).resolve() != Path(str(run)).resolve():
        return f"the search measured the run {source['run']}, the export is of the run {run}"
    if source.get("space_fingerprint") is not None and exported.get("space_fingerprint") is not None \
            and source["space_fingerprint"] != exported["space_fingerprint"]:
        return (f"the search's space (fingerprint {source['space_fingerprint']}) is not the exported run's "
                f"(fingerprint {exported['space_fingerprint']})")
    return None


def short_digest(digest: str) -> str:
    """A weights digest as said in a message (its first 12 hex digits)."""
    return str(digest).removeprefix("sha256:")[:12]


def other_weights(source: Mapping[str, Any], step: Any, checkpoint: Any) -> str | None:
    """The note of an export from another checkpoint step of the run than the search measured, or None."""
    if source.get("step") is None or step is None or step == source["step"] or source.get("checkpoint") == UNTRAINED:
        return None
    searched = f"step {source['step']}" + (f" ({source['checkpoint']})" if source.get("checkpoint") else "")
    return (f"exported from step {step}{f' ({checkpoint})' if checkpoint else ''} of the run, the search measured "
            f"{searched}: the shipped accuracies are of other weights than the search's")


def record_problem(record: Any, pointer: bool = False) -> str | None:
    """The first value of an export's metrics (`pointer`: of `shipped.json`, which also names the
    export folder) that cannot be trusted, or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    checks: dict[str, tuple[bool, str]] = {"arch_id": (isinstance(record.get("arch_id"), str), "an arch id")}
    if pointer:
        checks["export_dir"] = (isinstance(record.get("export_dir"), str), "a folder")
    for key in FRACTIONS:
        if key in ("val_top1", "test_top1") or record.get(key) is not None:
            checks[key] = (number_in(record.get(key), 0, 1), "a fraction in [0, 1]")
    optional = {"shipped": (lambda v: v in SHIPPED_KINDS, f"one of {', '.join(SHIPPED_KINDS)}"),
                "inherited": (_accuracies_ok, "a mapping of fractions in [0, 1]"),
                "finetune": (_finetune_ok, "null or a fine-tune (steps >= 1, fraction_of_run >= 0)"),
                "cheaper": (_cheaper_ok, "a list of subnets (arch_id, source, macs, val_top1 in [0, 1])"),
                "warning": (lambda v: isinstance(v, str), "a line"),
                "ignores_input": (lambda v: isinstance(v, str), "a line"),
                "step": (lambda v: number_in(v, 0, integer=True), "a step >= 0"),
                "macs": (lambda v: number_in(v, 0, integer=True), "a count >= 0"),
                "params": (lambda v: number_in(v, 0, integer=True), "a count >= 0"),
                "run": (lambda v: isinstance(v, str), "a folder"),
                "weights": (lambda v: isinstance(v, str), "a weights digest")}
    for key, (ok, want) in optional.items():
        if record.get(key) is not None:
            checks[key] = (ok(record[key]), want)
    for key, (ok, want) in checks.items():
        if not ok:
            return f"'{key}' must be {want}, got {clip(record.get(key), 60)}"
    return None


def _accuracies_ok(value: Any) -> bool:
    return isinstance(value, dict) and all(number_in(value[key], 0, 1) for key in FRACTIONS if key in value)


def _finetune_ok(value: Any) -> bool:
    return (isinstance(value, dict) and number_in(value.get("steps"), 1, integer=True)
            and number_in(value.get("fraction_of_run", 0), 0) and isinstance(value.get("distill", False), bool))


def _cheaper_ok(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(c, dict) and isinstance(c.get("arch_id"), str) and isinstance(c.get("source"), str)
        and number_in(c.get("macs"), 0, integer=True) and number_in(c.get("val_top1"), 0, 1)
        and (c.get("test_top1") is None or number_in(c["test_top1"], 0, 1)) for c in value)


def _read(path: Path, folder: Path, pointer: bool) -> dict[str, Any]:
    """A checked record; `SearchError` naming the file when it cannot be read or trusted."""
    again = f"export the search's answer again ({command('export', 'RUN', arch=folder / 'best.yaml')})"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SearchError(f"SEARCH_DIR: {path}: cannot read it ({str(e).splitlines()[0]}); {again}") from e
    problem = record_problem(record, pointer)
    if problem is not None:
        raise SearchError(f"SEARCH_DIR: {path}: {problem}; the record is damaged: {again}")
    return record


def shipped_status(folder: str | Path, chosen: str) -> tuple[dict[str, Any] | None, str | None]:
    """(what the search's answer `chosen` has shipped now, or None; why `shipped.json` no longer
    stands for it, or None): see the module docstring. The shipped record is the export folder's
    metrics with `export_dir` and, for other weights than the search's, `other_weights`.

    Raises:
        SearchError: `shipped.json`, or the metrics of the export it names, is damaged.
    """
    folder = Path(folder)
    path = folder / SHIPPED
    if not path.is_file():
        return None, None
    pointer = _read(path, folder, pointer=True)
    source = search_source(folder)
    export_dir = Path(pointer["export_dir"])
    if pointer["arch_id"] != chosen:
        return None, f"{SHIPPED} records an export of {pointer['arch_id']}, not the search's answer {chosen}"
    foreign = foreign_export(source, pointer)
    if foreign is not None:
        return None, f"{SHIPPED} records an export of another run ({foreign})"
    if not (export_dir / METRICS).is_file():
        return None, f"the export {SHIPPED} records, {export_dir}, is gone"
    current = _read(export_dir / METRICS, folder, pointer=False)
    if current["arch_id"] != chosen:
        return None, f"the export folder {export_dir} now holds an export of {current['arch_id']}"
    foreign = foreign_export(source, current)
    if foreign is not None:
        return None, f"the export folder {export_dir} now holds an export of another run ({foreign})"
    shipped = {**current, "export_dir": str(export_dir)}
    note = other_weights(source, current.get("step"), current.get("checkpoint"))
    if note is not None:
        shipped["other_weights"] = note
    return shipped, None


def read_shipped(folder: str | Path, chosen: str) -> dict[str, Any] | None:
    """What the search's answer `chosen` has shipped now (`shipped_status`), else None."""
    return shipped_status(folder, chosen)[0]
