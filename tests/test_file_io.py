"""file_io.atomic_write: whole files only, on local and ram:// (tf.io.gfile) paths."""
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from t2t_lite import file_io


@pytest.mark.parametrize("root", ["local", "ram://file_io_test"])
def test_atomic_write_round_trips_text_bytes_and_chunks(tmp_path, root):
    base = str(tmp_path) if root == "local" else root
    text_path = f"{base}/sub/dir/a.txt"
    file_io.atomic_write(text_path, "über\r\nline\n")
    with tf.io.gfile.GFile(text_path, "rb") as f:
        assert f.read() == "über\r\nline\n".encode()
    file_io.atomic_write(f"{base}/b.bin", b"\x00\xff")
    with tf.io.gfile.GFile(f"{base}/b.bin", "rb") as f:
        assert f.read() == b"\x00\xff"
    file_io.atomic_write_lines(f"{base}/c.txt", ["x", "y"])
    with tf.io.gfile.GFile(f"{base}/c.txt") as f:
        assert f.read() == "x\ny\n"
    # Overwrites, and leaves no temporary file beside the target.
    file_io.atomic_write(text_path, "new")
    with tf.io.gfile.GFile(text_path) as f:
        assert f.read() == "new"
    assert tf.io.gfile.listdir(f"{base}/sub/dir") == ["a.txt"]


def test_failure_while_writing_keeps_the_old_file_and_no_temporary(tmp_path):
    path = os.path.join(tmp_path, "out.txt")
    file_io.atomic_write(path, "old\n")

    def chunks():
        yield "half"
        raise RuntimeError("crash while writing")

    with pytest.raises(RuntimeError):
        file_io.atomic_write(path, chunks())
    with open(path) as f:
        assert f.read() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_open_streams_two_files_and_removes_them_on_failure(tmp_path):
    a, b = tmp_path / "x.lang1", tmp_path / "x.lang2"
    with file_io.atomic_open(str(a)) as fa, file_io.atomic_open(str(b)) as fb:
        for i in range(3):
            fa.write(f"src {i}\n")
            fb.write(f"tgt {i}\n")
        # Nothing is visible under the final names before the block ends.
        assert not a.exists() and not b.exists()
    assert a.read_text() == "src 0\nsrc 1\nsrc 2\n"
    assert b.read_text() == "tgt 0\ntgt 1\ntgt 2\n"
    with (
        pytest.raises(RuntimeError),
        file_io.atomic_open(str(a)) as fa,
        file_io.atomic_open(str(b)) as fb,
    ):
        fa.write("half")
        fb.write("half")
        raise RuntimeError("crash while writing")
    assert a.read_text() == "src 0\nsrc 1\nsrc 2\n"
    assert sorted(os.listdir(tmp_path)) == ["x.lang1", "x.lang2"]
    with file_io.atomic_open(str(tmp_path / "z.bin"), "wb") as f:
        f.write(b"\x00\x01")
    assert (tmp_path / "z.bin").read_bytes() == b"\x00\x01"


def test_modules_that_write_files_import_without_tensorflow():
    # The CTranslate2 Translator encodes and decodes text with these outside TensorFlow.
    code = ("import sys, t2t_lite.file_io, t2t_lite.decoding.decoding, "
            "t2t_lite.decoding.text_batches, t2t_lite.decoding.decode_hparams, "
            "t2t_lite.data_generators.text_encoder, t2t_lite.export.ct2; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
