"""`train --workers N` (`recipes/translation/workers.py`): its checks, its
ports and the state a resumed run's workers share, a worker that dies,
and (large) two workers training the model one process trains."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from keras_attention_recipes.runs import UsageError
from keras_attention_recipes.translation.settings import DING
from keras_attention_recipes.translation.workers import (
    LOG_NAME,
    _failure,
    _share_chief_state,
    free_ports,
)

from tests.translation_helpers import ROOT, TINY, run, weight_arrays

needs_ding = pytest.mark.skipif(not os.path.exists(DING), reason=f"{DING} missing")


@pytest.mark.parametrize(  # one in `make test`
    "value",
    ["-1", pytest.param("0", marks=pytest.mark.large), pytest.param("65", marks=pytest.mark.large)],
)
def test_workers_flag_is_checked(value):
    with pytest.raises(UsageError, match="--workers"):
        run("train", "--output", "unused", "--workers", value)


@pytest.mark.parametrize(
    "flags, named",
    [
        (("--time-budget", "5"), "--time-budget"),  # one in `make test`
        pytest.param(("--members", "2"), "--members", marks=pytest.mark.large),
        pytest.param(("--update-freq", "2"), "--update-freq", marks=pytest.mark.large),
    ],
)
def test_what_workers_cannot_do_is_refused_before_any_work(tmp_path, flags, named):
    output = tmp_path / "run"
    with pytest.raises(UsageError, match=f"{named}.*--workers 2|--workers 2.*{named}"):
        run("train", "--output", str(output), "--workers", "2", *flags)
    assert not output.exists()


def test_workers_in_a_tf_config_cluster_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]}}))
    with pytest.raises(UsageError, match="TF_CONFIG already makes"):
        run("train", "--output", str(tmp_path / "run"), "--workers", "2")


WORKERS = {"worker": ["a:1", "b:2"]}


@pytest.mark.parametrize(
    "value, problem",
    [
        ("garbage", "is not JSON"),
        ("[]", "is a JSON list, not an object"),
        ("{}", 'has no "cluster"'),
        ('{"cluster": []}', 'has a list as its "cluster"'),
        ('{"cluster": {}}', 'has an empty "cluster": no chief and no worker'),
        (json.dumps({"cluster": {"worker": "a:1"}}), 'job "worker" that is not a list'),
        (json.dumps({"cluster": {"worker": []}}), 'job "worker" that is not a list'),
        (json.dumps({"cluster": {"ps": ["a:1"]}}), 'job "ps" in its cluster'),
        (json.dumps({"cluster": {"chief": ["a:1", "b:2"]}}), "has 2 chiefs"),
        (json.dumps({"cluster": WORKERS}), 'has no "task"'),
        (json.dumps({"cluster": WORKERS, "task": "worker"}), 'has a str as its "task"'),
        (json.dumps({"cluster": WORKERS, "task": {"index": 0}}), "task of type null"),
        (json.dumps({"cluster": WORKERS, "task": {"type": "chief"}}), 'type "chief", not one'),
        (json.dumps({"cluster": WORKERS, "task": {"type": "worker", "index": 2}}), "index 2:"),
        (json.dumps({"cluster": WORKERS, "task": {"type": "worker", "index": -1}}), "index -1"),
        (json.dumps({"cluster": WORKERS, "task": {"type": "worker", "index": "0"}}), 'index "0"'),
    ],
)
def test_a_tf_config_that_makes_no_cluster_is_refused_in_one_line(value, problem):
    from keras_attention_recipes.translation.cluster import cluster_task

    with pytest.raises(UsageError) as refused:
        cluster_task({"TF_CONFIG": value})
    message = str(refused.value)
    assert message.startswith("TF_CONFIG ") and problem in message, message
    assert "\n" not in message
    assert f"(given: {value})" in message and "expected a cluster" in message


def test_a_working_tf_config_names_this_processs_task():
    from keras_attention_recipes.translation.cluster import cluster_task

    assert cluster_task({}) is None and cluster_task({"TF_CONFIG": ""}) is None
    worker = {"cluster": WORKERS, "task": {"type": "worker", "index": 1}}
    task = cluster_task({"TF_CONFIG": json.dumps(worker)})
    assert (task.type, task.index, task.is_chief) == ("worker", 1, False)
    first = {"cluster": WORKERS, "task": {"type": "worker"}}  # TensorFlow's default index 0
    assert cluster_task({"TF_CONFIG": json.dumps(first)}).is_chief
    chief = {"cluster": {"chief": ["c:0"], **WORKERS}, "task": {"type": "worker", "index": 0}}
    assert not cluster_task({"TF_CONFIG": json.dumps(chief)}).is_chief
    chief["task"] = {"type": "chief", "index": 0}
    assert cluster_task({"TF_CONFIG": json.dumps(chief)}).is_chief


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5", "soon"])
def test_the_workers_wait_is_a_finite_number_of_seconds(value):
    from keras_attention_recipes.translation.cluster import worker_wait_seconds

    assert worker_wait_seconds({}) == 900
    assert worker_wait_seconds({"KERAS_ATTENTION_WORKER_WAIT": "30"}) == 30
    with pytest.raises(UsageError, match=f"^KERAS_ATTENTION_WORKER_WAIT '{value}': expected"):
        worker_wait_seconds({"KERAS_ATTENTION_WORKER_WAIT": value})


def test_waiting_for_the_chief_ends_naming_what_is_missing(tmp_path):
    from keras_attention_recipes import run_folders

    data = tmp_path / "data" / "train.tsv"
    with pytest.raises(ValueError, match=r"waited 0.05s .*\(still missing: run.json, data/"):
        run_folders.wait_for_run(str(tmp_path), {"family": "rnn"}, [str(data)], 0.05, poll=0.01)
    (tmp_path / run_folders.RUN_FILE).write_text(json.dumps({"settings": {"family": "rnn"}}))
    with pytest.raises(ValueError, match=r"still missing: data/train.tsv\): start the chief"):
        run_folders.wait_for_run(str(tmp_path), {"family": "rnn"}, [str(data)], 0.05, poll=0.01)
    ended = []

    def wait(timeout):  # in a thread: a wait that never ends must not hang the tests
        try:
            run_folders.wait_for_run(
                str(tmp_path), {"family": "rnn"}, [str(data)], timeout, poll=0.01
            )
        except ValueError as error:
            ended.append(str(error))

    for timeout in (float("nan"), float("inf")):
        thread = threading.Thread(target=wait, args=(timeout,), daemon=True)
        thread.start()
        thread.join(5)
        assert ended and ended.pop().startswith(f"timeout {timeout}: expected a finite")


def _refused_at_once(output, tf_config, seconds=60):
    """`train --output output` with `TF_CONFIG` set to `tf_config` in a
    process of its own, which must end within `seconds`: `(exit status,
    its stderr's lines)`."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": tf_config}
    env.pop("KERAS_ATTENTION_WORKER_WAIT", None)
    command = [
        sys.executable,
        "-m",
        "keras_attention_recipes.translate",
        "train",
        "--output",
        str(output),
    ]
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds
    )
    return result.returncode, [line for line in result.stderr.splitlines() if line.strip()]


