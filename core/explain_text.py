"""The words of the "how to read this" cards, filled with the selected step's own numbers.

Each builder takes records (never a widget) and returns an :class:`Explainer`: what the picture
shows, the live numbers, the phenomena those numbers show (computed in
:mod:`llm_lens.core.arithmetic`), and one thing to try. The desktop cards and the tour show them;
a notebook can print them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_lens.core.arithmetic import (
    StageProb,
    draw_at,
    head_pattern,
    recorded_draw,
    recorded_probs,
    softmax_steps,
    strongest_key,
)
from llm_lens.core.records import ModelInfo, StepRecord
from llm_lens.core.sampling import SamplingParams, staged


@dataclass(frozen=True)
class Explainer:
    """One card: its headline (a sentence with numbers), what it shows, more numbers, a try."""

    headline: str
    shows: str
    numbers: tuple[str, ...] = ()
    phenomena: tuple[str, ...] = ()
    try_this: str = ""


def q(text: str) -> str:
    """A token's text quoted so its spaces show: ' type'."""
    return "'" + text.replace("\n", "\\n").replace("\t", "\\t") + "'"


def pct(p: float) -> str:
    """91 %, 0.42 %, 3.1e-05 %: enough digits to be non-zero."""
    value = 100 * p
    if value >= 10 or value == 0:
        return f"{value:.0f} %"
    if value >= 0.1:
        return f"{value:.2g} %"
    return f"{value:.2g} %"


def tokens_card(
    texts: Sequence[str], ids: Sequence[int], n_prompt: int, position: int, model: str
) -> Explainer:
    """The token sequence, and the selected token's id and place in it."""
    shows = (
        "Each chip is one token id of the model's vocabulary: the prompt (chat template "
        "included) and then the response, each chip coloured by the probability the model "
        "gave the token it chose."
    )
    headline = f"{model} read the prompt as {n_prompt} tokens and wrote {len(texts) - n_prompt}."
    numbers = []
    if 0 <= position < len(texts):
        part = "prompt" if position < n_prompt else f"response (step {position - n_prompt})"
        headline = (
            f"Token {position} is {q(texts[position])}, id {ids[position]}, in the {part}; "
            f"the prompt is {n_prompt} tokens."
        )
        numbers.append(f"{len(texts)} tokens in all, so the KV cache holds {len(texts)} rows.")
    return Explainer(
        headline, shows, tuple(numbers), (), "Click a chip: every pane highlights that token."
    )


def embeddings_card(
    text: str | None,
    token_id: int | None,
    xy: Any,
    norm: float | None,
    explained: Any,
    vocab: int,
) -> Explainer:
    """Where the selected token's input embedding sits in the 2-D PCA of the vocabulary."""
    shows = (
        f"Every dot is one of the {vocab:,} rows of the input embedding matrix, projected to its "
        "two principal components; cyan circles are prompt tokens, orange squares response "
        "tokens, magenta crosses nearest neighbours (cosine similarity)."
    )
    headline = "Select a token to see where its embedding vector sits."
    numbers = []
    if explained is not None:
        ex = np.asarray(explained)
        numbers.append(f"PC1 explains {ex[0]:.1%} and PC2 {ex[1]:.1%} of the variance.")
    if text is not None and xy is not None:
        headline = (
            f"{q(text)} (id {token_id}) sits at PC1 {float(xy[0]):.3f}, PC2 {float(xy[1]):.3f}"
            + (f"; its embedding vector has norm {norm:.3f}." if norm is not None else ".")
        )
    return Explainer(
        headline,
        shows,
        tuple(numbers),
        (),
        "Click a dot for its nearest neighbours; switch to 'layer paths' to follow a token "
        "through the layers.",
    )


