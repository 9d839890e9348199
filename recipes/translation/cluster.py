"""The `TF_CONFIG` cluster this process is a task of, read and checked in
one place (`cluster_task`), how long a worker waits for the chief's data
and for the cluster's other tasks (`worker_wait_seconds`,
`KERAS_ATTENTION_WORKER_WAIT`), and the bound on TensorFlow's own wait for
them (`bounded_wait`).

A `TF_CONFIG` that could make no working `MultiWorkerMirroredStrategy`
cluster is refused at once, in one line naming `TF_CONFIG`, what was
expected and what was given: otherwise TensorFlow, or a worker waiting
for a chief that no task is, could wait for the other tasks forever.
Standard library only: the checks run before TensorFlow is imported.
"""

import contextlib
import json
import math
import os
import subprocess
import sys
from typing import NamedTuple

from ..distributed_tuning import visible_gpus
from ..runs import UsageError

ENVIRONMENT = "TF_CONFIG"
WAIT_ENVIRONMENT = "KERAS_ATTENTION_WORKER_WAIT"
# The jobs of a MultiWorkerMirroredStrategy cluster ("ps" and "evaluator"
# tasks are another strategy's, and this recipe has no evaluator task).
JOBS = ("chief", "worker")
EXAMPLE = (
    '{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": "worker", "index": 0}}'
)
# How long a worker waits for the chief to prepare the data and vocabularies
# (the Ding corpus's take about two minutes on a 2-core CPU).
WORKER_WAIT_SECONDS = 900


class ClusterTask(NamedTuple):
    """This process's task in a checked `TF_CONFIG`: `cluster` maps each
    job to its addresses, `type` and `index` name the task."""

    cluster: dict
    type: str
    index: int

    @property
    def is_chief(self):
        """The "chief" task, or worker 0 when the cluster has no chief."""
        if self.type == "chief":
            return True
        return self.type == "worker" and self.index == 0 and "chief" not in self.cluster


def given(environ=None):
    """True when `TF_CONFIG` is set and not empty (checked or not)."""
    return bool((os.environ if environ is None else environ).get(ENVIRONMENT))


def cluster_task(environ=None):
    """The `ClusterTask` of `TF_CONFIG` (None when unset or empty), checked:
    `UsageError` naming `TF_CONFIG` when it is not JSON, not an object, has
    no cluster or an empty one, a job other than "chief" and "worker" or a
    job that is not a list of "host:port" addresses, more than one chief,
    no task, or a task whose type is not a job of the cluster or whose
    index is not one of its job's."""
    text = (os.environ if environ is None else environ).get(ENVIRONMENT)
    if not text:
        return None

    def refuse(problem):
        shown = text if len(text) <= 200 else text[:200] + "..."
        return UsageError(
            f"{ENVIRONMENT} {problem}; expected a cluster and this process's task, e.g. "
            f"{EXAMPLE} (given: {shown}); unset {ENVIRONMENT} to train on one machine"
        )

    try:
        config = json.loads(text)
    except ValueError as error:
        raise refuse(f"is not JSON ({error})") from None
    if not isinstance(config, dict):
        raise refuse(f"is a JSON {type(config).__name__}, not an object")
    cluster = config.get("cluster")
    if not isinstance(cluster, dict):
        got = "no" if cluster is None else f"a {type(cluster).__name__} as its"
        raise refuse(f'has {got} "cluster" (an object of jobs)')
    if not cluster:
        raise refuse('has an empty "cluster": no chief and no worker')
    for job, addresses in cluster.items():
        if job not in JOBS:
            raise refuse(
                f'has a job "{job}" in its cluster: MultiWorkerMirroredStrategy takes '
                '"chief" and "worker" jobs only'
            )
        if (
            not isinstance(addresses, list)
            or not addresses
            or not all(isinstance(address, str) and address for address in addresses)
        ):
            raise refuse(f'has a job "{job}" that is not a list of "host:port" addresses')
    if len(cluster.get("chief", [])) > 1:
        raise refuse(f"has {len(cluster['chief'])} chiefs: a cluster has one at most")
    task = config.get("task")
    if not isinstance(task, dict):
        got = "no" if task is None else f"a {type(task).__name__} as its"
        raise refuse(f'has {got} "task" (an object with this process\'s "type" and "index")')
    kind, index = task.get("type"), task.get("index", 0)  # TensorFlow's default index
    if kind not in cluster:
        raise refuse(
            f"has a task of type {json.dumps(kind)}, not one of its cluster's jobs "
            f"({', '.join(cluster)})"
        )
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(cluster[kind]):
        raise refuse(
            f"has a task index {json.dumps(index)}: its cluster's {kind} job has "
            f"{len(cluster[kind])} task(s), 0 to {len(cluster[kind]) - 1}"
        )
    return ClusterTask(cluster, kind, index)


