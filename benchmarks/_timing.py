"""Timing shared by the benchmark scripts (run as `python benchmarks/bench_*.py`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_ms(step: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    """Median milliseconds of `repeats` calls of `step`, after `warmup` untimed calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)
