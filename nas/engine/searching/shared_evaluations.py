"""Evaluations told again: a family's later members (and every process searching for one) tell
the record of an arch an earlier member evaluated instead of evaluating it again, marked
`reused_from` (that member's folder): the score and the weights are the family's."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from nas.core.arch import Arch, arch_id

REUSED = "reused_from"      # a member's record of an arch an earlier member evaluated: that member's folder
Evaluate = Callable[[Arch], Mapping[str, Any]]

__all__ = ["REUSED", "Evaluate", "SharedEvaluations"]


class SharedEvaluations:
    """Evaluations told again: `wrap(evaluate)` evaluates only archs `known` (arch_id -> an
    earlier record) lacks, and tells the earlier record again for the others, counting them.
    A family adds each finished member's records; each process of a member's search (spawned
    Optuna workers too, from `SearchRequest.reused`) wraps its own evaluate."""

    def __init__(self, known: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.known: dict[str, Mapping[str, Any]] = dict(known or {})
        self.reused = 0      # records told again by this process

    def add(self, records: list[dict[str, Any]], folder: str) -> None:
        """A finished member's records (`folder`: its folder's name)."""
        for record in records:
            self.known.setdefault(record["arch_id"], {**record, REUSED: record.get(REUSED, folder)})

    def wrap(self, evaluate: Evaluate) -> Evaluate:
        def shared(arch: Arch) -> Mapping[str, Any]:
            earlier = self.known.get(arch_id(arch))
            if earlier is None:
                return evaluate(arch)
            self.reused += 1
            return earlier
        return shared
