"""Serving t2t_lite (and original tensor2tensor) models outside TensorFlow.

`ct2`: export to a CTranslate2 model directory and translate raw text with it.
`server` (`run.py --mode=serve`): the HTTP translation server with dynamic batching
(`batching`), its engines (`engines`), request models (`api`), Prometheus metrics (`metrics`)
and the Insights page (`static/`); `client`: its Python client (`run.py --mode=query`).
"""
