"""Ship a whole family: every member of a family search exported as a one-budget export would be.

A family folder (`nas.engine.searching.family`) holds one ordinary search folder per member;
`export_family` exports each member's `best.yaml` through `export_subnet`, with the same
fine-tune settings for every member, so a member's export is byte for byte the export of the
same arch by `nas export RUN --arch MEMBER/best.yaml` (and it writes that member folder's
`shipped.json` too). Then `family_export.json` in the family folder lists what was shipped.

Everything is checked before any training: the folder is a family, the run is the one it was
searched on (same space fingerprint; when it was searched on trained weights, the same step and
the same weights, by their digest: another run or a retrained one is refused, a moved run is
not), every member's arch file is there and every export folder can be written. A family
searched on an untrained config (a zero-cost score) measured no weights: any trained run of its
space exports it. The export resumes member by member: a member whose export folder already
holds the same arch exported from the same weights with the same fine-tune settings is kept, not
trained again; a member killed inside its fine-tune resumes that fine-tune
(`nas.engine.export.finetune`).
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from nas.core.amounts import format_amount
from nas.core.arch import arch_id
from nas.core.config import FinetuneConfig
from nas.core.errors import NasError, RecordError, SearchError
from nas.core.files import write_json
from nas.core.schema import number_in
from nas.core.wording import command
from nas.engine.export import check_export_dir, check_format, export_subnet
from nas.engine.json_result import JsonResult
from nas.engine.export.family_record import FAMILY_EXPORT, ExportedMember, read_family_export
from nas.engine.export.shipped import write_shipped
from nas.engine.export.shipped_record import short_digest
from nas.engine.export.stopping import stopped_by_sigterm
from nas.engine.run import Run, resolve_arch
from nas.engine.searching.family import read_family
from nas.engine.untrained import UNTRAINED

SEARCH_SETTINGS = "search.json"


@dataclass(frozen=True)
class FamilyExport(JsonResult):
    """What `export_family` shipped: one entry per member (index, arch_id, export_dir, shipped,
    val_top1, test_top1, inherited, finetune, seconds, kept), the run, its step, the fine-tune
    settings, and the min and max subnets as the supernet holds them (arch_id, macs, params,
    val_top1, test_top1: what the family is set beside). A family trained from scratch
    (`nas.engine.export.scratch`) has no run (None), step 0, and no min and max subnets."""

    folder: Path
    run: str | None
    step: int
    finetune: dict[str, Any]
    members: list[dict[str, Any]]
    min_subnet: dict[str, Any] | None
    max_subnet: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {"members": self.members, "run": self.run, "step": self.step, "finetune": self.finetune,
                "min_subnet": self.min_subnet, "max_subnet": self.max_subnet, "folder": str(self.folder)}


def read_family_file(folder: str | Path, param: str = "family") -> dict[str, Any]:
    """family.json of `folder` (`read_family`), its members all searched; `SearchError` naming
    `param` otherwise."""
    try:
        family = read_family(folder)
    except (SearchError, RecordError) as e:
        raise type(e)(e.problem, param=param, fix=e.fix) from None
    if len(family["members"]) < len(family["budgets"]):
        raise SearchError(f"{folder} is unfinished ({len(family['members'])} of {len(family['budgets'])} members "
                          "searched)", param=param, fix="run the same family search again to finish it")
    return family


def finetune_settings(settings: FinetuneConfig, run: Run, what: str = "export.finetune.length") -> dict[str, Any]:
    """The fine-tune every member gets, as recorded: length, optimiser steps, peak lr, distill, seed
    (a length past the ceiling is an error naming `what`: the config's key, or `finetune`)."""
    from nas.engine.export.finetune import finetune_steps, run_length

    run_steps, epoch_steps = run_length(run)
    steps = finetune_steps(settings.length, run_steps, epoch_steps, what) if settings.enabled else 0
    lr = run.config.train.optimizer.lr if settings.lr is None else settings.lr
    return {"length": str(settings.length), "steps": steps, "lr": lr if steps else None,
            "distill": settings.distill if steps else False, "seed": settings.seed}


def finished(export_dir: Path, member_id: str, run: Run, wanted: Mapping[str, Any],
             export_format: str = "pt2") -> dict[str, Any] | None:
    """The metrics.json of `export_dir` when it is `member_id` exported from this run's step with
    the `wanted` fine-tune (`finetune_settings`) in `export_format`, else None."""
    if not has_format(export_dir, export_format):
        return None
    try:
        record = json.loads((export_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("arch_id") != member_id or record.get("step") != run.step:
        return None
    if not same_weights(record, run):
        return None
    tuned = record.get("finetune")
    if not wanted["steps"]:
        return record if tuned is None else None
    same = isinstance(tuned, dict) and all(tuned.get(key) == wanted[key] for key in ("steps", "lr", "distill", "seed"))
    return record if same else None


def has_format(export_dir: Path, export_format: str) -> bool:
    """Whether `export_dir` holds the files of `export_format` (`model.onnx` for onnx) beside the export."""
    return export_format != "onnx" or (export_dir / "model.onnx").is_file()


def same_weights(record: Mapping[str, Any], run: Run) -> bool:
    """Whether an export's metrics (`record`) come from `run`'s weights: by their digest where the
    record has one (wherever the run lies now), else by the run's folder."""
    if isinstance(record.get("weights"), str) and run.weights is not None:
        return record["weights"] == run.weights
    return isinstance(record.get("run"), str) and Path(record["run"]).resolve() == run.dir.root.resolve()


def check_source(run: Run, folder: Path, source: Any) -> None:
    """Refuse, in one line naming `family`, a run whose weights are not those the family in
    `folder` was searched on (`source`: family.json's): another step, or other weights at that
    step (another run, or the run trained again). A family searched on an untrained config
    (`source` None or untrained) was measured on no weights: any run of its space exports it."""
    if not isinstance(source, Mapping) or source.get("checkpoint") == UNTRAINED:
        return
    if source.get("step") != run.step:
        raise SearchError(f"{folder} was searched on {source.get('run')} at step {source.get('step')} "
                          f"({source.get('checkpoint')}), this run holds step {run.step} ({run.checkpoint.name})",
                          param="family", fix="export it from that checkpoint, or search the family again on this one")
    weights = source.get("weights")
    if isinstance(weights, str) and run.weights is not None and weights != run.weights:
        raise SearchError(f"{folder} was searched on the weights {short_digest(weights)} at step {run.step}, this run "
                          f"({run.dir.root}) holds the weights {short_digest(run.weights)} at that step: another run, "
                          "or the run trained again", param="family",
                          fix="export it from the run it was searched on, or search the family again on this one")


def check_family(run: Run, folder: Path, family: Mapping[str, Any], export_format: str, dir_param: str = "RUN"
                 ) -> list[tuple[Mapping[str, Any], Path, Path]]:
    """Each member with its arch file and export folder (`run.dir.export(arch_id)`), once everything
    is checked (module docstring); raises `NasError` naming `family` (or `dir_param` for an export
    folder that cannot be written) in one line."""
    check_format(export_format)
    planned = []
    for member in family["members"]:
        member_dir = folder / member["dir"]
        arch_file = member_dir / "best.yaml"
        if not arch_file.is_file():
            raise SearchError(f"family: member {member['index']}: {arch_file} is missing; run the family search "
                              "again to finish it")
        fingerprint = _fingerprint(member_dir)
        if fingerprint is not None and fingerprint != run.space.fingerprint():
            raise SearchError(f"family: member {member['index']} was searched in another space (fingerprint "
                              f"{fingerprint}, this run's is {run.space.fingerprint()}); export it from the run it "
                              "was searched on")
        try:
            arch = resolve_arch(run.space, str(arch_file))
        except NasError as e:
            raise SearchError(f"family: member {member['index']}: {arch_file}: {e.problem}") from None
        check_member_arch(run, family, member, arch, arch_file)
        out_dir = run.dir.export(arch_id(arch))
        check_export_dir(out_dir, dir_param, run.space.params(arch))
        planned.append((member, arch_file, out_dir))
    return planned


def check_member_arch(run: Run, family: Mapping[str, Any], member: Mapping[str, Any], arch: Mapping[str, Any],
                      arch_file: Path) -> None:
    """Refuse, in one line naming `family`, a member whose `best.yaml` is not the arch family.json
    names (edited since the search) or whose arch exceeds the member's MACs or params budget."""
    found = arch_id(arch)
    if found != member["arch_id"]:
        raise SearchError(f"family: member {member['index']}: {arch_file} holds the arch {found}, family.json names "
                          f"{member['arch_id']} (the search's answer): the file was changed since the search; put "
                          "the search's answer back (search the family again), or export that arch on its own with "
                          + command("export", "RUN", arch=arch_file))
    budgets = {**family["other_budgets"], family["cost"]: member["budget"]}
    costs = {"macs": run.space.macs, "params": run.space.params}
    for cost, budget in budgets.items():
        if cost in costs and isinstance(budget, (int, float)) and costs[cost](arch) > budget:
            raise SearchError(f"family: member {member['index']}: {arch_file}: the arch {found} costs "
                              f"{format_amount(costs[cost](arch))} {cost}, above the member's {cost} budget "
                              f"{format_amount(budget)}: family.json was changed since the search; search the family "
                              "again")


def _fingerprint(member_dir: Path) -> str | None:
    try:
        settings = json.loads((member_dir / SEARCH_SETTINGS).read_text())
    except (OSError, ValueError):
        return None
    return settings.get("space_fingerprint") if isinstance(settings, dict) else None


def export_family(run: Run, folder: str | Path, finetune: FinetuneConfig | None = None, export_format: str = "pt2",
                  progress: bool = True) -> FamilyExport:
    """Export every member of the family search in `folder` from `run` (module docstring): each as
    `export_subnet(run, MEMBER/best.yaml, finetune=finetune)` would (default fine-tune: the run's
    `export.finetune`), members already exported with the same settings kept; then write
    `folder/family_export.json`. A tqdm bar over the members on stderr when `progress`."""
    folder = Path(folder)
    family = read_family_file(folder)
    check_source(run, folder, family.get("source"))
    settings = run.config.export.finetune if finetune is None else finetune
    wanted = finetune_settings(settings, run, "export.finetune.length" if finetune is None else "finetune")
    planned = check_family(run, folder, family, export_format)
    with stopped_by_sigterm():      # between members and in the final evaluation too: one line, a rerun resumes
        members = ship_members(planned, lambda out_dir, ident: finished(out_dir, ident, run, wanted, export_format),
                               lambda arch_file: export_subnet(run, str(arch_file), export_format=export_format,
                                                               finetune=settings, progress=progress).record,
                               earlier_members(folder), progress)
        ends = [_inherited(run, arch) for arch in (run.space.min(), run.space.max())]
    return write_family_export(FamilyExport(folder, str(run.dir.root.absolute()), run.step, wanted, members, *ends))


def ship_members(planned: list[tuple[Mapping[str, Any], Path, Path]],
                 is_finished: Callable[[Path, str], dict[str, Any] | None], export: Callable[[Path], dict[str, Any]],
                 earlier: Sequence[ExportedMember], progress: bool) -> list[dict[str, Any]]:
    """Export each planned (member, arch file, export folder) with `export(arch_file)` (which
    returns the export's metrics), unless `is_finished(export folder, arch_id)` gives the
    metrics of an export to keep; a tqdm bar over the members when `progress`. Returns the
    entries of family_export.json (`earlier`: the members the last one recorded, whose seconds a
    kept member keeps, `kept_seconds`)."""
    from tqdm.auto import tqdm

    total = len(planned)
    bar = tqdm(total=total, desc="export family", unit="member", file=sys.stderr, disable=not progress)
    members = []
    try:
        for member, arch_file, out_dir in planned:
            label = f"member {member['index']}/{total}"
            kept = is_finished(out_dir, member["arch_id"])
            started = time.monotonic()
            if kept is not None:
                _say(f"{label}: already exported, kept ({out_dir})", progress)
                record = kept
                write_shipped(arch_file.parent, out_dir, record)    # replaces a record of another export
                seconds = kept_seconds(earlier, out_dir, record)
            else:
                bar.set_postfix_str(f"{label} {member['arch_id']}")
                _say(f"{label}: {member['arch_id']} ({member.get('budget_spec', member.get('budget'))} budget)",
                     progress)
                record = export(arch_file)
                seconds = round(time.monotonic() - started, 1)
            members.append({"index": member["index"], "arch_id": record["arch_id"],
                            "export_dir": str(Path(out_dir).absolute()),
                            "shipped": record.get("shipped"), "val_top1": record["val_top1"],
                            "test_top1": record["test_top1"], "inherited": record.get("inherited"),
                            "finetune": record.get("finetune"), **({"scratch": record["scratch"]} if "scratch" in record
                                                                   else {}),
                            "seconds": seconds, "kept": kept is not None})
            bar.update(1)
    finally:
        bar.close()
    return members


def write_family_export(result: FamilyExport) -> FamilyExport:
    """Write `result` as family_export.json in its family folder; returns it."""
    record = {key: value for key, value in result.to_json().items() if key != "folder"}
    write_json(result.folder / FAMILY_EXPORT, record)
    return result


def _inherited(run: Run, arch: Mapping[str, Any]) -> dict[str, Any]:
    """An arch's costs and BN-recalibrated val and test top-1 in the supernet."""
    val, test = (run.evaluator.evaluate(arch, split).top1 for split in ("val", "test"))
    return {"arch_id": arch_id(arch), "macs": run.space.macs(arch), "params": run.space.params(arch),
            "val_top1": val, "test_top1": test}


def earlier_members(folder: Path) -> tuple[ExportedMember, ...]:
    """The members the last family export of `folder` recorded (none where there is no readable
    family_export.json: this export rewrites it)."""
    try:
        earlier = read_family_export(folder)
    except RecordError:
        return ()
    return earlier.members if earlier is not None else ()


def kept_seconds(earlier: Sequence[ExportedMember], out_dir: Path, record: Mapping[str, Any]) -> float | None:
    """What a kept export took: the seconds the earlier family export recorded for this very
    export (same arch, folder, accuracies and training record), else its own training's seconds;
    None where neither is a number of seconds."""
    for member in earlier:
        if (member.arch_id == record.get("arch_id") and Path(member.export_dir) == out_dir
                and (member.val_top1, member.test_top1) == (record.get("val_top1"), record.get("test_top1"))
                and member.finetune == record.get("finetune") and member.scratch == record.get("scratch")
                and member.seconds is not None):
            return member.seconds
    trained = record.get("finetune") or record.get("scratch") or {}
    seconds = trained.get("seconds") if isinstance(trained, Mapping) else None
    return seconds if number_in(seconds, 0) else None


def _say(line: str, progress: bool) -> None:
    from tqdm.auto import tqdm

    if progress:
        tqdm.write(line, file=sys.stderr)


__all__ = ["FAMILY_EXPORT", "FamilyExport", "check_family", "check_member_arch", "check_source", "earlier_members",
           "export_family", "finetune_settings", "finished", "has_format", "kept_seconds", "read_family_file",
           "same_weights", "ship_members", "write_family_export"]
