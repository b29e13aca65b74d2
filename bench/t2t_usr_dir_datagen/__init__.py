"""t2t_usr_dir of bench/bench_datagen.py (passed to the ORIGINAL tensor2tensor as
--t2t_usr_dir): translate_bench_files."""
from . import bench_files  # noqa: F401
