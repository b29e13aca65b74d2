"""The t2t tools, one module each: the only code that reads command-line flags.

`run.py --mode=M` calls one of them; each reads the flags of its t2t tool and calls the library
(`t2t_lite.utils`, `t2t_lite.data_generators`, ...), which takes plain arguments.
"""
