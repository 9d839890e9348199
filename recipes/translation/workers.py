"""`train --workers N`: one model trained by N worker processes of this
machine, a `MultiWorkerMirroredStrategy` cluster on loopback.

Each worker is started with the `TF_CONFIG` a cluster of machines would
give it (`{"cluster": {"worker": [...]}, "task": {"type": "worker",
"index": k}}`) and runs `training.train`: the code path of a TF_CONFIG
cluster, nothing of its own. Worker 0 is the chief: it locks and writes
the run in `--output` (its lines are this command's); worker k waits for
the chief's data and vocabularies and keeps its checkpoints and its
output (`output.log`) in `<output>/worker-k`.

The batch. `--batch-size` and `--batch-tokens` size the global batch, as
in one process: every worker makes the same batches (the same seed, the
same shuffle), each batch is split among the workers (tf.data's
`AutoShardPolicy.DATA`: each worker keeps its part of every batch), the
loss is divided by the global batch's token count and the gradients are
summed over the workers (`adapt_for_distribution`). N workers so train
the model one process trains, up to float rounding, with dropout off:
a worker draws the dropout masks of its part of the batch, not the
masks one process draws for the whole batch.

The machine. Each worker gets a contiguous share of the cores this
process may run on (`cluster.shares`; `os.sched_setaffinity`, before
TensorFlow starts) and TensorFlow's intra- and inter-op thread pools of
that many threads; with at least as many GPUs as workers, a share of
the GPUs (`CUDA_VISIBLE_DEVICES`). The cluster's ports are free
loopback ports below the kernel's ephemeral range, where neither
outgoing connections nor other programs' "any free port" take them.

Supervision. The workers run in their own process group: Ctrl-C reaches
this process, which passes it on to every worker (they stop between two
steps, as one process does; a second Ctrl-C stops them at once) and
stops those still running a minute later. When a worker dies, the others
would wait for it forever in the next gradient exchange: this process
stops them and fails with a message naming the worker and its output. A
worker whose parent dies is stopped by the kernel (`PR_SET_PDEATHSIG`).

Resuming. Before the workers start, the chief's resumable state (its
backup, best epoch, kept epochs) is copied to every other worker, so
that all resume from the same epoch whatever the earlier number of
workers: the workers' weights are the same at every epoch's end.
"""

import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import sys
import time

from .. import run_folders, runs
from ..runs import UsageError, keras_backend
from .cluster import given, placements
from .corpus import CorpusError

# The chief's files a worker resumes from (`_share_chief_state`).
RESUMABLE = ("backup", "best.weights.h5", "best.weights.h5.json", "checkpoints")
LOG_NAME = "output.log"  # a worker's output, in its folder
STOP_SECONDS = 60  # after Ctrl-C, or after the chief finished: then the workers are stopped


def worker_folder(output, index):
    """The folder of worker `index` (its checkpoints and output): the
    chief's is `output` itself, as `training._inputs` has it."""
    return output if index == 0 else os.path.join(output, f"worker-{index}")


