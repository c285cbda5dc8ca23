"""Reconnection backoff: exponential, capped, with jitter that differs per worker.

The jitter is derived from a hash of the worker id and the attempt number
instead of a random source: a given worker backs off the same way every time
(reproducible in tests and logs), while a fleet of workers that lost the
same server spreads its reconnections out instead of stampeding it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

BACKOFF_INITIAL_S: Final = 0.05
"""First delay after a failure."""
BACKOFF_MAX_S: Final = 5.0
"""Upper bound of one delay."""
BACKOFF_JITTER_FRACTION: Final = 0.5
"""Up to this fraction of each delay is taken off, per worker and attempt."""
_ATTEMPT_EXPONENT_MAX: Final = 32
"""Past this many attempts the delay is the cap anyway (keeps 2**n small)."""


def unit_hash(seed: str, n: int) -> float:
    """A value in [0, 1) fixed by ``seed`` and ``n``, spread like a uniform draw."""
    digest = hashlib.blake2b(f"{seed}:{n}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


@dataclass(slots=True)
class Backoff:
    """Delays for successive failures; :meth:`reset` after a success."""

    seed: str
    """Decorrelates workers (the worker id)."""
    initial_s: float = BACKOFF_INITIAL_S
    max_s: float = BACKOFF_MAX_S
    jitter_fraction: float = BACKOFF_JITTER_FRACTION
    attempt: int = 0
    """Failures since the last success."""
    draws: int = 0
    """Delays handed out so far (feeds the jitter, never reset)."""

    def next_delay_s(self) -> float:
        """The delay before the next try; counts one more failure."""
        exponent = min(self.attempt, _ATTEMPT_EXPONENT_MAX)
        base = min(self.max_s, self.initial_s * 2.0**exponent)
        self.attempt += 1
        self.draws += 1
        delay = base * (1.0 - self.jitter_fraction * unit_hash(self.seed, self.draws))
        assert 0.0 < delay <= self.max_s
        return delay

    def reset(self) -> None:
        """A call succeeded: the next failure starts from the initial delay again."""
        self.attempt = 0
