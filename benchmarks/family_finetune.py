"""How long each member of a family needs to be fine-tuned: shipped accuracy against fine-tune length.

For an exported family (`nas export RUN --family DIR`, whose members' inherited accuracies and
default fine-tunes are recorded in `DIR/family_export.json`), fine-tune every member again at each
of `--lengths` (as `nas export --finetune` takes them: `N` steps, `Ne` epochs, `P%` of the run),
in each of `--variants` (`plain`: the labels; `kd`: half the loss from the max subnet's
predictions, as `nas export --distill` does), and print per member:
its MACs, inherited val/test top-1, the val top-1 its MACs would have on the line between the min
and the max subnet's inherited val top-1 (the two subnets every sandwich step trains: the member's
*anchor*), its *loss* (anchor minus inherited val, points), and val/test top-1 and thread-seconds at
each length. Rows are appended to `--out` (CSV) as they finish, so a killed sweep keeps what it
measured. The member's own default export is one more length (read, not retrained).

    python -m benchmarks.family_finetune RUN FAMILY_DIR --lengths 6% 12% [--variants plain kd] [--members I ...] [--out CSV]
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any, Mapping

from benchmarks import common
from nas import api
from nas.core.arch import arch_id
from nas.core.config import FinetuneConfig
from nas.core.errors import NasError
from nas.engine.export.family import FAMILY_EXPORT, read_family_file
from nas.engine.export.finetune import finetune_subnet
from nas.engine.run_dir import DEFAULT_RUNS_DIR

Anchor = tuple[float, float]     # (MACs, val top-1) of the min or the max subnet
FIELDS = ("arch_id", "macs", "inherited_val", "inherited_test", "anchor_val", "loss_points",
          "length", "steps", "distill", "val_top1", "test_top1", "thread_seconds")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", metavar="RUN", help="trained run (directory or name under --runs-dir)")
    parser.add_argument("family", metavar="FAMILY_DIR", help="an exported family search folder")
    parser.add_argument("--lengths", nargs="+", default=["6%", "12%"], metavar="LENGTH",
                        help="fine-tune lengths to measure (default 6%% 12%%)")
    parser.add_argument("--variants", nargs="+", choices=("plain", "kd"), default=["plain"],
                        help="plain: learn from the labels; kd: half the loss from the max subnet (default plain)")
    parser.add_argument("--members", type=int, nargs="+", default=None, metavar="I",
                        help="only these member indices (1-based)")
    parser.add_argument("--out", default=None, metavar="CSV", help="append one row per fine-tune here")
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    common.threads_argument(parser, default=1)
    return parser.parse_args(argv)


def anchor(macs: float, low: Anchor, high: Anchor) -> float:
    """The val top-1 at `macs` on the straight line through `low` and `high` ((MACs, val top-1))."""
    (x0, y0), (x1, y1) = low, high
    return y0 + (y1 - y0) * (macs - x0) / (x1 - x0)


def member_figures(member: Mapping[str, Any], shipped: Mapping[str, Any], low: Anchor, high: Anchor
                   ) -> dict[str, Any]:
    """The figures a member has before any new fine-tune: costs, inherited accuracies, anchor, loss."""
    inherited = shipped["inherited"]
    expected = anchor(member["macs"], low, high)
    return {"arch_id": member["arch_id"], "macs": member["macs"], "inherited_val": inherited["val_top1"],
            "inherited_test": inherited["test_top1"], "anchor_val": round(expected, 4),
            "loss_points": round(100 * (expected - inherited["val_top1"]), 2)}


def exported_family(family_dir: Path, step: int) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]],
                                                        Anchor, Anchor]:
    """The members of the family search in `family_dir`, their export records by arch_id
    (`family_export.json`, checked to hold every member and to come from the run's `step`), and
    the min and max subnets' (MACs, inherited val top-1) as that export measured them; `NasError`
    in one line otherwise."""
    members = read_family_file(family_dir)["members"]
    fix = "run nas export RUN --family FAMILY_DIR first"
    try:
        exported = json.loads((family_dir / FAMILY_EXPORT).read_text())
        shipped = {m["arch_id"]: m for m in exported["members"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise NasError(f"{family_dir / FAMILY_EXPORT}: not a family export ({str(e).splitlines()[0]})",
                       param="family", fix=fix) from e
    missing = [m["arch_id"] for m in members if m["arch_id"] not in shipped]
    if missing:
        raise NasError(f"{family_dir}: members {', '.join(missing)} are not exported", param="family", fix=fix)
    if exported.get("run") is None:
        raise NasError(f"{family_dir}: its members were trained alone, not inherited from a supernet",
                       param="family", fix="pass a family exported from a trained run")
    if exported.get("step") != step:
        raise NasError(f"{family_dir / FAMILY_EXPORT} was exported from step {exported.get('step')}, "
                       f"the run holds step {step}", param="family", fix=fix)
    low, high = ((exported[end]["macs"], exported[end]["val_top1"]) for end in ("min_subnet", "max_subnet"))
    return members, shipped, low, high


def pick_members(members: list[dict[str, Any]], indices: list[int] | None) -> list[dict[str, Any]]:
    """The members whose 1-based index is in `indices` (all when None); `NasError` naming
    `members` for an index the family does not have."""
    if not indices:
        return members
    unknown = sorted(set(indices) - {m["index"] for m in members})
    if unknown:
        raise NasError(f"{', '.join(map(str, unknown))}: the family has members 1-{len(members)}", param="members")
    return [m for m in members if m["index"] in indices]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    common.use_threads(args.threads)
    run = api.load_run(args.run, args.runs_dir)
    family_dir = Path(args.family)
    members, exported, low, high = exported_family(family_dir, run.step)
    members = pick_members(members, args.members)
    print(f"anchors: min subnet {low[0] / 1e6:.3f}M val {100 * low[1]:.2f}, max subnet {high[0] / 1e6:.3f}M "
          f"val {100 * high[1]:.2f}", flush=True)
    out = Path(args.out) if args.out else None
    if out is not None and not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(",".join(FIELDS) + "\n")
    rows = []
    for member in members:
        shipped = exported[member["arch_id"]]
        base = member_figures(member, shipped, low, high)
        default = shipped.get("finetune") or {}
        rows.append({**base, "length": default.get("length", "0"), "steps": default.get("steps", 0),
                     "distill": bool(default.get("distill")), "val_top1": shipped["val_top1"],
                     "test_top1": shipped["test_top1"],
                     "thread_seconds": round(float(default.get("seconds") or 0) * int(default.get("threads") or 1), 1)})
        for length in args.lengths:
            for distill in (variant == "kd" for variant in args.variants):
                settings = FinetuneConfig(length=length, distill=distill, seed=int(default.get("seed", 0)))
                tuned = finetune_subnet(run, member["arch"], settings, progress=False)
                row = {**base, "length": length, "steps": tuned.record["steps"], "distill": distill,
                       "val_top1": tuned.val_top1, "test_top1": tuned.test_top1,
                       "thread_seconds": round(tuned.record["seconds"] * tuned.record["threads"], 1)}
                rows.append(row)
                print(f"{member['index']} {arch_id(member['arch'])} loss {base['loss_points']:+.2f} {length:>5}"
                      f"{' kd' if distill else '   '} val {100 * row['val_top1']:.2f} test "
                      f"{100 * row['test_top1']:.2f} ({row['thread_seconds']:.0f} s)", flush=True)
                if out is not None:
                    with out.open("a", newline="") as f:
                        csv.DictWriter(f, FIELDS).writerow(row)
    return common.emit("family_finetune", {"run": str(run.dir.root), "family": str(family_dir),
                                           "anchors": {"min": low, "max": high}, "rows": rows}, argv)


if __name__ == "__main__":
    common.run(main)
