"""Hypothesis profiles of the fuzz tests, and how many cases each test gets.

``ci`` (the default, part of the normal suite): a few thousand cases in all, derandomized so
that a run is repeatable. ``fuzz`` (``make fuzz``): 100,000 cases, random, so that each run
tries new ones; ``dev``: a few hundred, to try a change. Pick one with ``THINK_FUZZ_PROFILE``.
Each test takes a share of its profile's total, weighted by how much one of its cases costs.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Final

from hypothesis import HealthCheck, settings

#: Cases in all, per profile.
TOTALS: Final = {"ci": 3_000, "fuzz": 100_000, "dev": 300}

# Cases are driven over real sockets: their time varies with the machine, so no deadline.
# Generated frames are big by design (huge strings, deep nesting): those checks are off too.
_COMMON: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                              HealthCheck.filter_too_much],
    # A failure also prints the @reproduce_failure blob that replays it exactly.
    "print_blob": True,
}
settings.register_profile("ci", derandomize=True, database=None, **_COMMON)
# Failures found are kept in Hypothesis' example database, .hypothesis/ (not in the repository),
# and tried first by the next `make fuzz`.
settings.register_profile("fuzz", **_COMMON)
settings.register_profile("dev", derandomize=True, database=None, **_COMMON)

PROFILE: Final = os.environ.get("THINK_FUZZ_PROFILE", "ci")
if PROFILE not in TOTALS:
    raise RuntimeError(f"THINK_FUZZ_PROFILE must be one of {', '.join(TOTALS)}; got {PROFILE!r}")
settings.load_profile(PROFILE)


def share(weight: float) -> settings:
    """Settings for a test that gets ``weight`` of the profile's cases (the weights add up to 1)."""
    return settings(max_examples=max(1, round(TOTALS[PROFILE] * weight)))


#: Cases run, per test: printed at the end of the session (tests/fuzz/conftest.py).
CASES: Counter[str] = Counter()
