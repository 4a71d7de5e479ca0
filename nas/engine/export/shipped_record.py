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
kinds), through the typed records `ShippedRecord` and `ExportRecord`: a damaged record is one
error line naming the file and its first bad key, as a damaged `summary.json` is.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

from nas.core.records import field_problems, parse_record, read_json
from nas.core.schema import number_in
from nas.core.wording import command
from nas.engine.untrained import UNTRAINED

SHIPPED = "shipped.json"
METRICS = "metrics.json"
SHIPPED_KIND = Literal["finetuned", "inherited", "scratch"]     # scratch: trained alone (a config's family)
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


@dataclass(frozen=True)
class ExportRecord:
    """The fields of an export's metrics.json that the search's record of it is judged and shown
    by (the file holds more), each checked; `export_dir` is `shipped.json`'s own (`ShippedRecord`)."""

    arch_id: str
    val_top1: float
    test_top1: float
    val_top5: float | None = None
    test_top5: float | None = None
    shipped: SHIPPED_KIND | None = None
    inherited: dict[str, Any] | None = None
    finetune: dict[str, Any] | None = None
    cheaper: tuple[dict[str, Any], ...] | None = None
    warning: str | None = None
    ignores_input: str | None = None
    step: int | None = None
    macs: int | None = None
    params: int | None = None
    run: str | None = None
    weights: str | None = None

    def __post_init__(self) -> None:
        fractions = {key: (getattr(self, key) is None or number_in(getattr(self, key), 0, 1), "a fraction in [0, 1]")
                     for key in FRACTIONS}
        counts = {key: (getattr(self, key) is None or getattr(self, key) >= 0, "a count >= 0")
                  for key in ("macs", "params")}
        field_problems(**fractions, **counts, step=(self.step is None or self.step >= 0, "a step >= 0"),
                       inherited=(self.inherited is None or _accuracies_ok(self.inherited),
                                  "a mapping of fractions in [0, 1]"),
                       finetune=(self.finetune is None or _finetune_ok(self.finetune),
                                 "null or a fine-tune (steps >= 1, fraction_of_run >= 0)"),
                       cheaper=(self.cheaper is None or _cheaper_ok(list(self.cheaper)),
                                "a list of subnets (arch_id, source, macs, val_top1 in [0, 1])"))


@dataclass(frozen=True)
class ShippedRecord(ExportRecord):
    """shipped.json: the export's metrics and the export folder it names."""

    export_dir: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        field_problems(export_dir=(self.export_dir is not None, "the export's folder"))


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
    """The record at `path` (`pointer`: shipped.json, else an export's metrics.json), read through
    its typed record; `RecordError` naming `SEARCH_DIR` and the file when it cannot be trusted."""
    again = f"export the search's answer again ({command('export', 'RUN', arch=folder / 'best.yaml')})"
    record = read_json(path, param="SEARCH_DIR", fix=again)
    parse_record(ShippedRecord if pointer else ExportRecord, record, path, param="SEARCH_DIR", fix=again,
                 open_keys=True)
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
