"""Versioned, atomic SavedModel exports for TensorFlow Serving, and their
warm-up requests (TensorFlow-specific).

Versions live in `<base_dir>/<model_name>/<version>/`, integer-named, the
layout `tensorflow_model_server --model_base_path=<base_dir>/<model_name>`
polls. A version is written into a staging directory beside its target,
`.<version>.incomplete-<host>-<pid>-<random>`, and renamed into place, so a
server never sees a half-written version and a failed or killed export
leaves the earlier versions untouched.

Concurrent exports are safe: the version number is settled when a version
is published, under an exclusive lock on `<base_dir>/.export.lock`, and a
rename that finds its number taken (by a writer that does not take the
lock) retries with the next one. Staging folders of a killed export (its
process dead on this host) are removed by the next export.

After each export `<base_dir>/models.config` is rewritten (atomically) to
list every model under `<base_dir>`, for
`tensorflow_model_server --model_config_file` with `<base_dir>` mounted as
`/models`.
"""

import contextlib
import errno
import os
import re
import shutil
import socket
import tempfile

from keras_attention.files import umask_mode, write_atomically

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: publishing relies on the retry alone
    fcntl = None

MODELS_CONFIG_ENTRY = """  config {{
    name: "{name}"
    base_path: "/models/{name}"
    model_platform: "tensorflow"
  }}
"""
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
STAGING = re.compile(r"\.(\d+)\.incomplete-(.+)-(\d+)-[^-]*")


def check_model_name(model_name):
    """Raise `ValueError` unless `model_name` is a plain name (letters, digits,
    `_`, `-`, `.`, not starting with `.`): it becomes a folder under the
    export directory and a quoted name in `models.config`, so `../x`, an
    absolute path, quotes or newlines must not get through."""
    if not isinstance(model_name, str) or not PLAIN_NAME.fullmatch(model_name):
        raise ValueError(
            "model_name must be a plain name (letters, digits, '_', '-', '.', not starting "
            f"with '.'), the folder of the model under the export directory; got {model_name!r}"
        )


def next_version(model_dir):
    """1 + the largest integer-named version under `model_dir` (1 if none)."""
    if not os.path.isdir(model_dir):
        return 1
    versions = [int(entry) for entry in os.listdir(model_dir) if entry.isdigit()]
    return max(versions, default=0) + 1