# Each case is a fresh process (about 10 s): `make test` runs one of them.
@pytest.mark.parametrize(
    "tf_config, problem",
    [
        pytest.param(
            '{"cluster": {}}',
            'has an empty "cluster"',
            marks=pytest.mark.large(
                reason="the 'garbage' case checks the same refusal in a fresh process; "
                "test_a_tf_config_that_makes_no_cluster_is_refused_in_one_line checks "
                "this message"
            ),
        ),
        ("garbage", "is not JSON"),
    ],
)
def test_the_command_refuses_a_tf_config_that_makes_no_cluster_at_once(
    tmp_path, tf_config, problem
):
    output = tmp_path / "run"
    code, lines = _refused_at_once(output, tf_config)
    assert code == 2, lines
    assert not any("Traceback" in line for line in lines), lines
    assert lines[-1].startswith("error: TF_CONFIG ") and problem in lines[-1], lines
    assert "unset TF_CONFIG to train on one machine" in lines[-1]
    assert not output.exists()  # nothing written, not even the folder


def test_a_tf_config_that_is_no_object_is_one_error_line(tmp_path, monkeypatch, capsys):
    from keras_attention_recipes import translate

    monkeypatch.setenv("TF_CONFIG", "[]")
    output = tmp_path / "run"
    with pytest.raises(SystemExit) as ended:
        translate.main(["train", "--output", str(output)])
    assert ended.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: TF_CONFIG is a JSON list, not an object"), error
    assert "\n" not in error and not output.exists()


WAITS = """
import sys, time
from keras_attention_recipes.translation.cluster import bounded_wait
with bounded_wait("the test's other task", float(sys.argv[1])):
    time.sleep(float(sys.argv[2]))
print("ended")
"""


