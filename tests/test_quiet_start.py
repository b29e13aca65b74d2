"""quiet_start drops exactly TensorFlow's CPU-only CUDA lines and keeps everything else."""
import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO_ROOT


def test_filtered_stderr_drops_only_the_expected_lines():
    # Written at the file-descriptor level, as TensorFlow's C++ runtime writes.
    program = textwrap.dedent("""
        import os
        from t2t_lite import quiet_start
        with quiet_start.filtered_stderr(quiet_start.EXPECTED_CPU_ONLY_LINES):
            os.write(2, b"I0000 00:00 1 cudart_stub.cc:31] Could not find cuda drivers on your "
                        b"machine, GPU will not be used.\\n")
            os.write(2, b"E0000 00:00 1 cuda_platform.cc:52] failed call to cuInit: INTERNAL\\n")
            os.write(2, b"E0000 00:00 1 some_kernel.cc:9] a real error\\n")
            os.write(2, b"plain line without newline")
        os.write(2, b"\\nafter the block\\n")
    """)
    result = subprocess.run([sys.executable, "-c", program], check=False, capture_output=True,
                            text=True, timeout=60, cwd=REPO_ROOT,
                            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("E0000 00:00 1 some_kernel.cc:9] a real error\n"
                             "plain line without newline\nafter the block\n")


def test_import_tensorflow_returns_the_module():
    from t2t_lite import quiet_start

    tf = quiet_start.import_tensorflow()
    assert tf.constant(2).numpy() == 2


def test_skipped_imports_fail_inside_and_work_after():
    code = ("import sys\nfrom t2t_lite import quiet_start\n"
            "with quiet_start.skipped_imports(('wave', 'sys')):\n"
            "    try:\n        import wave\n        print('imported')\n"
            "    except ImportError:\n        print('skipped')\n"
            "    import sys as again\n"  # an already imported module is left alone
            "import wave\nprint(wave.__name__, 'wave' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["skipped", "wave", "True"]


def test_import_tensorflow_skips_the_unused_keras_imports():
    """Keras' matplotlib.pyplot / IPython imports are skipped while TensorFlow loads (where
    they are installed), and import normally afterwards."""
    code = ("import importlib, importlib.util, sys\nfrom t2t_lite import quiet_start\n"
            "quiet_start.import_tensorflow()\nimport keras\n"
            "print([n for n in quiet_start.UNUSED_KERAS_IMPORTS if n in sys.modules])\n"
            "installed = [n for n in quiet_start.UNUSED_KERAS_IMPORTS\n"
            "             if importlib.util.find_spec(n.split('.')[0])]\n"
            "print(all(importlib.import_module(n) for n in installed))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False,
                            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "True"]