def positions_card(
    theta: float | None, inv_freq: Any, position: int, text: str | None
) -> Explainer:
    """How far RoPE has turned the selected position's fastest and slowest dimension pairs."""
    f = np.asarray(inv_freq, np.float64)
    shows = (
        f"RoPE rotates each of the {f.shape[0]} dimension pairs of every query and key by "
        "position × frequency; the left image is that angle (mod 2π) for every prompt "
        "position, so the dot product of a query and a key depends on their distance."
    )
    p = max(position, 0)
    fast, slow = p * f[0], p * f[-1]
    who = f"position {p} ({q(text)})" if text is not None else f"position {p}"
    headline = (
        f"At {who} the fastest pair has turned {fast:.2f} rad ({fast % (2 * math.pi):.2f} "
        f"mod 2π), the slowest {slow:.3g} rad."
    )
    waves = 2 * math.pi / f
    base = f"θ = {theta:g}: " if theta else ""
    numbers = (f"{base}wavelengths run from {waves.min():.3g} to {waves.max():.3g} tokens.",)
    return Explainer(headline, shows, numbers, (), "Select a later token: its row turns further.")


def attention_card(
    layer: int,
    head: int,
    matrix: Any,
    block: int,
    texts: Sequence[str],
    position: int,
) -> Explainer:
    """The selected token's row in one head's map, and the patterns that head shows."""
    w = np.asarray(matrix)
    who = f"head {head}" if head >= 0 else "the mean of its heads"
    shows = (
        f"Layer {layer}, {who}: row = the query token reading, column = the key token "
        "it reads; each row sums to 1 (softmax of q·k / √d). The grid shows every layer × head."
    )
    headline = f"Layer {layer}, {who}: select a token to read its row."
    row = position // max(block, 1)
    if 0 <= position < len(texts) and row < w.shape[0]:
        k, weight = strongest_key(w[row, : row + 1])
        key_pos = k * block
        headline = (
            f"{q(texts[position])} (position {position}) puts its largest weight, "
            f"{weight:.3f}, on {q(texts[key_pos])} (position {key_pos}) in layer {layer}, "
            f"{who}."
        )
    pattern = head_pattern(w) if block == 1 else None
    phenomena = tuple(pattern.names()) if pattern is not None else ()
    numbers: tuple[str, ...] = ()
    if pattern is not None and pattern.rows:
        numbers = (
            f"Mean weight on the first token {pattern.sink:.3f}; on the previous token "
            f"{pattern.previous:.3f} (over {pattern.rows} rows).",
        )
    return Explainer(
        headline, shows, numbers, phenomena, "Click a tile in the grid to compare heads."
    )


def layers_card(step: StepRecord, lens: Any) -> Explainer:
    """Residual growth through the layers and where the logit lens first agrees."""
    norms = step.residual_norms
    biggest = int(np.argmax(step.update_norms))
    shows = (
        "The residual stream at the selected step's query: its norm after each layer, what "
        "attention and the MLP of each layer added, and the logit lens (the final norm and "
        "unembedding applied to every layer's residual)."
    )
    headline = (
        f"Step {step.index}: the residual norm grows from {norms[0]:.2f} (embedding) to "
        f"{norms[-1]:.2f} after layer {len(norms) - 1}; layer {biggest + 1} adds the most."
    )
    numbers = []
    if lens is not None:
        hits = np.flatnonzero(np.asarray(lens.top_ids)[:, 0] == lens.final_id)
        final = q(lens.top_texts[-1][0])
        if hits.size:
            numbers.append(f"The lens' top-1 is already the final {final} at layer {hits[0]}.")
        else:
            numbers.append(f"The lens never predicts the final {final} before the end.")
    return Explainer(
        headline,
        shows,
        tuple(numbers),
        (),
        "Select step 0 and open the Prompt lens tab to see every position's guess.",
    )


def _sharing_text(info: ModelInfo, saving: float) -> str:
    kind = info.head_sharing
    if kind == "MHA":
        return f"Multi-head attention (MHA): each of the {info.num_heads} heads caches its own K/V."
    what = "Multi-query" if kind == "MQA" else "Grouped-query"
    return f"{what} attention ({kind}) saves ×{saving:.3g} against full MHA."


