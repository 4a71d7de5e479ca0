"""The corpus of malformed inputs in tests/data/malformed and the checkpoints derived from a real run.

`cases.yaml` lists every file with the message its error must contain and the verbs that read
it; `case_argv` builds the command line of one case. Damaged checkpoints need a real checkpoint
to damage: `derive_checkpoints(last, folder)` writes them from a trained run's `last.pt` (a
fixed recipe: the same damage every time). Shared by tests/cli/test_malformed_corpus.py and
benchmarks/reliability.py.
"""
from __future__ import annotations

import hashlib
import random
import shutil
import struct
import zipfile
from pathlib import Path
from typing import Any

import torch

from nas.core import yaml_io
from nas.engine.checkpoint import load_checkpoint, save_checkpoint

CORPUS = Path(__file__).resolve().parents[1] / "data" / "malformed"
KINDS = {"configs": ("space", "train"), "archs": ("eval", "export"),
         "checkpoints": ("eval", "export", "search", "latency-table", "resume"),
         "derived_checkpoints": ("eval", "export", "search", "latency-table", "resume")}


def cases() -> list[tuple[str, str, str, str]]:
    """(kind, file name, verb, expected message part) of every case of the corpus."""
    listed = yaml_io.load_mapping(CORPUS / "cases.yaml")
    rows = []
    for kind, verbs in KINDS.items():
        for name, case in listed[kind].items():
            for verb in case.get("verbs", verbs):
                rows.append((kind, name, verb, case["message"]))
    return rows


def folder_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` by relative path (`.lock` files, which hold a PID, aside)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


def _state(last: Path) -> dict[str, Any]:
    state = load_checkpoint(last)
    return {k: v for k, v in state.items() if k not in ("format_version", "digest")}


def _first_weight(state: dict[str, Any]) -> str:
    return next(k for k, v in state["model"].items() if v.is_floating_point() and v.dim() > 1)


def _largest_tensor_data(path: Path) -> tuple[int, int]:
    """(offset, size) of the bytes of the largest tensor storage inside a torch zip checkpoint."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "rb") as f:
        f.seek(info.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", f.read(4))
    return info.header_offset + 30 + name_length + extra_length, info.file_size


def damage_tensor_data(path: Path, count: int = 4096) -> None:
    """Overwrite up to `count` bytes of the largest tensor in the checkpoint at `path` with
    seeded random bytes (the zip archive stays readable: only the digest can tell)."""
    start, size = _largest_tensor_data(path)
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(random.Random(1).randbytes(min(count, size)))


def derive_checkpoints(last: Path, folder: Path) -> dict[str, Path]:
    """Damaged and mismatched copies of the checkpoint `last`, by the names in cases.yaml."""
    folder.mkdir(parents=True, exist_ok=True)
    data = last.read_bytes()
    paths = {name: folder / f"{name}.pt" for name in yaml_io.load_mapping(CORPUS / "cases.yaml")["derived_checkpoints"]}
    middle = len(data) // 2
    paths["random_4k_in_the_middle"].write_bytes(data[:middle] + random.Random(0).randbytes(4096)
                                                 + data[middle + 4096:])
    shutil.copyfile(last, paths["random_4k_in_tensor_data"])
    damage_tensor_data(paths["random_4k_in_tensor_data"])
    paths["truncated_half"].write_bytes(data[:middle])
    flipped = bytearray(data)
    flipped[len(data) - len(data) // 3] ^= 0x01      # one bit in the tensor data, the archive stays valid
    paths["one_bit_flipped"].write_bytes(bytes(flipped))
    state = _state(last)
    torch.save({"format_version": 2, **state}, paths["format_2_without_digest"])
    weight = _first_weight(state)
    poisoned = {**state, "model": {**state["model"], weight: state["model"][weight] * float("nan")}}
    torch.save({"format_version": 1, **poisoned}, paths["nan_weights_format_1"])
    model = dict(state["model"])
    model.pop(weight)
    save_checkpoint({**state, "model": model}, paths["missing_weight"])
    save_checkpoint({**state, "model": {**state["model"], "extra.weight": torch.zeros(3)}}, paths["unexpected_weight"])
    reshaped = {**state["model"], weight: torch.zeros(1, *state["model"][weight].shape[1:])}
    save_checkpoint({**state, "model": reshaped}, paths["weight_of_another_shape"])
    config = yaml_io.loads(yaml_io.dumps(state["config"]))
    config["space"]["options"]["expand_ratios"] = [2, 3]
    save_checkpoint({**state, "config": config}, paths["trained_with_another_config"])
    return paths


def _resume_argv(checkpoint: Path, trained: Path, tmp_path: Path) -> tuple[list[str], Path]:
    """`nas train --resume` of a copy of the trained run whose last.pt is `checkpoint`."""
    runs = tmp_path / "runs"
    shutil.copytree(trained / "tiny", runs / "tiny", ignore=shutil.ignore_patterns(".lock"))
    shutil.copyfile(checkpoint, runs / "tiny" / "checkpoints" / "last.pt")
    return ["train", str(runs / "tiny" / "config.yaml"), "--name", "tiny", "--runs-dir", str(runs), "--resume",
            "--quiet"], runs


def case_argv(kind: str, name: str, verb: str, trained: Path, derived: dict[str, Path],
              tmp_path: Path) -> tuple[list[str], Path]:
    """The command line of one case and the folder it must leave unchanged."""
    path = derived[name] if kind == "derived_checkpoints" else CORPUS / kind / name
    run = ["tiny", "--runs-dir", str(trained)]
    if kind == "configs":
        if verb == "space":
            return ["space", str(path)], tmp_path
        return ["train", str(path), "--name", "c", "--runs-dir", str(tmp_path / "runs"), "--quiet"], tmp_path
    if kind == "archs":
        return [verb, *run, "--arch", str(path)], trained
    if verb == "resume":
        return _resume_argv(path, trained, tmp_path)
    extra = {"eval": ["--arch", "max"], "export": ["--arch", "max"], "search": ["--trials", "2", "--quiet"],
             "latency-table": ["--quiet"]}[verb]
    return [verb, *run, "--checkpoint", str(path), *extra], trained