def free_ports(count, rng=None):
    """`count` distinct TCP ports that 127.0.0.1 can bind now, drawn below
    the kernel's ephemeral range (`ip_local_port_range`): ports there are
    taken only by a program asking for that very port."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
            low = int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = rng or random.SystemRandom()
    candidates = rng.sample(range(10_000, low), min(2000, low - 10_000))
    found = []
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("", port))  # every address: the worker's server listens on all
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise UsageError(f"--workers {count}: found no {count} free ports below {low}")


def check_workers(config):
    """`UsageError` for what `--workers` above 1 cannot do."""
    flag = f"--workers {config.workers}"
    if keras_backend() != "tensorflow":
        raise UsageError(
            f"{flag} starts a cluster of TensorFlow processes, and Keras runs on "
            f"{keras_backend()}: leave it out (one process trains on every local device)"
        )
    if given():
        raise UsageError(
            f"{flag} starts a cluster of this machine's processes; TF_CONFIG already makes "
            "this process a worker of one: leave out --workers"
        )
    if config.members > 1:
        raise UsageError(f"{flag} trains one model: leave out --members {config.members}")
    if config.time_budget:
        raise UsageError(
            f"--time-budget trains in one process: {flag} workers could each read the clock "
            "differently and stop at different steps; give --epochs instead"
        )
    if config.distill_from:
        raise UsageError(
            f"--distill-from translates the training split in one process: leave out {flag}"
        )
    if config.update_freq and config.update_freq > 1:
        raise UsageError(
            f"--update-freq {config.update_freq} trains in one process: Keras's gradient "
            f"accumulation cannot synchronise {flag}; a larger --batch-tokens gives the "
            "larger batch"
        )


def train_workers(config, log=print):
    """Train the run in `config.output` with `config.workers` local worker
    processes (see the module docstring); returns the run's folder."""
    from .training import check_inputs, train_settings

    check_workers(config)
    train_settings(config)  # a bad setting refused here, not in N processes
    check_inputs(config)
    output = config.output
    if os.path.isdir(output):  # the chief takes the lock again
        with run_folders.locked(output, "train --workers"):
            if config.overwrite and os.path.exists(os.path.join(output, run_folders.RUN_FILE)):
                run_folders.delete_run(output)  # now: before a worker writes its output there
                log(f"--overwrite: deleted the earlier run in {output}")
            else:
                _share_chief_state(output, config.workers)
    cores, gpus = placements(config.workers)
    ports = free_ports(config.workers)
    cluster = [f"127.0.0.1:{port}" for port in ports]
    logs = [None] + [
        os.path.join(worker_folder(output, k), LOG_NAME) for k in range(1, config.workers)
    ]
    context = multiprocessing.get_context("spawn")
    processes = []
    try:
        for index in range(config.workers):
            worker = config.replace(
                workers=1,
                overwrite=False,
                verbose=config.verbose if index == 0 else 2,  # no progress bars in a log
            )
            process = context.Process(
                target=_run_worker,
                args=(worker, index, cluster, cores[index], gpus[index], logs[index], os.getpid()),
                name=f"worker-{index}",
            )
            process.start()
            processes.append(process)
        log(_cluster_line(output, ports, cores, processes))
        _supervise(processes, logs, log)
    finally:
        _stop(processes)
    return output


def _cluster_line(output, ports, cores, processes):
    """What the command says of its cluster once the workers started."""
    placed = (
        f"worker {k} (process {process.pid}, "
        + (f"cores {cores[k]})" if cores[k] else "all cores)")
        for k, process in enumerate(processes)
    )
    return (
        f"{len(processes)} workers on loopback ports {', '.join(map(str, ports))}: "
        + ", ".join(placed)
        + f"; worker 0's lines follow, worker k's are in {output}/worker-k/{LOG_NAME}"
    )


def _share_chief_state(output, count):
    """Copy the chief's resumable files (`RESUMABLE`) over those of workers
    1 to `count - 1`, and remove theirs that the chief lacks."""
    for index in range(1, count):
        folder = worker_folder(output, index)
        for name in RESUMABLE:
            source, target = os.path.join(output, name), os.path.join(folder, name)
            if os.path.isdir(target):
                shutil.rmtree(target)
            elif os.path.exists(target):
                os.remove(target)
            if os.path.isdir(source):
                shutil.copytree(source, target)
            elif os.path.exists(source):
                os.makedirs(folder, exist_ok=True)
                shutil.copy2(source, target)


def _follow_parent(parent):
    """Leave the parent's process group (Ctrl-C reaches the parent, which
    passes it on) and ask the kernel to stop this process when the parent
    dies (Linux); exit at once when it is gone already."""
    os.setpgrp()
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)