def kvcache_card(info: ModelInfo, step: StepRecord) -> Explainer:
    kv = step.kv
    shows = (
        "The bytes the KV cache holds after each step, measured from its tensors, against "
        "the formula; the dashed line is what full multi-head attention would need."
    )
    headline = (
        f"Step {step.index}: 2 × {info.num_layers} layers × {info.num_kv_heads} KV heads × "
        f"{info.head_dim} × {info.dtype_bytes} bytes × {kv.tokens} tokens = "
        f"{kv.formula_bytes:,} bytes; measured {kv.bytes_total:,}."
    )
    saving = kv.mha_bytes / kv.bytes_total if kv.bytes_total else float("nan")
    numbers = (_sharing_text(info, saving),)
    return Explainer(headline, shows, numbers, (), "Run a longer prompt: the line stays straight.")


DENSE_TRY = "Load a mixture-of-experts model (Mixtral, Qwen-MoE, OLMoE) to see its routers."


def experts_card(routing: Any, text: str | None, model: str = "This model") -> Explainer:
    """One token's route through the mixture-of-experts layers (``routing``: one row, or None
    for a dense model)."""
    if routing is None:
        return Explainer(
            f"{model} is dense: every token goes through the same MLP in each layer.",
            "A mixture-of-experts model replaces each MLP by many expert MLPs and a router that "
            "sends each token to a few of them; this pane would show which, with their weights.",
            try_this=DENSE_TRY,
        )
    shows = (
        "Left: the router's probability for each expert in each MoE layer, for one token; the "
        "framed cells are the experts it chose, labelled with the weight their outputs were "
        "added with. Right: every token read so far, and the experts it went to."
    )
    first = routing.experts[0, 0]
    names = [str(int(e)) for e in first]
    went = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    who = q(text) if text is not None else f"position {routing.first_position}"
    headline = (
        f"{who} went to experts {went} of {routing.num_experts} in layer "
        f"{int(routing.layers[0])}: only {routing.top_k} of {routing.num_experts} expert MLPs "
        "ran for it there."
    )
    counts = np.bincount(np.asarray(routing.experts[:, 0]).ravel(), minlength=routing.num_experts)
    busiest = int(counts.argmax())
    numbers = (
        f"Across its {len(routing.layers)} MoE layers it used {int((counts > 0).sum())} "
        f"different experts; expert {busiest} was chosen in {int(counts[busiest])} layers.",
        f"The weights come from a {routing.scoring} over the router's scores for each expert.",
    )
    return Explainer(headline, shows, numbers, (), "Click a token on the right to follow it.")


def logits_card(step: StepRecord, params: SamplingParams, run_params: bool = False) -> Explainer:
    """From the chosen token's logit to its probability, and what the settings make of it
    (``run_params``: these are the run's own settings, whose stages the loop recorded)."""
    sm = softmax_steps(step, 5)
    tid = step.token.id
    z = float(np.asarray(step.logits)[tid])
    shows = (
        f"The raw scores (logits) the model gave the top tokens of its {sm.vocab:,}-entry "
        "vocabulary, and their softmax: p = exp(z − max) / Σ exp(z − max)."
    )
    parts = [f"{q(step.token.text)} had logit {z:.1f}; softmax turns it into {pct(step.prob)}"]
    probs = recorded_probs(step, params, tid) if run_params else None
    if probs is None:
        probs = [
            StageProb(s.name, float(s.probs[0, tid]), int((s.probs[0] > 0).sum()))
            for s in staged(step, params)
        ]
    for s in probs[1:]:
        if s.stage == "temperature":
            parts.append(f"at temperature {params.temperature:g} it becomes {pct(s.prob)}")
        elif s.stage in ("top_p", "top_k", "min_p"):
            kept = s.kept
            value = {"top_p": params.top_p, "top_k": params.top_k, "min_p": params.min_p}
            name = s.stage.replace("_", "-")
            parts.append(f"{name} {value[s.stage]:g} keeps {kept:,} token{'s' * (kept != 1)}")
    numbers = tuple(
        f"{q(r.text)}: z = {r.logit:.2f}; z − max = {r.shifted:.2f}; exp = {r.exp:.4g}; "
        f"÷ {sm.total:.4g} = {pct(r.prob)}"
        for r in sm.rows
    )
    return Explainer(
        "; ".join(parts) + ".",
        shows,
        numbers,
        (),
        "Tick 'logits' to see the raw scores the softmax starts from.",
    )


