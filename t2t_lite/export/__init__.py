"""Exporting a trained model (`run.py --mode=export`, t2t-exporter).

`export`: the SavedModel and its signatures (strings in, strings out), with the in-graph
encoders `subword_graph` (t2t's subword encoder in core TensorFlow ops),
`sentencepiece_graph` (tensorflow-text's SentencePiece encoder, for SentencePiece runs) and
`alignment_graph` (word alignments in the graph); `ct2`: a CTranslate2 model directory and its
Translator (raw text in, t2t-decoder's batching), `ct2_options` its search and device options.
The HTTP server that serves them is `t2t_lite.serving`.
"""