def _run_worker(config, index, cluster, cores, gpus, log_path, parent):
    """A worker's process: its `TF_CONFIG`, its share of the machine and
    thread pools of that size, its output into `log_path` (None: the
    parent's), then `train`; a refusal is one `error:` line and exit
    status 2 (`runs.command_errors`, as the command line's)."""
    _follow_parent(parent)
    if log_path is not None:
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        handle = open(log_path, "a", buffering=1)
        handle.write(f"--- worker {index}, process {os.getpid()}, {time.ctime()}\n")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            os.dup2(handle.fileno(), stream.fileno())  # TensorFlow's C++ lines too
    task = {"type": "worker", "index": index}
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": cluster}, "task": task})
    if cores is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)  # before TensorFlow sizes its thread pools
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in gpus)
    runs.import_tensorflow_quietly()
    if cores is not None:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(len(cores))
        tf.config.threading.set_inter_op_parallelism_threads(len(cores))

    from .training import train  # TensorFlow: only once the process has its share

    interrupted = "interrupted: the same command resumes the run from its last completed epoch"
    with runs.command_errors(lambda: interrupted, (ValueError, CorpusError, OSError)):
        train(config, lambda message: print(message, flush=True))


def _supervise(processes, logs, log):
    """Wait for the worker `processes` to end. A worker that fails stops
    the others (`_stop`) and raises `UsageError` naming it and its output
    (`logs[k]`; None: the lines above); workers still running
    `STOP_SECONDS` after the chief finished are stopped. Ctrl-C is passed
    on to the workers (`_interrupt`) and raised again."""
    from multiprocessing.connection import wait

    pending = dict(enumerate(processes))
    deadline = None
    try:
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ended = wait([p.sentinel for p in pending.values()], timeout)
            if not ended:  # the chief finished long ago: the others are stuck
                log(f"stopping worker(s) {sorted(pending)}: still running after the chief ended")
                return
            for index in [k for k, p in pending.items() if p.sentinel in ended]:
                process = pending.pop(index)
                process.join()
                if process.exitcode != 0:
                    _stop(list(pending.values()))
                    raise UsageError(_failure(index, process.exitcode, logs[index]))
                if index == 0:
                    deadline = time.monotonic() + STOP_SECONDS
    except KeyboardInterrupt:
        _interrupt(list(pending.values()))
        raise


def _failure(index, code, log_path):
    """What the command says when worker `index` ended with status `code`."""
    how = f"was killed by signal {-code}" if code < 0 else f"stopped with exit status {code}"
    where = "see its lines above"
    if log_path is not None:
        where = f"see {log_path}"
        lines = _tail(log_path)
        errors = [line for line in lines if line.startswith("error:")]
        if errors or lines:
            where += f" (its last line: {(errors or lines)[-1]})"
    if code == 2:  # a refusal (`runs.command_errors`): its line says what to change
        return f"worker {index} {how}, and the other workers were stopped: {where}"
    return (
        f"worker {index} {how}, and the other workers were stopped: {where}; "
        "the same command resumes the run from its last completed epoch"
    )


def _tail(path, size=4096):
    """The last lines of the file at `path` (none when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - size))
            return [line for line in handle.read().decode("utf-8", "replace").splitlines() if line]
    except OSError:
        return []


def _interrupt(processes):
    """Pass Ctrl-C on to the running `processes` and give them
    `STOP_SECONDS` to stop between two steps (a second Ctrl-C is passed on
    too: they stop at once), then stop the rest."""
    deadline = time.monotonic() + STOP_SECONDS
    signalled = 0
    while signalled < 3:
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGINT)
        signalled += 1
        try:
            for process in processes:
                process.join(max(0.0, deadline - time.monotonic()))
            break
        except KeyboardInterrupt:
            continue
    _stop(processes)


def _stop(processes, seconds=10):
    """Terminate the `processes` still running, and kill those that are
    still there `seconds` later."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(seconds)
        if process.is_alive():
            process.kill()
            process.join()
