"""The base of the stages' typed results: a dataclass that prints as JSON (the CLI's `--json`)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class JsonResult:
    """Mixin for result dataclasses: `to_json()`."""

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON-ready values (paths as strings)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value
