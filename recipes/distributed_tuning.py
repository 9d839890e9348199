r"""Run a KerasTuner search with one chief and N workers on this machine.

    keras-attention-distributed-tuning --workers 2 -- \
        --output runs/tune --algorithm random --trials 8

Everything after `--` is passed to `keras-attention-translate tune`. The
chief runs KerasTuner's oracle on `--port`; each worker asks it for trials.
On a GPU machine worker i sees only GPU i (`CUDA_VISIBLE_DEVICES`); on a
CPU the workers share the processors. Across machines, start the same
command on each host with `KERASTUNER_TUNER_ID` (`chief` on one, a
unique `tuner<i>` elsewhere), `KERASTUNER_ORACLE_IP` (the chief's address)
and `KERASTUNER_ORACLE_PORT` set: that is all this helper does.
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def visible_gpus():
    """The ids of the NVIDIA GPUs this process may use: those
    `CUDA_VISIBLE_DEVICES` names when it is set ("" or -1: none), else
    every one `nvidia-smi -L` lists. Whichever backend trains, so that
    processes are given their share before any of them loads it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [part.strip() for part in visible.split(",") if part.strip()]
        return ids[: ids.index("-1")] if "-1" in ids else ids
    try:
        output = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    listed = [line for line in output.splitlines() if line.startswith("GPU ")]
    return [str(index) for index in range(len(listed))]


def launch(workers, port, tune_args, log_dir, processes, command=None):
    """Start the chief and the workers, each appended to `processes` as
    `(tuner id, process, log file)` as it starts. Each runs `command` (a
    list; `keras-attention-translate tune` unless given) with `tune_args`."""
    command = command or [sys.executable, "-m", f"{__package__}.translate", "tune"]
    os.makedirs(log_dir, exist_ok=True)
    gpus = visible_gpus()
    for index, tuner_id in enumerate(["chief"] + [f"tuner{i}" for i in range(workers)]):
        env = dict(
            os.environ,
            KERASTUNER_TUNER_ID=tuner_id,
            KERASTUNER_ORACLE_IP="127.0.0.1",
            KERASTUNER_ORACLE_PORT=str(port),
        )
        if gpus and tuner_id != "chief":
            env["CUDA_VISIBLE_DEVICES"] = gpus[(index - 1) % len(gpus)]
        elif gpus:
            env["CUDA_VISIBLE_DEVICES"] = ""  # the chief only hands out trials
        log = open(os.path.join(log_dir, f"{tuner_id}.log"), "w")
        processes.append(
            (
                tuner_id,
                subprocess.Popen(
                    [*command, *tune_args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # Not in the terminal's process group: a Ctrl-C reaches
                    # them from `stop`, the workers before the chief.
                    start_new_session=True,
                ),
                log,
            )
        )
        if tuner_id == "chief":
            time.sleep(3)  # let the oracle start listening
    return processes


def stop(processes):
    """Ctrl-C to the workers and, once they have stopped, to the chief: a
    worker finishing its step still calls the chief's oracle, and waits
    for it while it is gone. Each stops before its next step and says so
    in its log; one still running after a minute is terminated. A Ctrl-C
    meanwhile is passed on (a second one stops them at once)."""
    workers = [process for tuner_id, process, _ in processes if tuner_id != "chief"]
    chief = [process for tuner_id, process, _ in processes if tuner_id == "chief"]
    before = signal.getsignal(signal.SIGINT)
    try:
        for group in (workers, chief):
            signal.signal(signal.SIGINT, lambda *_, group=group: interrupt(group))
            interrupt(group)
            for process in group:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.terminate()
                    process.wait()
    finally:
        signal.signal(signal.SIGINT, before)


def interrupt(processes):
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)


def supervise(processes, poll=0.5):
    """Wait for the chief and workers of `processes` to end; returns the
    ids of those that failed. A chief that fails (its data, or its
    oracle) ends the search: the workers, which would wait for it, are
    stopped (`stop`) and counted with it; so are workers that have all
    ended, one or more failed, while the chief still waits for them."""
    failed = []
    chief = next(process for tuner_id, process, _ in processes if tuner_id == "chief")
    workers = [process for tuner_id, process, _ in processes if tuner_id != "chief"]
    while any(process.poll() is None for _, process, _ in processes):
        ended = all(process.poll() is not None for process in workers)
        if chief.poll() not in (None, 0) or (ended and any(p.returncode for p in workers)):
            stop(processes)
            break
        time.sleep(poll)
    for tuner_id, process, log in processes:
        if process.wait() != 0:
            failed.append(tuner_id)
        log.close()
    return failed


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--logs", default="runs/tune-logs", help="one log file per process")
    parser.add_argument(
        "tune_args", nargs=argparse.REMAINDER, help="arguments of `translate tune`, after --"
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be >= 1; got {args.workers}")
    tune_args = args.tune_args[1:] if args.tune_args[:1] == ["--"] else args.tune_args
    processes, failed = [], []
    try:
        launch(args.workers, args.port, tune_args, args.logs, processes)
        failed = supervise(processes)
    except KeyboardInterrupt:
        stop(processes)
        sys.exit(
            f"interrupted: re-run the same command to continue the search (logs in {args.logs})"
        )
    for tuner_id, _, _ in processes:
        print(f"--- {tuner_id} ({os.path.join(args.logs, tuner_id + '.log')})")
    if failed:
        sys.exit(f"error: {', '.join(failed)} failed; see the logs in {args.logs}")
    with open(os.path.join(args.logs, "chief.log"), encoding="utf-8") as handle:
        print(handle.read()[-3000:])


if __name__ == "__main__":
    main()
