"""`family_export.json`, typed: what a family export shipped, read back checked.

The family export (`nas.engine.export.family`) writes it; `nas summary` and the next family
export read it through `read_family_export`, which checks every field by its type (fractions
in [0, 1], counts, seconds >= 0), so a damaged file is one line naming it, never a traceback.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nas.core.records import field_problems, read_record
from nas.core.schema import number_in
from nas.core.wording import command

FAMILY_EXPORT = "family_export.json"
SHIPPED_KINDS = Literal["finetuned", "inherited", "scratch"]


def _fraction(value: float | None) -> bool:
    return value is None or number_in(value, 0, 1)


@dataclass(frozen=True)
class ExportedMember:
    """One member as shipped: its export folder, how it was shipped and its accuracies."""

    index: int
    arch_id: str
    export_dir: str
    val_top1: float
    test_top1: float
    kept: bool
    shipped: SHIPPED_KINDS | None = None
    inherited: dict[str, Any] | None = None
    finetune: dict[str, Any] | None = None
    scratch: dict[str, Any] | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        field_problems(index=(self.index >= 1, "a member number >= 1"),
                       val_top1=(_fraction(self.val_top1), "a fraction in [0, 1]"),
                       test_top1=(_fraction(self.test_top1), "a fraction in [0, 1]"),
                       seconds=(self.seconds is None or number_in(self.seconds, 0), "seconds >= 0"))


@dataclass(frozen=True)
class SubnetEnd:
    """The min or max subnet as the supernet holds it (what the family is set beside)."""

    arch_id: str
    macs: int
    params: int
    val_top1: float
    test_top1: float

    def __post_init__(self) -> None:
        field_problems(macs=(self.macs >= 0, "a count >= 0"), params=(self.params >= 0, "a count >= 0"),
                       val_top1=(_fraction(self.val_top1), "a fraction in [0, 1]"),
                       test_top1=(_fraction(self.test_top1), "a fraction in [0, 1]"))


@dataclass(frozen=True)
class FamilyExportRecord:
    """family_export.json: the members shipped, the run and step (None and 0 for a config's family
    trained from scratch), the fine-tune settings, and the min and max subnets."""

    members: tuple[ExportedMember, ...]
    run: str | None
    step: int
    finetune: dict[str, Any]
    min_subnet: SubnetEnd | None = None
    max_subnet: SubnetEnd | None = None

    def __post_init__(self) -> None:
        field_problems(step=(self.step >= 0, "a step >= 0"))


def read_family_export(folder: str | Path, param: str = "SEARCH_DIR") -> FamilyExportRecord | None:
    """`folder/family_export.json` checked (module docstring), None where there is none yet;
    `RecordError` naming `param` and the file when it is damaged."""
    path = Path(folder) / FAMILY_EXPORT
    if not path.is_file():
        return None
    return read_record(FamilyExportRecord, path, param=param,
                       fix=f"delete it and export the family again ({command('export', 'RUN', family=folder)}) to "
                       "rewrite it")


__all__ = ["FAMILY_EXPORT", "ExportedMember", "FamilyExportRecord", "SubnetEnd", "read_family_export"]
