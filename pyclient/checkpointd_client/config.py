"""Client configuration: the default target and the retry policy.

Targets are handed to gRPC unchanged, so every form gRPC understands works:
``unix:///run/checkpointd.sock`` (absolute path), ``unix:relative/path.sock``,
``host:port`` and ``dns:///host:port``.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass

__all__ = ["DEFAULT_TARGET", "TARGET_ENV_VAR", "RetryPolicy", "resolve_target"]

#: Where the client connects when neither an argument nor ``CHECKPOINTD_TARGET`` names a target.
DEFAULT_TARGET = "127.0.0.1:7470"
#: The environment variable that overrides :data:`DEFAULT_TARGET`.
TARGET_ENV_VAR = "CHECKPOINTD_TARGET"


def resolve_target(target: str | None) -> str:
    """Return ``target`` if given, else ``$CHECKPOINTD_TARGET`` if set, else the default.

    The environment is read at each call (that is, when a client is built), not at import.
    """
    if target:
        return target
    return os.environ.get(TARGET_ENV_VAR) or DEFAULT_TARGET


def _check_seconds(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How a call that failed with ``UNAVAILABLE`` is retried (contract P3).

    Only ``UNAVAILABLE`` is retried: it means the server or its store could not be reached.
    A retry reuses the request's ``request_id``, ``checkpoint_id`` and ``claim_token``, so it
    is never a second write (C2, I3). Every attempt, and every wait between attempts, fits
    inside the call's one overall deadline: the client stops retrying when the next wait
    would pass it, and raises the last error.

    The wait before retry ``n`` (1 for the first retry) is
    ``min(max_backoff, initial_backoff * multiplier ** (n - 1) * (1 + U(0, jitter)))``, so it
    always lies between ``initial_backoff`` and ``max_backoff``.
    """

    max_attempts: int = 5
    """The most attempts per call, the first included. 1 turns retrying off."""
    initial_backoff: float = 0.05
    """The wait, in seconds, before the first retry (before jitter)."""
    max_backoff: float = 2.0
    """The longest wait, in seconds, between two attempts (jitter included)."""
    multiplier: float = 2.0
    """The factor by which the wait grows after each retry."""
    jitter: float = 0.25
    """The largest random extra on each wait, as a fraction of it (0.25 = up to 25 % more)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        _check_seconds("initial_backoff", self.initial_backoff)
        _check_seconds("max_backoff", self.max_backoff)
        if self.max_backoff < self.initial_backoff:
            raise ValueError(
                f"max_backoff ({self.max_backoff}) must be >= initial_backoff "
                f"({self.initial_backoff})"
            )
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1.0):
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier!r}")
        if not (math.isfinite(self.jitter) and 0.0 <= self.jitter <= 1.0):
            raise ValueError(f"jitter must be between 0 and 1, got {self.jitter!r}")

    def backoff(self, retry: int, *, rng: random.Random | None = None) -> float:
        """Return the wait in seconds before retry number ``retry`` (1 for the first retry)."""
        if retry < 1:
            raise ValueError(f"retry numbers start at 1, got {retry}")
        # Cap the exponent's growth before multiplying, so a large retry number cannot overflow.
        base = self.initial_backoff
        for _ in range(retry - 1):
            base *= self.multiplier
            if base >= self.max_backoff:
                break
        draw = (rng or random).random()
        return min(self.max_backoff, base * (1.0 + self.jitter * draw))


#: The policy a client uses when none is given.
DEFAULT_RETRY_POLICY = RetryPolicy()
