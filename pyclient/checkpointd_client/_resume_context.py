"""The claim token a resume worker lends the fastaiagent adapter for one resume.

fastaiagent's resume claims the pending interrupt itself (``delete_pending_interrupt_atomic``).
A worker that re-drives a run after another worker died mid-resume must win that claim again,
although the pending row is gone: so every resume of one pause claims with the same token,
derived from the pause, and a repeated claim with a token gets the same row back (I3).
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["CLAIM_TOKEN", "claim_token_for"]

#: Set by the resume worker around one resume; None means a fresh token per claim.
CLAIM_TOKEN: ContextVar[str | None] = ContextVar("checkpointd_claim_token", default=None)


def claim_token_for(checkpoint_id: str) -> str:
    """The token every resume of the pause written with ``checkpoint_id`` claims with."""
    return f"resume:{checkpoint_id}"
