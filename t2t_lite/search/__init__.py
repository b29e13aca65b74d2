"""The search: greedy decoding, sampling and beam search over any model's decoding step.

A search is a loop (`loop.run_steps`) of the strategy's step and the model's step
(`interface.py`): the strategy, `greedy.Greedy` (argmax or a draw, `sampling.sample`) or
`beam_search.BeamSearch`, is written once, `step(state, logits, t) -> state` with a step t
per sentence, and runs in the batch search (`driver.infer`, `greedy.search`,
`beam_search.search`) and in the continuous one (`continuous.SlotSearch`, the server's
continuous batching). The model owns its cache: it decodes through `start_decoding` (a
`Decoder`: its step, its cache, how the cache follows the beams) and, for continuous
batching, `slot_decoding` (a `SlotDecoding`: it takes in, evicts and compacts rows). The
search knows no tensor layout of a model; `Transformer` and `TransformerEnsemble` implement
the interface.

Modules: `interface` (the two sides), `loop` (the one while_loop), `greedy`, `beam_search`
(t2t's finished/alive beam search, t2t's name and signature), `sampling` (argmax,
temperature, top-k, top-p), `rows` (a row's column at its own step), `driver` (cache
layouts, XLA bucketing, the compiled decoders), `continuous` (continuous batching). This
package sits beneath `models/` (which call it) and imports nothing of t2t_lite outside it.
"""
