"""`python run.py --mode=...` from a source checkout: t2t_lite's single entry point,
`t2t_lite.bin.main` (installed as the `t2t-lite` command; also `python -m t2t_lite`).
`python run.py --help` describes the modes and flags."""
from t2t_lite.bin.main import main

if __name__ == "__main__":
    main()
