"""Architectures: flat dicts of named choices, their ids and their files.

An `Arch` is the only currency that passes between components: JSON/YAML serialisable,
every key of its space present, e.g. `{"resolution": 28, "stage0.depth": 2, ...}`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Union

from nas.core import yaml_io
from nas.core.errors import ArchError, ConfigError
from nas.core.files import write_text

Value = Union[int, float, str]
Arch = dict[str, Value]


def arch_json(arch: Arch) -> str:
    """Canonical JSON text of an arch (sorted keys, no spaces): the basis of `arch_id`."""
    return json.dumps(arch, sort_keys=True, separators=(",", ":"))


def arch_id(canonical_arch: Arch) -> str:
    """First 10 hex digits of sha1 of the canonical arch as sorted-key JSON."""
    return hashlib.sha1(arch_json(canonical_arch).encode()).hexdigest()[:10]


def read_arch_file(path: str | Path) -> Arch | str:
    """Read an arch file (YAML or JSON): a bare mapping or one under the key `arch`; or, under
    `arch`, a string that a space reads as an arch (e.g. a NAS-Bench-201 string), returned as is."""
    path = Path(path)
    if not path.is_file():
        raise ArchError(f"{path}: no such file (give max, min or a YAML/JSON arch file)", param="arch")
    try:
        data = yaml_io.load_mapping(path)
    except ConfigError as e:
        raise ArchError(str(e)) from e
    if set(data) == {"arch"} and isinstance(data["arch"], str):
        return data["arch"]
    if set(data) == {"arch"} or ("arch" in data and isinstance(data["arch"], dict)):
        data = data["arch"]
    if not isinstance(data, dict):
        raise ArchError(f"{path}: 'arch' must be a mapping of choice names to values")
    for key, value in data.items():
        if not isinstance(value, (int, float, str)) or isinstance(value, bool):
            raise ArchError(f"{path}: {key}: values must be numbers or strings, got {type(value).__name__}")
    return {str(k): v for k, v in data.items()}


def write_arch_file(arch: Arch, path: str | Path) -> Path:
    """Write an arch as a bare YAML mapping (the format `--arch FILE` reads)."""
    return write_text(path, yaml_io.dumps(dict(arch)))
