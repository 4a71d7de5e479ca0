"""The command a family summary suggests to export what is missing: the family's own target and settings.

Following it must finish the family, not replace good exports: so it names what the family was
exported from (the run, where it lies now, or the config of a family trained alone) and repeats
the fine-tune settings its members were shipped with (`--finetune`, `--finetune-lr`,
`--distill`), which a kept member must match.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from nas.engine.untrained import UNTRAINED

FLAGS = dict(family="--family", length="--finetune", lr="--finetune-lr", distill="--distill")   # a report's command


def export_target(family: Mapping[str, Any], exported: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """What `nas export TARGET --family DIR` names: the run family_export.json records (where it
    was exported from last), else the run the family was searched on, while that folder is there
    (a run moved since: `RUN`);
    the config (`family.json`'s `config`) for a family trained alone or searched untrained; `RUN`
    or `CONFIG` where no record says."""
    if exported.get("run") and Path(exported["run"]).is_dir():
        return str(exported["run"])
    source = family.get("source") if isinstance(family.get("source"), Mapping) else None
    alone = any(row.get("shipped") == "scratch" for row in rows) or "scratch" in (exported.get("finetune") or {})
    if alone or source is None or source.get("checkpoint") == UNTRAINED:
        return str(family.get("config") or "CONFIG")
    run = source.get("run")
    return str(run) if run and Path(run).is_dir() else "RUN"


def shipped_settings(exported: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The fine-tune the family's members were shipped with: family_export.json's, else that of an
    exported member (inherited: no fine-tune); None where nothing was exported yet."""
    if isinstance(exported.get("finetune"), Mapping) and exported["finetune"]:
        return exported["finetune"]
    for row in rows:
        if row.get("exported") and row.get("shipped") == "finetuned" and isinstance(row.get("finetune"), Mapping):
            return row["finetune"]
        if row.get("exported") and row.get("shipped") == "inherited":
            return {"steps": 0}
    return None


def finetune_flags(settings: Mapping[str, Any] | None) -> list[str]:
    """The `nas export` options that repeat `settings` (`shipped_settings`); none for a family
    trained alone or not exported yet (the run's own `export.finetune` then)."""
    if settings is None or "scratch" in settings:
        return []
    if not settings.get("steps"):
        return [FLAGS["length"], "0"]
    flags = [FLAGS["length"], str(settings.get("length") or settings["steps"])]
    if settings.get("lr") is not None:
        flags += [FLAGS["lr"], str(settings["lr"])]
    return flags + ([FLAGS["distill"]] if settings.get("distill") else [])


def export_command(folder: str | Path, family: Mapping[str, Any], exported: Mapping[str, Any],
                   rows: Sequence[Mapping[str, Any]]) -> str:
    """`nas export TARGET --family DIR [fine-tune options]`: finishes the family as it was begun."""
    words = ["nas", "export", export_target(family, exported, rows), FLAGS["family"], str(folder),
             *finetune_flags(shipped_settings(exported, rows))]
    return " ".join(shlex.quote(word) if word not in ("RUN", "CONFIG") else word for word in words)


__all__ = ["export_command", "export_target", "finetune_flags", "shipped_settings"]
