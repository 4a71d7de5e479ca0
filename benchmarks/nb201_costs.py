"""Do `costs: nb201` MACs and params equal NAS-Bench-201's FLOPs and params (as NASLib records
them) for every arch of NASLib's file? Prints the counts of exact matches, and for the archs
with dead edges (which this space prunes and the benchmark runs) whether the difference is
exactly the dead edges' own costs.

    python -m benchmarks.nb201_costs          # reads ../shared/data/nb201/naslib_zc_nb201_cifar10.json
"""
from __future__ import annotations

import sys

from benchmarks.nb201_data import NASLIB_FILE, naslib_arch, naslib_records, paper_space
from search_spaces.cell201 import EDGES, edge_key


def edge_costs(space) -> dict[str, tuple[int, int]]:
    """(MACs, params) one edge of each operation adds to the network (all its cells)."""
    def alone(op: str) -> tuple[int, int]:
        arch = {edge_key(to, source): "none" for to, source in EDGES}
        return space.costs({**arch, "edge3<-0": op})
    skip = alone("skip_connect")
    return {op: tuple(a - b for a, b in zip(alone(op), skip)) for op in space.choices()["edge3<-0"]}


def main(argv: list[str] | None = None) -> int:
    del argv
    if not NASLIB_FILE.is_file():
        print(f"no {NASLIB_FILE}: nothing to check", file=sys.stderr)
        return 2
    space, records = paper_space(), naslib_records()
    per_edge = edge_costs(space)
    live = dead = live_equal = dead_explained = 0
    worst = 0.0
    for key, record in records.items():
        raw = naslib_arch(key)
        theirs = (round(record["flops"]["score"] * 1e6), round(record["params"]["score"] * 1e6))
        ours = space.costs(raw)
        canonical = space.canonical(raw)
        if canonical == raw:
            live += 1
            live_equal += ours == theirs
            worst = max(worst, abs(ours[0] - theirs[0]) / 1e6)
            continue
        dead += 1
        pruned = [raw[k] for k in raw if raw[k] != canonical[k]]
        missing = tuple(sum(per_edge[op][i] for op in pruned) for i in (0, 1))
        dead_explained += tuple(o + m for o, m in zip(ours, missing)) == theirs
    print(f"{len(records)} archs of {NASLIB_FILE.name}, costs: nb201 on the paper-scale cell201 space")
    print(f"  no dead edge: {live_equal}/{live} equal in MACs = FLOPs and params (largest MACs gap {worst:.6f} M)")
    print(f"  dead edges:   {dead_explained}/{dead} differ by exactly the pruned dead edges' costs")
    return 0 if live_equal == live and dead_explained == dead else 1


if __name__ == "__main__":
    sys.exit(main())
