"""Serving t2t_lite (and original tensor2tensor) models outside TensorFlow.

`ct2`: export to a CTranslate2 model directory and translate raw text with it.
"""