def _process_is_dead(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def remove_abandoned_staging(model_dir):
    """Delete the staging folders under `model_dir` whose export process is
    dead on this host; live exports' and other hosts' folders are left
    alone. Returns the names removed."""
    host, removed = socket.gethostname(), []
    for entry in sorted(os.listdir(model_dir)) if os.path.isdir(model_dir) else []:
        match = STAGING.fullmatch(entry)
        if match and match.group(2) == host and _process_is_dead(int(match.group(3))):
            shutil.rmtree(os.path.join(model_dir, entry), ignore_errors=True)
            removed.append(entry)
    return removed


@contextlib.contextmanager
def _export_lock(base_dir):
    """An exclusive lock on `<base_dir>/.export.lock` (flock; held while a
    version is numbered and published and `models.config` rewritten). The
    holder removes the file before it lets go, so that no lock file stays
    beside the models; a process that was waiting on the removed file
    finds, once it holds that lock, that the path is gone or another file,
    and locks the file at the path instead."""
    path = os.path.join(base_dir, ".export.lock")
    while True:
        handle = open(path, "a")
        if fcntl is None:
            break
        fcntl.flock(handle, fcntl.LOCK_EX)
        if _is_file_at(handle, path):
            break
        handle.close()  # locked a file its holder had removed: again
    try:
        yield
    finally:
        if fcntl is not None and _is_file_at(handle, path):
            os.remove(path)  # still held: only the holder removes it
        handle.close()  # releases the flock


def _is_file_at(handle, path):
    """True when `path` is the file open as `handle`."""
    try:
        return os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
    except FileNotFoundError:
        return False


def write_models_config(base_dir):
    """Rewrite `<base_dir>/models.config` atomically: a `ModelServerConfig`
    (text format) with one entry per model folder under `<base_dir>` that
    holds at least one version, its `base_path` `/models/<name>`. Returns
    its path."""
    names = [
        entry
        for entry in sorted(os.listdir(base_dir))
        if PLAIN_NAME.fullmatch(entry)
        and os.path.isdir(os.path.join(base_dir, entry))
        and next_version(os.path.join(base_dir, entry)) > 1
    ]
    text = "model_config_list {\n"
    text += "".join(MODELS_CONFIG_ENTRY.format(name=name) for name in names) + "}\n"
    return write_atomically(os.path.join(base_dir, "models.config"), text)


class StagedVersion:
    """What `atomic_version_dir` yields: `staging`, the directory to write
    the version into, and `path`, where it will be published. Without an
    explicit version, `path` and `version` are provisional until the block
    ends (another export may take the number first)."""

    def __init__(self, staging, version, model_dir):
        self.staging, self.version, self.model_dir = staging, version, model_dir

    @property
    def path(self):
        return os.path.join(self.model_dir, str(self.version))


def _version_exists(target, version):
    return ValueError(
        f"export version {version} already exists at {target}; pick another `version` "
        "or leave it unset for the next free number."
    )


@contextlib.contextmanager
def atomic_version_dir(base_dir, model_name, version=None):
    """Yields a `StagedVersion`: write one version into its `staging`
    directory. When the block ends without an exception, `staging` is
    renamed to `<base_dir>/<model_name>/<version>` (the next free number
    at that moment unless `version` is given) and `<base_dir>/models.config`
    is rewritten; on any exception `staging` is removed and nothing else
    changes.

    Raises `ValueError` if `model_name` is not a plain name, or if the
    given `version` already exists.
    """
    check_model_name(model_name)
    model_dir = os.path.join(base_dir, model_name)
    os.makedirs(model_dir, exist_ok=True)
    remove_abandoned_staging(model_dir)
    explicit = version is not None
    version = int(version) if explicit else next_version(model_dir)
    if os.path.exists(os.path.join(model_dir, str(version))):
        raise _version_exists(os.path.join(model_dir, str(version)), version)
    staging = tempfile.mkdtemp(
        prefix=f".{version}.incomplete-{socket.gethostname()}-{os.getpid()}-", dir=model_dir
    )
    staged = StagedVersion(staging, version, model_dir)
    try:
        yield staged
        os.chmod(staging, umask_mode(0o777))
        with _export_lock(base_dir):
            if not explicit:
                staged.version = max(version, next_version(model_dir))
            while True:
                if os.path.exists(staged.path):  # an empty folder would be replaced silently
                    error = OSError(errno.EEXIST, "version exists", staged.path)
                else:
                    try:
                        os.rename(staging, staged.path)  # atomic on one filesystem
                        break
                    except OSError as raised:
                        error = raised
                if explicit or error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise _version_exists(staged.path, staged.version) if explicit else error
                staged.version += 1  # taken meanwhile by a writer outside the lock
            write_models_config(base_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def export_archive(archive, base_dir, model_name, version=None, before_publish=None):
    """Write a `keras.export.ExportArchive` as the next version (or `version`);
    returns its path. `ValueError` if `model_name` is not a plain name.

    `before_publish(path)` may add files (assets, warm-up requests) to the
    staged version before it is renamed into place.
    """
    with atomic_version_dir(base_dir, model_name, version) as staged:
        archive.write_out(staged.staging, verbose=False)
        if before_publish is not None:
            before_publish(staged.staging)
    return staged.path


def traced_once(function):
    """A `tf.function` with `function`'s input signature (a `tf.function`
    with an `input_signature`) whose body is one call of `function`'s
    concrete trace, traced now: what an `ExportArchive` endpoint should be.

    `tf.saved_model.save` traces every `tf.function` it saves once more:
    the function cache's key holds the save options' variable policy, so a
    trace made outside the save does not serve it. Tracing a search (a
    `while_loop` over the model's decoder) was half of a Translator's
    export time, and the SavedModel held each search graph twice, once for
    the signature and once for the function. Over this wrapper the save's
    trace is a single call op to the graph traced here, which the
    SavedModel holds once."""
    import functools

    import tensorflow as tf

    if getattr(function, "input_signature", None) is None:
        raise ValueError(
            "traced_once: `function` must be a tf.function with an input_signature "
            f"(`tf.function(fn, input_signature=[...])`); got {function!r}"
        )
    trace = function.get_concrete_function()

    @functools.wraps(function.python_function)  # the argument names: keyword calls, input keys
    def call(*args, **kwargs):
        return trace(*args, **kwargs)

    wrapper = tf.function(call, input_signature=function.input_signature, autograph=False)
    wrapper.get_concrete_function()
    return wrapper


def write_warmup_requests(version_dir, model_name, requests):
    """Write `assets.extra/tf_serving_warmup_requests`: one `PredictionLog`
    record per `(signature_name, {input_name: value})`, which TF Serving
    replays to warm the model up before it serves. Needs the
    tensorflow-serving-api package."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    directory = os.path.join(version_dir, "assets.extra")
    os.makedirs(directory, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(directory, "tf_serving_warmup_requests")) as writer:
        for signature, inputs in requests:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
            )
            for name, value in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())


def read_warmup_requests(version_dir):
    """The `(signature_name, {input_name: numpy array})` pairs of a version's
    warm-up file."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = os.path.join(version_dir, "assets.extra", "tf_serving_warmup_requests")
    requests = []
    for record in tf.data.TFRecordDataset(path):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        request = log.predict_log.request
        requests.append(
            (
                request.model_spec.signature_name,
                {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()},
            )
        )
    return requests
