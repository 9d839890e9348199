"""Timing helpers shared by the benchmark scripts: alternate the contenders,
repeat, take medians; report ratios measured in the same run."""

import json
import statistics
import subprocess
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


class PeerWorker:
    """A peer timed in its own virtualenv: a worker process that answers one
    JSON request line (`{"op": "time", ...}`) with one JSON line, and first
    writes a `{"ready": ...}` line, kept as `self.ready`. Its stderr goes to
    `log_path`, whose end is shown if the worker stops."""

    def __init__(self, command, log_path, name, env=None):
        self.name = name
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        self.ready = self._read()

    def _read(self):
        line = self.process.stdout.readline()
        if not line:
            self.log.flush()
            with open(self.log.name) as stream:
                raise RuntimeError(f"{self.name} stopped:\n" + stream.read()[-3000:])
        return json.loads(line)

    def request(self, **request):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self):
        self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
        self.process.stdin.flush()
        self.process.wait(timeout=60)
        self.log.close()