@pytest.mark.parametrize("late", [True, False])
def test_a_bounded_wait_ends_the_process_with_one_line_or_lets_it_go_on(late):
    """TensorFlow's wait for a cluster's other tasks holds the GIL in C++
    and ignores SIGTERM: `bounded_wait`'s watchdog is a process of its
    own, which writes one line and kills the waiting process; a block that
    ends in time lets it go on, its watchdog gone."""
    wait, block = (2, 60) if late else (30, 0.5)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", WAITS, str(wait), str(block)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    if late:
        assert result.returncode == -signal.SIGKILL and result.stdout == "", result
        assert result.stderr == (
            "error: waited 2s for the test's other task: start every task of the TF_CONFIG "
            "cluster, each with its own task (KERAS_ATTENTION_WORKER_WAIT=SECONDS waits longer)\n"
        )
        assert time.monotonic() - started < 30
    else:
        assert result.returncode == 0 and result.stdout == "ended\n" and result.stderr == ""


@pytest.mark.large  # TensorFlow's start and the wait: about 20 s
def test_a_worker_whose_cluster_never_comes_ends_naming_the_wait(tmp_path):
    """`MultiWorkerMirroredStrategy()` waited forever for a worker that was
    never started; now `KERAS_ATTENTION_WORKER_WAIT` seconds, then one
    line, and nothing is written."""
    ports = free_ports(2)
    tf_config = json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
            "task": {"type": "worker", "index": 0},
        }
    )
    output = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": tf_config}
    env["KERAS_ATTENTION_WORKER_WAIT"] = "5"
    command = [
        sys.executable,
        "-m",
        "keras_attention_recipes.translate",
        "train",
        "--output",
        str(output),
        *TINY,
    ]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert (
        "error: waited 5s for the other 1 task(s) of the cluster to connect (worker 0)"
        in result.stderr
    ), result.stderr[-2000:]
    assert not output.exists()


def test_free_ports_are_distinct_bindable_and_outside_the_ephemeral_range():
    ports = free_ports(4)
    assert len(set(ports)) == 4
    with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
        low = int(handle.read().split()[0])
    for port in ports:
        assert 10_000 <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_every_worker_resumes_from_the_chiefs_state(tmp_path):
    """The chief's backup and best epoch replace the workers' (an earlier
    run with fewer workers left none, or a kill left older ones), and what
    the chief lacks is removed from them."""
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "training_metadata.json").write_text('{"epoch": 3}')
    (tmp_path / "best.weights.h5").write_text("chief's")
    stale = tmp_path / "worker-1"
    (stale / "backup").mkdir(parents=True)
    (stale / "backup" / "training_metadata.json").write_text('{"epoch": 2}')
    (stale / "checkpoints").mkdir()
    (stale / LOG_NAME).write_text("kept")
    _share_chief_state(str(tmp_path), 3)
    for worker in ("worker-1", "worker-2"):
        folder = tmp_path / worker
        assert (folder / "backup" / "training_metadata.json").read_text() == '{"epoch": 3}'
        assert (folder / "best.weights.h5").read_text() == "chief's"
        assert not (folder / "checkpoints").exists()
    assert (stale / LOG_NAME).read_text() == "kept"


def test_a_failed_worker_is_named_with_its_output(tmp_path):
    log = tmp_path / LOG_NAME
    log.write_text("--- worker 1\nerror: --output x holds another run\nlater\n")
    refused = _failure(1, 2, str(log))
    assert refused.startswith("worker 1 stopped with exit status 2")
    assert f"see {log} (its last line: error: --output x holds another run)" in refused
    assert "resumes" not in refused  # a refusal: its line says what to change
    killed = _failure(0, -9, None)
    assert killed.startswith("worker 0 was killed by signal 9")
    assert "see its lines above" in killed and "resumes the run" in killed


