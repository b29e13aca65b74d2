"""The search: greedy decoding, sampling and beam search over any model's decoding step.

A model decodes through `driver.infer` when it implements the small interface of
`interface.py` (`SearchModel`): `start_decoding` runs its encoder once and returns a
`Decoder`, i.e. one step `ids -> logits` with the states that follow the beams and,
optionally, the beam-slot storage that does not. `Transformer` and `TransformerEnsemble`
implement it; the search knows nothing of their layers.

Modules: `beam_search` (t2t's finished/alive beam search, t2t's name and signature),
`sampling` (argmax, temperature, top-k, top-p), `greedy` (t2t's greedy loop),
`interface` (the model's side), `driver` (cache layouts, XLA bucketing, the compiled
decoders). This room sits beneath `models/` (which call it) and imports no other
folder of t2t_lite.
"""