def sampling_card(
    step: StepRecord, params: SamplingParams, run_params: bool = False
) -> tuple[Explainer, Any]:
    """Which token these settings and this seed would draw at this step, stage by stage
    (``run_params``: these are the run's own settings, whose stages the loop recorded)."""
    draw = (recorded_draw(step, params) if run_params else None) or draw_at(step, params)
    text = _text_of(step, draw.token_id)
    how = "greedy picks the largest" if draw.greedy else f"seed {draw.seed} draws"
    trail = " → ".join(f"{s.stage} {pct(s.prob)}" for s in draw.stages)
    same = "the token the run chose" if draw.token_id == step.token.id else "not the run's token"
    headline = f"At step {step.index} {how} {q(text)} (id {draw.token_id}, {same}): {trail}."
    shows = (
        "The selected step's recorded logits run again through each active stage (repetition "
        "penalty, temperature, top-k, top-p, min-p) with the settings above, without the model."
    )
    numbers = tuple(f"after {s.stage}: {s.kept:,} tokens keep probability" for s in draw.stages)
    return (
        Explainer(headline, shows, numbers, (), "Move the temperature slider and watch the draw."),
        draw,
    )


def timing_card(steps: Sequence[StepRecord], n_prompt: int) -> Explainer:
    shows = (
        "Milliseconds per step, split into the forward pass, sampling and capture: the "
        "prefill reads the whole prompt at once, each later step one token and the cache."
    )
    if not steps:
        return Explainer("No run yet.", shows)
    first = steps[0].timing.total_ms
    rest = [s.timing.total_ms for s in steps[1:]]
    headline = f"The prefill read {n_prompt} tokens in {first:.1f} ms (time to first token)"
    if rest:
        headline += f"; each later step took {float(np.median(rest)):.1f} ms (median)"
    return Explainer(headline + ".", shows, (), (), "Run with a longer prompt: only TTFT grows.")


def _text_of(step: StepRecord, token_id: int) -> str:
    if token_id == step.token.id:
        return step.token.text
    hits = np.flatnonzero(np.asarray(step.top_ids) == token_id)
    return step.top_texts[int(hits[0])] if hits.size else f"#{token_id}"


def attribution_card(result: Any) -> Explainer:
    """ "Why this token?": its logit as the sum the view draws (``result`` an ``Explanation``,
    or None before one was asked for)."""
    shows = (
        "The chosen token's logit split into what wrote it: the embedding, each layer's "
        "attention (and each head) and each MLP, through the final norm with its scale held at "
        "this step's value; the chips are coloured by gradient × input; the graph keeps the "
        "routes above the threshold."
    )
    try_this = "Right-click a response token → Why this token?, or pick a rival token in 'vs'."
    if result is None:
        return Explainer("Explain a token: its logit, piece by piece.", shows, (), (), try_this)
    a = result.logits
    attn, mlp = float(np.sum(a.heads)), float(np.sum(a.mlp))
    top = np.unravel_index(int(np.argmax(a.heads)), a.heads.shape)
    headline = (
        f"{q(result.token_text)}: logit {a.logit:.2f} = embedding {a.embed:.2f} + attention "
        f"{attn:.2f} + MLPs {mlp:.2f} + bias {a.residual:.2g}."
    )
    numbers = (
        f"The largest head is layer {int(top[0])}, head {int(top[1])} "
        f"({float(a.heads[top]):.2f}); the final norm's divisor is held at {a.norm_scale:.3g}.",
    )
    return Explainer(headline, shows, numbers, (), try_this)