def _train(output, *flags, **popen):
    command = [
        sys.executable,
        "-m",
        "keras_attention_recipes.translate",
        "train",
        "--output",
        str(output),
    ]
    command += ["--family", "rnn", "--seed", "3", *TINY, *flags]
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone too
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.large(reason="a cluster of worker processes")
@needs_ding
def test_a_dying_worker_stops_the_cluster(tmp_path):
    """Worker 1 killed: the command stops worker 0 (which would wait for it
    forever) and fails naming worker 1 and its output, without hanging."""
    output = tmp_path / "run"
    process = _train(output, "--workers", "2", "--epochs", "1")
    log = output / "worker-1" / LOG_NAME
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and "process" in log.read_text()):
        time.sleep(0.1)
    worker = int(re.search(r"process (\d+)", log.read_text()).group(1))
    os.kill(worker, signal.SIGKILL)
    text = process.communicate(timeout=120)[0]
    assert process.returncode != 0, text[-2000:]
    assert "worker 1 was killed by signal 9" in text, text[-2000:]
    assert str(log) in text and "Traceback" not in text
    chief = int(re.search(r"worker 0 \(process (\d+)", text).group(1))
    assert not _alive(chief)


def _losses(text):
    return [float(value) for value in re.findall(r" - loss: ([\d.]+)", text)]


@pytest.mark.large
@needs_ding
def test_two_workers_train_the_model_one_process_trains(tmp_path):
    """Dropout off (a worker draws its part of the batch's masks): the same
    global batches, the loss over the global batch's tokens and the
    gradients summed over the workers give one process's losses and
    weights, up to float rounding."""
    flags = ("--epochs", "2", "--dropout", "0", "--verbose", "2")
    runs = {}
    for workers in (1, 2):
        process = _train(tmp_path / str(workers), *flags, "--workers", str(workers))
        text = process.communicate(timeout=600)[0]
        assert process.returncode == 0, text[-3000:]
        runs[workers] = text
    assert "on 2 replica(s)" in runs[2] and "on 1 replica(s)" in runs[1]
    assert len(_losses(runs[1])) == 2
    np.testing.assert_allclose(_losses(runs[2]), _losses(runs[1]), rtol=1e-4)
    one, two = (
        weight_arrays(str(tmp_path / k / "final.weights.h5"), optimizer=None) for k in ("1", "2")
    )
    assert one.keys() == two.keys() and len(one) > 5
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-3, atol=1e-5, err_msg=name)
    worker = weight_arrays(str(tmp_path / "2" / "worker-1" / "final.weights.h5"), optimizer=None)
    for name in two:
        np.testing.assert_array_equal(worker[name], two[name], err_msg=name)
    config = json.loads((tmp_path / "2" / "config.json").read_text())
    assert config["val_loss"] == pytest.approx(
        json.loads((tmp_path / "1" / "config.json").read_text())["val_loss"], rel=1e-4
    )


def _read_until(process, needle, seconds):
    """The lines `process` wrote until one holding `needle` (a deadline of
    `seconds`; the caller's timeout ends a process that never writes it)."""
    lines, deadline = [], time.time() + seconds
    while time.time() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            break
    return "".join(lines)


@pytest.mark.large
@needs_ding
def test_ctrl_c_stops_every_worker(tmp_path):
    """Ctrl-C reaches the command only (its workers have their own process
    group): it passes it on, each worker stops between two steps, and no
    worker outlives the command."""
    process = _train(tmp_path / "run", "--workers", "2", "--epochs", "3", "--verbose", "2")
    text = _read_until(process, "Epoch 1/", 300)
    assert "Epoch 1/" in text, text[-2000:]
    pids = [int(pid) for pid in re.findall(r"worker \d \(process (\d+)", text)]
    assert len(pids) == 2
    process.send_signal(signal.SIGINT)
    text += process.communicate(timeout=180)[0]
    assert process.returncode == 1, text[-2000:]
    assert "interrupted" in text and "Traceback" not in text, text[-2000:]
    assert not any(_alive(pid) for pid in pids)


@pytest.mark.large
@needs_ding
def test_a_run_resumes_with_more_workers(tmp_path):
    """A one-process run interrupted after its first epoch resumes with two
    workers: worker 1, which has no backup of its own, starts from the
    chief's, at the same epoch."""
    output = tmp_path / "run"
    flags = ("--epochs", "2", "--verbose", "2")
    process = _train(output, *flags)
    text = _read_until(process, "Epoch 2/", 300)
    process.send_signal(signal.SIGINT)
    text += process.communicate(timeout=180)[0]
    assert (output / "backup").exists(), text[-2000:]
    process = _train(output, *flags, "--workers", "2")
    text = process.communicate(timeout=600)[0]
    assert process.returncode == 0, text[-3000:]
    resumed = "resuming an interrupted run after its epoch 1 of 2"
    assert resumed in text
    assert resumed in (output / "worker-1" / LOG_NAME).read_text()
    assert (output / "model.keras").exists()
