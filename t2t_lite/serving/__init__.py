"""The HTTP translation server (`run.py --mode=serve`): `server` with dynamic batching
(`batching`, `continuous_batching`), its engines (`engines`: t2t_lite, a SavedModel or
CTranslate2), request models (`api`), Prometheus metrics (`metrics`), its limits (`config`)
and the Insights page (`static/`); `client`: its Python client (`run.py --mode=query`).

What it serves is written by `t2t_lite.export` (SavedModels, CTranslate2 directories).
"""
