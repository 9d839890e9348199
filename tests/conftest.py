import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import signal  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

# Tests interrupt recipe processes with SIGINT (Ctrl-C). A shell that starts
# the suite in the background without job control (`nohup make test &`)
# ignores SIGINT, and the recipes' processes would inherit that and never
# see the signal; a handler here gives them the default back at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# On JAX and PyTorch a test that sweeps configurations (`parametrize`) runs
# its first case only, except the layer harnesses and the portability and
# compatibility tests, which check every layer and family on the backend,
# and the fused attention tests, whose op is each backend's own: the other
# sweeps run the same `keras.ops` code, which TensorFlow's run checks case
# by case. KERAS_ATTENTION_EVERY_CASE=1 runs every case
# (`make test-torch` does); `make test`'s JAX run keeps the suite in time.
EVERY_CASE_ON_EVERY_BACKEND = (
    "test_portability.py",
    "test_compatibility.py",
    "harness",
    "test_fused_attention.py",
)


# KerasHub's convention: a `large` test runs only with `--run_large` (the
# root conftest.py adds the option; `make test-large`; `.ci/run` runs it
# after `make test`). Large here means
# a recipe's processes end to end: several TensorFlow processes at once
# (distributed training and tuning, ensemble members, replicas), a signal
# to a running process (Ctrl-C, a kill), a translation search with
# KerasTuner, or a benchmark script's smoke run; a whole run trained and
# exported beyond the one the session shares (`trained`, `exported`); the
# other cases of a sweep of families whose capability one case checks in
# `make test` (convs2s's int8 op check beside the rnn's); a fresh Python,
# TensorFlow or JAX process for one message or check; or a slower test of
# what a cheaper one in `make test` checks (each says which in its reason),
# so that `make test` ends within 15 minutes on a 2-core CPU. `make test` keeps
# at least one case of every capability: the shared run's export and its
# op check, the library's int8 export of a transformer and its op check, a
# digits recipe run and its KerasTuner search, one case of each sweep.
def pytest_collection_modifyitems(config, items):
    if not config.getoption("--run_large"):
        skip_large = pytest.mark.skip(reason="large: `make test-large` runs it (--run_large)")
        for item in items:
            if item.get_closest_marker("large"):  # not a parameter id or name that says large
                item.add_marker(skip_large)
    if keras.backend.backend() == "tensorflow" or os.environ.get("KERAS_ATTENTION_EVERY_CASE"):
        return
    seen, kept, left_out = set(), [], []
    for item in items:
        test = (str(item.path), getattr(item, "originalname", item.name))
        every_case = any(name in item.nodeid for name in EVERY_CASE_ON_EVERY_BACKEND)
        if hasattr(item, "callspec") and test in seen and not every_case:
            left_out.append(item)
        else:
            kept.append(item)
            seen.add(test)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Every test starts with the float32 policy and fixed seeds."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def shared_once(tmp_path_factory, name, make):
    """`make(folder)` run once per test session, even under `pytest -n`:
    the first xdist worker to get the lock makes it in a folder under the
    workers' shared temp root, the others wait and reuse it. Each worker
    gets its own copy (tests may write into a run), and what `make`
    returned (JSON)."""
    import fcntl
    import json
    import shutil

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this session
    shared = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / f"shared-{name}.json"
        if not done.exists():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            done.write_text(json.dumps(make(shared)))
        made = json.loads(done.read_text())
    copy = tmp_path_factory.mktemp(name)
    shutil.copytree(shared, copy, dirs_exist_ok=True)
    return copy, made


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """The translation recipe's tiny trained run, `(output, train log)`
    (`tests/translation_helpers.train_shared_run`): trained once per
    session, a copy per worker."""
    from tests.translation_helpers import train_shared_run

    copy, log = shared_once(tmp_path_factory, "trained", train_shared_run)
    return str(copy / "run"), log


@pytest.fixture(scope="session")
def exported(trained, tmp_path_factory):
    """The trained run exported with beam width 2 (the version's path):
    exported once per session, a copy per worker."""
    from tests.translation_helpers import export_shared_run

    def export(folder):
        source = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):
            source = source.parent
        return export_shared_run(str(source / "shared-trained" / "run"), folder)

    copy, relative = shared_once(tmp_path_factory, "exported", export)
    return str(copy / relative)
