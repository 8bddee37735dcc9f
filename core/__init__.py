"""The model pipeline, one module per stage of the journey (no Qt anywhere in here).

Stages, in the article's order, each named as its pane in ``llm_lens.desktop.panes`` and as its
"how to read this" card in :mod:`.cards`; none imports another (the layers contract in
``pyproject.toml`` checks it):

- :mod:`.tokens` text → token ids (and cl100k_base beside them)
- :mod:`.embeddings` the embedding table, its projection, each token's path through the layers
- :mod:`.positions` how the model encodes position (RoPE as the model computes it)
- :mod:`.attention` each head's softmax(q·kᵀ) over the positions it may see (a package: the
  registered attention function, the taps it records into, the prompt's maps)
- :mod:`.layers` the residual stream through the stack, and the logit lens
- :mod:`.experts` a mixture of experts' routers: which experts each token went to
- :mod:`.kvcache` the bytes the KV cache holds, measured, beside the formula that predicts them
  from a loaded model or from a config.json alone (a package)
- :mod:`.logits` the next-token scores and their softmax
- :mod:`.sampling` temperature, top-k, top-p, min-p, repetition penalty: transformers' own

The journey's map, bottom to top::

    records errors fileio crashlog   the frozen numpy records that leave the model thread
    runtime                          threads, device, dtype
    loading anatomy                  a spec → a loaded model; where a model keeps its pieces
    tokens | embeddings | positions | attention | layers | experts | kvcache | logits | sampling
    explain arithmetic               "why this token?"; the arithmetic the cards quote
    loop cards                       the step loop and its hooks; each stage's card (cards/<stage>)
    runs                             branches, prefix reuse, comparisons, beam search, revival
    sessions exports                 the ``.llmlens`` file; JSON trace, HTML report
    cli                              the commands
"""
