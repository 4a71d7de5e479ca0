"""The score `auto` means for a space without a fidelity summary (`DEFAULT_SCORES`, keyed by space
name; `GENERIC_DEFAULT` for other spaces), and where the figures that chose it live. Searches
(`nas.engine.searching.score`) use it, and `nas fidelity` reports it and its fusion with the
supernet by default, so that the evidence `auto` reads afterwards covers what it would use without."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


EVIDENCE = "benchmarks/notes/17-default-path.md gives the held-out figures and their date"


@dataclass(frozen=True)
class DefaultScore:
    """A score for `auto` without a fidelity summary: `benchmarks/default_score.py` chose it on
    the CHOOSE half of the committed ground truths of `configs` and graded it on their REPORT
    half (the figures live in its benchmark note, not here: `EVIDENCE`); `fingerprint`: the space
    that ground truth is of (empty for the generic default); `caveat`: what the grading says
    that a user of the default should know; `also`: other evidence that chose the same score,
    and where its figures are; `supernet`: what the space's supernets were found to be worth for
    ranking, where that was measured (said on the short line too, so `nas search` and `nas summary`
    say it)."""

    spec: str
    configs: str
    fingerprint: str = ""
    caveat: str = ""
    also: str = ""
    supernet: str = ""

    @property
    def supernet_headline(self) -> str:
        """`supernet` up to its first colon: what the short line says of the supernet."""
        return self.supernet.split(":")[0]

    def evidence(self) -> str:
        caveat = f" ({self.caveat})" if self.caveat else ""
        also = f"; {self.also}" if self.also else ""
        return (f"chosen on half of the committed ground truth of {self.configs}, graded on the other "
                f"half{caveat}; benchmarks/default_score.py, {EVIDENCE}{also}")


SUPERNET_RANKS_BELOW_FREE = ("on this space the supernet serves the weights, not the ranking: trained on CIFAR-10, "
                             "PA&DA's supernet ranked NAS-Bench-201's networks at Kendall 0.23-0.36, GM's at 0.05 and SPOS's at 0.01, "
                             "against 0.72 for this free score, and fused with it lowered it (benchmarks/notes/27-nb201-seed-methods.md, "
                             "benchmarks/notes/30-nb201-gm-bn.md)")

# Specs in their canonical spelling (`estimators.canonical_spec`), as searches record them.
DEFAULT_SCORES: dict[str, DefaultScore] = {
    "cell201": DefaultScore("jacov+macs", "fashion_mnist_cell201", "1c4fd9d48cb1",
                            "MACs alone ranked that half better within MACs bins",
                            "NAS-Bench-201's CIFAR-10 accuracies chose it too (on NASLib's 725 archs, graded on "
                            "1,000 others; benchmarks/nb201_proxies.py, benchmarks/notes/21-nb201-yardstick.md)",
                            SUPERNET_RANKS_BELOW_FREE),
    "mobilenetv3": DefaultScore("naswot", "fashion_mnist_mbv3", "e01b62e6a393",
                                "no candidate, MACs included, ranked that half better than chance"),
}
GENERIC_DEFAULT = DefaultScore("macs+naswot+synflow", "the shipped spaces")


def default_score(space: Any) -> tuple[str, str]:
    """(spec, why) of `auto` without a fidelity summary for `space` (an `ArchSpace`, or None)."""
    name = getattr(space, "name", None)
    chosen = DEFAULT_SCORES.get(name)
    if chosen is None:
        return GENERIC_DEFAULT.spec, (f"the default for a space without a committed ground truth (the best mean "
                                      f"over the shipped spaces), {GENERIC_DEFAULT.evidence()}")
    variant = ""
    if chosen.fingerprint != space.fingerprint():
        variant = f"; this run's {name} space has other choices than that one (fingerprint {space.fingerprint()})"
    return chosen.spec, f"the default for {name}, {chosen.evidence()}{variant}"
