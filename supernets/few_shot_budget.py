"""The step budget of a few-shot run: how many optimiser steps it takes, and where in the
learning-rate schedule each of them falls (see `supernets.few_shot`, "Budget").

A run of a T-step schedule is cut by its splits into segments. Segment j starts at schedule
step `position` and optimiser step `start`, and advances the schedule's clock by 1/`clock` per
optimiser step: `clock` is the number of sub-supernets under the `per_child` budget (each
trains every schedule step of the segment) and 1 under `shared`. So

    start_{j+1} = start_j + clock_j * (position_{j+1} - position_j),
    total = start_last + clock_last * (T - position_last).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Segment:
    """Schedule steps from `position` on, run from optimiser step `start`, `clock` optimiser
    steps per schedule step."""

    position: int
    start: int
    clock: int


def plan(split_steps: Sequence[int], part_counts: Sequence[int], branching: int, per_child: bool) -> list[Segment]:
    """The segments of a run splitting after schedule steps `split_steps`.

    Args:
        split_steps: Increasing schedule steps of the splits.
        part_counts: Sub-supernets after each split already taken; later splits are assumed
            to split every sub-supernet into `branching` (the trainer asks again after each).
        branching: Groups per split.
        per_child: Each child trains the rest of the schedule (else they share it).
    """
    segments, parts = [Segment(0, 0, 1)], 1
    for index, position in enumerate(split_steps):
        parts = part_counts[index] if index < len(part_counts) else parts * branching
        last = segments[-1]
        segments.append(Segment(position, last.start + last.clock * (position - last.position),
                                parts if per_child else 1))
    return segments


def total_steps(segments: Sequence[Segment], schedule_steps: int) -> int:
    """Optimiser steps of the whole run."""
    last = segments[-1]
    return last.start + last.clock * (schedule_steps - last.position)


def segment_of(segments: Sequence[Segment], step: int) -> Segment:
    """The segment optimiser step `step` belongs to (a split's step starts its segment)."""
    return next(s for s in reversed(segments) if s.start <= step)


def schedule_position(segments: Sequence[Segment], step: int) -> float:
    """The schedule step of optimiser step `step` (an int where it falls on one)."""
    segment = segment_of(segments, step)
    whole, rest = divmod(step - segment.start, segment.clock)
    return segment.position + whole if rest == 0 else segment.position + (step - segment.start) / segment.clock
