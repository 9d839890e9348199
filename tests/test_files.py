"""`keras_attention.files.write_atomically`: the whole file or the old one,
the umask's mode, no temporary left behind."""

import os
import stat

import pytest

from keras_attention.files import umask_mode, write_atomically


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask,expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_the_file_gets_the_mode_open_would_give_it(tmp_path, mask, expected):
    old = os.umask(mask)
    try:
        assert umask_mode(0o666) == expected
        path = write_atomically(str(tmp_path / "deep" / "er" / "a.txt"), "Grüße\n")
        with open(tmp_path / "plain.txt", "w") as stream:
            stream.write("x")
    finally:
        os.umask(old)
    assert mode_of(path) == expected == mode_of(tmp_path / "plain.txt")
    assert open(path, "rb").read() == "Grüße\n".encode("utf-8")


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = str(tmp_path / "v.txt")
    write_atomically(path, b"old")
    monkeypatch.setattr(os, "replace", lambda *args: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, b"new")
    assert os.listdir(tmp_path) == ["v.txt"] and open(path, "rb").read() == b"old"


def test_data_that_is_not_bytes_or_text_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(TypeError, match=r"`data` of write_atomically must be bytes or a string"):
        write_atomically(str(tmp_path / "new" / "v.txt"), ["a", "b"])
    assert os.listdir(tmp_path) == []
