"""Timing helpers shared by the benchmark scripts: alternate the contenders,
repeat, take medians; report ratios measured in the same run."""

import statistics
import time

import keras


def time_call(fn, args, iters):
    """Mean seconds per call of `fn(*args)` over `iters` calls, waiting for
    the last result to be computed."""
    start = time.perf_counter()
    for _ in range(iters):
        result = fn(*args)
    keras.tree.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)
    return (time.perf_counter() - start) / iters


def alternate(contenders, repeats, iters):
    """Time each `(fn, args)` in turn, `repeats` rounds; returns one list of
    per-round seconds per contender (after one warm-up round)."""
    for fn, args in contenders:
        time_call(fn, args, 2)  # trace and warm up
    times = [[] for _ in contenders]
    for _ in range(repeats):
        for index, (fn, args) in enumerate(contenders):
            times[index].append(time_call(fn, args, iters))
    return times


def median_ratio(slower, faster):
    """Median over rounds of slower/faster (rounds paired in time)."""
    return statistics.median(s / f for s, f in zip(slower, faster))
