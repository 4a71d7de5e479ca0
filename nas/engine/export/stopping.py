"""SIGTERM during an export: one line saying that a rerun resumes, exit 143 (as `nas train` says)."""
from __future__ import annotations

from contextlib import AbstractContextManager

from nas.core.stopping import sigterm_raises

# What an export stopped by SIGTERM says after the signal's name.
STOPPED = ("the export stopped before its files were written (an earlier export in that folder is left as it "
           "was); run the same nas export again: a fine-tune resumes from its last saved state")


def stopped_by_sigterm() -> AbstractContextManager[None]:
    """Inside the block (in the main thread), SIGTERM raises `Interrupted` saying `STOPPED`: the
    fine-tune's saved state and an earlier export stay, a temporary folder is cleaned up."""
    return sigterm_raises(STOPPED)
