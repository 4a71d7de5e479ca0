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

    python -m benchmarks.family_finetune RUN FAMILY_DIR --lengths 6% 12% [--variants plain kd] [--out CSV]
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
from nas.engine.export.finetune import finetune_subnet
from nas.engine.run_dir import DEFAULT_RUNS_DIR

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
    parser.add_argument("--members", default=None, metavar="I,J", help="only these member indices (1-based)")
    parser.add_argument("--out", default=None, metavar="CSV", help="append one row per fine-tune here")
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    common.threads_argument(parser, default=1)
    return parser.parse_args(argv)


def anchor(macs: float, low: tuple[float, float], high: tuple[float, float]) -> float:
    """The val top-1 at `macs` on the straight line through `low` and `high` ((MACs, val top-1))."""
    (x0, y0), (x1, y1) = low, high
    return y0 + (y1 - y0) * (macs - x0) / (x1 - x0)


def member_figures(member: Mapping[str, Any], shipped: Mapping[str, Any], low: tuple[float, float],
                high: tuple[float, float]) -> dict[str, Any]:
    """The figures a member has before any new fine-tune: costs, inherited accuracies, anchor, loss."""
    inherited = shipped["inherited"]
    expected = anchor(member["macs"], low, high)
    return {"arch_id": member["arch_id"], "macs": member["macs"], "inherited_val": inherited["val_top1"],
            "inherited_test": inherited["test_top1"], "anchor_val": round(expected, 4),
            "loss_points": round(100 * (expected - inherited["val_top1"]), 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    common.use_threads(args.threads)
    run = api.load_run(args.run, args.runs_dir)
    family_dir = Path(args.family)
    try:
        family = json.loads((family_dir / "family.json").read_text())
        exported = {m["arch_id"]: m for m in json.loads((family_dir / "family_export.json").read_text())["members"]}
    except (OSError, ValueError, KeyError) as e:
        raise NasError(f"{family_dir}: not an exported family ({str(e).splitlines()[0]})", param="family",
                       fix="run nas export RUN --family FAMILY_DIR first") from e
    members = family["members"]
    if args.members:
        wanted = {int(i) for i in args.members.split(",")}
        members = [m for m in members if m["index"] in wanted]
    ends = [run.space.min(), run.space.max()]
    low, high = ((run.space.macs(a), api.evaluate(run, a, split="val").top1) for a in ends)
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