def worker_wait_seconds(environ=None):
    """How long a task waits for the cluster's other tasks to connect
    (`bounded_wait`), and a worker for the chief's data:
    `WORKER_WAIT_SECONDS`, or `KERAS_ATTENTION_WORKER_WAIT` seconds (`UsageError` unless a finite
    number above 0: an infinite wait is never what a cluster needs)."""
    text = (os.environ if environ is None else environ).get(WAIT_ENVIRONMENT)
    if not text:
        return float(WORKER_WAIT_SECONDS)
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(
            f"{WAIT_ENVIRONMENT} {text!r}: expected the seconds a worker waits for the chief's "
            f"data, a number above 0 (default {WORKER_WAIT_SECONDS})"
        )
    return seconds


# The watchdog of `bounded_wait`: a process of its own, since the wait it
# bounds holds the GIL in C++ (no thread of the waiting process runs) and
# TensorFlow takes SIGTERM for its preemption notice. Arguments: the pid to
# end, the seconds, the line to write first.
WATCHDOG = """
import os, signal, sys, time
pid, seconds, line = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    if os.getppid() != pid:
        sys.exit(0)
print(line, file=sys.stderr, flush=True)
os.kill(pid, signal.SIGKILL)
"""


@contextlib.contextmanager
def bounded_wait(what, seconds):
    """Run the block; when it has not ended after `seconds`, a watchdog
    process writes one `error:` line to standard error, saying it waited
    that long for `what` and how to wait longer, and kills this process
    (SIGKILL: exit status 137). For TensorFlow's own wait for the other
    tasks of a cluster: `MultiWorkerMirroredStrategy()` blocks in C++ until
    every task has connected, holding the GIL and deaf to SIGTERM, so that
    nothing in this process can end it. The block must come before the
    process writes anything, so that being killed leaves nothing half done."""
    line = (
        f"error: waited {seconds:.0f}s for {what}: start every task of the {ENVIRONMENT} "
        f"cluster, each with its own task ({WAIT_ENVIRONMENT}=SECONDS waits longer)"
    )
    watchdog = subprocess.Popen(
        [sys.executable, "-c", WATCHDOG, str(os.getpid()), str(seconds), line],
        stdin=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        watchdog.kill()
        watchdog.wait()


def shares(devices, members, wrap=False):
    """`devices` split into `members` contiguous shares, as even as they go
    (the first shares get one more): [[0], [1]] for two cores and two
    members. With fewer devices than members, None for each (no share:
    every member gets everything), or with `wrap` one device each in turn:
    [[0], [1], [0], [1]] for two cores and four members."""
    devices = list(devices)
    if len(devices) < members:
        if wrap and devices:
            return [[devices[k % len(devices)]] for k in range(members)]
        return [None] * members
    size, extra = divmod(len(devices), members)
    result, start = [], 0
    for k in range(members):
        end = start + size + (k < extra)
        result.append(devices[start:end])
        start = end
    return result


def placements(members):
    """`(cores, gpus)`: the CPU cores (None: all of them) and the GPUs (None:
    none) of each of `members` local processes (`train --members`,
    `--workers`), shared out among them (`shares`). The GPUs are those
    this process may use (`distributed_tuning.visible_gpus`), whichever
    backend trains."""
    cores = [None] * members
    if hasattr(os, "sched_getaffinity"):
        cores = shares(sorted(os.sched_getaffinity(0)), members, wrap=True)
    visible = visible_gpus()
    gpus = shares(visible, members) if visible else [None] * members
    return cores, gpus
