"""Each probe's own seed, derived from the course's seed by the supervisor (the worker is handed the results only).

Student code sees the seed of the probe that calls it (`torch.initial_seed()` returns it), so the derivation must
not lead back to the course's seed, nor to another probe's: a fast hash of a seed that can be guessed (a date, a
small number) could be inverted by trying every candidate. The course's seed is first stretched with scrypt (memory-
hard: one guess costs tens of milliseconds and 16 MiB), once per process, and each probe's seed is an HMAC of its
exercise and name under that key.
"""

from __future__ import annotations

import functools
import hashlib
import hmac

SALT = b"transformer-grader: probe seeds"
SEED_BITS = 62


@functools.lru_cache(maxsize=8)
def _key(course_seed: int) -> bytes:
    return hashlib.scrypt(str(course_seed).encode(), salt=SALT, n=1 << 14, r=8, p=1, dklen=32)


def probe_seed(course_seed: int, exercise: str, probe: str) -> int:
    """The probe's seed: stable for a course seed, different for every probe, and no way back to the course seed."""
    digest = hmac.digest(_key(course_seed), f"{exercise}:{probe}".encode(), "sha256")
    return int.from_bytes(digest[:8], "little") & ((1 << SEED_BITS) - 1)


def probe_seeds(course_seed: int, exercise: str, probes: list[str]) -> dict[str, int]:
    return {name: probe_seed(course_seed, exercise, name) for name in probes}
