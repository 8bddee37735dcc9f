"""The model pipeline, one module per stage of the journey (no Qt anywhere in here).

Stages, in the article's order, each named as its pane in ``llm_lens.desktop.panes``:

- :mod:`.tokens` text → token ids (and cl100k_base beside them)
- :mod:`.embeddings` the embedding table, its projection, each token's path through the layers
- :mod:`.positions` how the model encodes position (RoPE as the model computes it)
- :mod:`.attention` each head's softmax(q·kᵀ) over the positions it may see
- :mod:`.layers` the residual stream through the stack, and the logit lens
- :mod:`.kvcache` the bytes the KV cache holds (and :mod:`.kvconfig`: what a config implies)
- :mod:`.logits` the next-token scores and their softmax
- :mod:`.sampling` temperature, top-k, top-p, min-p, repetition penalty: transformers' own

Beneath them: :mod:`.records` (the frozen numpy records that leave the model thread),
:mod:`.errors`, :mod:`.runtime` (threads, device, dtype), :mod:`.loading` and :mod:`.anatomy`
(where a model keeps its pieces). Above them: :mod:`.loop` (the step loop and its hooks),
:mod:`.runs` (branches, prefix reuse, comparisons, beam search, revival), :mod:`.sessions` (the
``.llmlens`` file), :mod:`.exports` (JSON trace, HTML report) and :mod:`.cli`.
"""
