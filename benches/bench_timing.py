"""Timing shared by the Python benchmarks: interleaved rounds, medians.

This machine is shared and noisy: a burst of load hits whatever runs at that moment. Timing
every competitor of a row once per round, round after round, and taking each one's median
makes a burst hit all of them alike, so the ratios hold even when the nanoseconds do not.
"""

from __future__ import annotations

import statistics
import time
import timeit


def call_timer(fn, args) -> timeit.Timer:
    """A timer for `fn(*args)` written out as a call with len(args) names, so the loop pays
    for the call being measured and nothing else (no lambda, no argument unpacking)."""
    names = [f"a{i}" for i in range(len(args))]
    return timeit.Timer(f"f({', '.join(names)})", globals={"f": fn, **dict(zip(names, args))})


def calls_per_sample(timer: timeit.Timer, sample_seconds: float, warm_seconds: float) -> int:
    """Warms `timer` up for `warm_seconds` (caches, allocator arenas and the CPU's clock settle:
    the first few hundred thousand calls of a fresh process measure up to 1.7x slower) and
    returns how many calls fill `sample_seconds`."""
    calls, spent, end = 0, 0.0, time.perf_counter() + warm_seconds
    n = 10
    while True:
        spent += timer.timeit(n)
        calls += n
        if time.perf_counter() >= end:
            return max(1, int(sample_seconds * calls / spent))
        n = min(n * 2, 10_000)


def interleaved(calls, rounds: int, sample_seconds: float, warm_seconds: float) -> list[float]:
    """Median ns per call of each `(fn, args)` in `calls`, timed in alternation for `rounds`."""
    timers = [call_timer(fn, args) for fn, args in calls]
    numbers = [calls_per_sample(t, sample_seconds, warm_seconds) for t in timers]
    samples = [[] for _ in timers]
    for _ in range(rounds):
        for timer, n, s in zip(timers, numbers, samples):
            s.append(timer.timeit(n) / n * 1e9)
    return [statistics.median(s) for s in samples]


def cell(value) -> str:
    return f"{value:.0f}" if isinstance(value, float) else str(value)


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if isinstance(a, float) and isinstance(b, float) else "-"
