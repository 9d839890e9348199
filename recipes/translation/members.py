"""`train --members N`: N models of one run, trained at the same time, one
process each on its own share of the machine, for decoding as an ensemble.

A single training process keeps a 2-core CPU only partly busy; two
processes pinned to a core each get 1.05-1.3x its work done (BENCHMARKS.md,
"Where the demo's training time goes", and RESULTS.md, "Two members in the
hour"), so each member gets about half a lone run's epochs: members pay off
where each still fits enough of them. Member 1 trains in `--output`
itself, member k in `<output>/members/k`. The data split and the
vocabularies are prepared once, in `--output`, and copied into every
member's folder, so that each member is a whole run (usable alone with
`--output`) and all of them share one vocabulary, as an ensemble must.
Member k's seed is `--seed` + k - 1; every other setting is the same.

Each member gets a contiguous share of the CPU cores this process may run
on (`os.sched_setaffinity`, Linux; with fewer cores than members, one core
each in turn: four members on two cores run two to a core, rather than
every member's thread pools sized for, and contending for, both) and,
when the machine has at least as many GPUs as members, a share of the
GPUs (`CUDA_VISIBLE_DEVICES`). Members are
`multiprocessing` "spawn" processes: none inherits this process's
TensorFlow. Re-running the command resumes the members that did not
finish and leaves the finished ones alone. Decode them together with
`--output OUTPUT --ensemble OUTPUT/members/2 ...`.
"""

import multiprocessing
import os
import sys

from .. import run_files, run_folders, runs
from ..runs import UsageError
from .cluster import given, placements
from .corpus import CorpusError
from .data import vocabulary_paths
from .trained_run import finished


def member_folders(output, members):
    """The run folders of `members` members of the run in `output`."""
    return [output] + [os.path.join(output, "members", str(k)) for k in range(2, members + 1)]


class Prefixed:
    """A text stream that writes every line to `stream` after `prefix`."""

    def __init__(self, stream, prefix):
        self.stream, self.prefix, self.line_start = stream, prefix, True

    def write(self, text):
        for piece in text.splitlines(keepends=True):
            if self.line_start:
                self.stream.write(self.prefix)
            self.stream.write(piece)
            self.line_start = piece.endswith("\n")
        return len(text)

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding: the stream's
        return getattr(self.stream, name)


def _train_member(config, number, cores, gpus):
    """A member's process: its share of the machine, then `train` with
    every line it writes prefixed by its number; a refusal is one `error:`
    line and exit status 2 (`runs.command_errors`, as the command line's)."""
    if cores is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)  # before TensorFlow sizes its thread pools
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in gpus)
    # members that share a GPU: JAX takes memory as it needs it, not 75% at once
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    prefix = f"[member {number}] "
    sys.stdout = Prefixed(sys.stdout, prefix)  # Keras's epoch lines too
    sys.stderr = Prefixed(sys.stderr, prefix)
    runs.import_tensorflow_quietly()

    from .training import train  # TensorFlow: only once the process has its share

    interrupted = "interrupted: the same command resumes it from its last completed epoch"
    with runs.command_errors(lambda: interrupted, (ValueError, CorpusError, OSError)):
        train(config, lambda message: print(message, flush=True))


def train_members(config, log=print):
    """Train `config.members` members of the run in `config.output` (see
    the module docstring); returns their folders."""
    # Not at module level: a member's process imports this module (to run
    # `_train_member`) before it takes its share of the CPU, and `training`
    # starts TensorFlow.
    from .training import check_inputs, prepared_run, train_settings

    if given():
        raise UsageError(
            "--members trains its members as processes of this machine; a TF_CONFIG cluster "
            "already spreads one model over several: leave out --members"
        )
    settings, _ = train_settings(config)
    check_inputs(config)
    folders = member_folders(config.output, config.members)
    if not config.overwrite and all(finished(folder) for folder in folders):
        raise UsageError(
            f"--output {config.output} already holds its {config.members} trained members: "
            "evaluate or translate with them (--ensemble), pass --overwrite to delete them "
            "and train again, or choose another --output"
        )
    with run_folders.locked(config.output, "train --members"):
        prepared_run(config, settings, True, log)  # --overwrite deletes members/ too
    vocabularies = [os.path.basename(p) for p in vocabulary_paths(config.output, config.tokenizer)]
    for folder in folders[1:]:  # each member's copy, put in place whole
        run_files.copy_missing(config.output, folder, ("data", *vocabularies))
    cores, gpus = placements(config.members)
    context = multiprocessing.get_context("spawn")
    processes = []
    for number, folder in enumerate(folders, start=1):
        if finished(folder):
            log(f"member {number}: trained already ({folder})")
            continue
        member = config.replace(
            output=folder,
            seed=config.seed + number - 1,
            members=1,
            overwrite=False,
            verbose=2 if config.verbose in (None, 1) else config.verbose,  # no progress bars
        )
        where = f"cores {cores[number - 1]}" if cores[number - 1] else "all cores"
        if gpus[number - 1]:
            where += f", GPUs {gpus[number - 1]}"
        log(f"member {number}: training in {folder} (seed {member.seed}, {where})")
        process = context.Process(
            target=_train_member,
            args=(member, number, cores[number - 1], gpus[number - 1]),
            name=f"member-{number}",
        )
        process.start()
        processes.append((number, folder, process))
    _wait_for(processes)
    log(
        f"trained {config.members} members; decode them as an ensemble with --output "
        f"{config.output} --ensemble {' '.join(folders[1:])}"
    )
    return folders


def _wait_for(processes):
    """Wait for the members' `(number, folder, process)`es to end; after
    Ctrl-C, give each 30 s to save before stopping it. `UsageError` naming
    the members that failed."""
    try:
        for _, _, process in processes:
            process.join()
    except KeyboardInterrupt:
        for _, _, process in processes:
            process.join(timeout=30)  # the members were interrupted too: let them save
            if process.is_alive():
                process.terminate()
        raise
    failed = [(n, where, process.exitcode) for n, where, process in processes if process.exitcode]
    if failed:
        stopped = (f"member {n} ({where}) stopped with exit status {c}" for n, where, c in failed)
        raise UsageError(
            "; ".join(stopped)
            + ": see its lines above; the same command resumes the members that did not finish"
        )
