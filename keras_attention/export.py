"""SavedModel export for TensorFlow Serving (TensorFlow-specific).

Versions live in `<base_dir>/<model_name>/<version>/`, integer-named, the
layout `tensorflow_model_server --model_base_path=<base_dir>/<model_name>`
polls. A version is written into a temporary directory beside its target
and renamed into place, so a server never sees a half-written version and
a failed or killed export leaves the earlier versions untouched.
"""

import contextlib
import os
import shutil
import tempfile

MODELS_CONFIG = """model_config_list {{
  config {{
    name: "{name}"
    base_path: "/models/{name}"
    model_platform: "tensorflow"
  }}
}}
"""


def next_version(model_dir):
    """1 + the largest integer-named version under `model_dir` (1 if none)."""
    if not os.path.isdir(model_dir):
        return 1
    versions = [int(entry) for entry in os.listdir(model_dir) if entry.isdigit()]
    return max(versions, default=0) + 1


@contextlib.contextmanager
def atomic_version_dir(base_dir, model_name, version=None):
    """Yields `(staging, target)`: a temporary directory to write one version
    into and its final path. On success `staging` is renamed to `<base_dir>/<model_name>/<version>` (and a `models.config`
    example written beside the version folders); on any exception it is
    removed and nothing else changes.

    Raises `ValueError` if that version already exists.
    """
    model_dir = os.path.join(base_dir, model_name)
    os.makedirs(model_dir, exist_ok=True)
    version = next_version(model_dir) if version is None else int(version)
    target = os.path.join(model_dir, str(version))
    if os.path.exists(target):
        raise ValueError(
            f"export version {version} already exists at {target}; pick another `version` "
            "or leave it unset for the next free number."
        )
    staging = tempfile.mkdtemp(prefix=f".{version}.incomplete-", dir=model_dir)
    try:
        yield staging, target
        os.replace(staging, target)  # atomic on one filesystem
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    config = os.path.join(model_dir, "models.config")
    with open(config + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(MODELS_CONFIG.format(name=model_name))
    os.replace(config + ".tmp", config)


def export_archive(archive, base_dir, model_name, version=None, before_publish=None):
    """Write a `keras.export.ExportArchive` as the next version; returns its path.

    `before_publish(path)` may add files (assets, warm-up requests) to the
    staged version before it is renamed into place.
    """
    with atomic_version_dir(base_dir, model_name, version) as (staging, target):
        archive.write_out(staging, verbose=False)
        if before_publish is not None:
            before_publish(staging)
    return target
