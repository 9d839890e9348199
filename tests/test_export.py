"""The atomic, versioned export directory helper."""

import os

import pytest

from keras_attention.serving.export import atomic_version_dir, next_version


def test_versions_count_up_and_publish_atomically(tmp_path):
    base = str(tmp_path)
    assert next_version(os.path.join(base, "m")) == 1
    with atomic_version_dir(base, "m") as (staging, target):
        open(os.path.join(staging, "saved_model.pb"), "w").write("x")
        assert not os.path.exists(target)  # nothing visible until it is complete
    assert target.endswith(os.path.join("m", "1")) and os.path.exists(
        os.path.join(target, "saved_model.pb")
    )
    assert next_version(os.path.join(base, "m")) == 2
    assert "model_config_list" in open(os.path.join(base, "m", "models.config")).read()


def test_failed_export_leaves_no_version_and_keeps_earlier_ones(tmp_path):
    base = str(tmp_path)
    with atomic_version_dir(base, "m") as (staging, _):
        open(os.path.join(staging, "saved_model.pb"), "w").write("v1")
    with pytest.raises(RuntimeError, match="midway"):
        with atomic_version_dir(base, "m") as (staging, _):
            open(os.path.join(staging, "saved_model.pb"), "w").write("half")
            raise RuntimeError("killed midway")
    assert sorted(os.listdir(os.path.join(base, "m"))) == ["1", "models.config"]
    assert open(os.path.join(base, "m", "1", "saved_model.pb")).read() == "v1"


def test_existing_version_is_an_error(tmp_path):
    with atomic_version_dir(str(tmp_path), "m", version=3):
        pass
    with pytest.raises(ValueError, match="export version 3 already exists"):
        with atomic_version_dir(str(tmp_path), "m", version=3):
            pass
