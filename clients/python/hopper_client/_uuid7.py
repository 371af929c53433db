"""UUIDv7 job ids (RFC 9562), increasing within this process.

The protocol asks for UUIDv7 ids: the server lists jobs newest first by id, pages with
``before=<id>``, and runs jobs of one priority submitted at the same instant (a batch) in id
order. So ids made in the same millisecond must still increase: the 74 bits after the
timestamp start random each millisecond (with their top bit clear, leaving room to count)
and count up by one within it (RFC 9562 §6.2, method 2). If the clock steps back, the last
timestamp is kept and the count goes on; if the count would overflow, the timestamp moves
one millisecond forward. So the order holds whatever the clock does.

Python 3.11 has no ``uuid.uuid7``; this is the few lines it takes, not a dependency.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from typing import Callable

_RANDOM_BITS = 74
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1
_VERSION = 0x7
_VARIANT = 0b10


class Uuid7Generator:
    """Makes increasing UUIDv7s; thread-safe. ``clock`` gives Unix milliseconds."""

    def __init__(self, clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_random = 0

    def _next_fields(self) -> tuple[int, int]:
        """The (milliseconds, 74 random-or-counted bits) of the next id."""
        now_ms = self._clock()
        with self._lock:
            if now_ms > self._last_ms:
                self._last_ms = now_ms
                self._last_random = secrets.randbits(_RANDOM_BITS - 1)
            elif self._last_random < _RANDOM_MAX:
                self._last_random += 1
            else:
                self._last_ms += 1
                self._last_random = secrets.randbits(_RANDOM_BITS - 1)
            return self._last_ms, self._last_random

    def __call__(self) -> str:
        """A new UUIDv7 as hyphenated lower-case text, greater than every one this
        generator made before."""
        ms, random = self._next_fields()
        rand_a = random >> 62  # 12 bits
        rand_b = random & ((1 << 62) - 1)
        value = (
            (ms & ((1 << 48) - 1)) << 80
            | _VERSION << 76
            | rand_a << 64
            | _VARIANT << 62
            | rand_b
        )
        return str(uuid.UUID(int=value))


#: The process's generator: every id the client makes comes from it.
uuid7 = Uuid7Generator()
