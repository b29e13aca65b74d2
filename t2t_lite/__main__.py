"""`python -m t2t_lite --mode=...`: the `t2t-lite` command (`t2t_lite.bin.main`)."""
from t2t_lite.bin.main import main

if __name__ == "__main__":
    main()
