"""Immutable records that leave the worker: frozen dataclasses of read-only numpy arrays.

No torch tensor, ``ModelOutput`` or cache object is ever stored here, so a GUI thread may hold a
record for as long as it likes while the model goes on mutating its KV cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

# what a loaded model is: its own module, named here too (the records carry it)
from llm_lens.core.model_info import ModelInfo as ModelInfo
from llm_lens.core.model_info import head_sharing as head_sharing

if TYPE_CHECKING:  # a stage's record, named here only for the type (records sit below the stages)
    from llm_lens.core.experts import ExpertRouting


def frozen(array: Any, dtype: Any = None) -> np.ndarray:
    """A read-only numpy copy (pyqtgraph keeps views, so the source must never change)."""
    out = np.array(array, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


BYTE_SEP = " "  # between the hex bytes (a thin space would print as \u2009 in a repr)


def bytes_text(raw: bytes) -> str:
    """Text of token bytes for any label: UTF-8 where the bytes form whole characters, and each
    run of bytes that forms no character (a piece of a split one) as ‹e4 bd›, never "\ufffd".

    The one place token bytes become text: token texts, top texts, lens texts, chip labels,
    attention axes and the response (:func:`generated_text`) all come through here.
    """
    parts: list[str] = []
    pos = 0
    while pos < len(raw):
        try:
            parts.append(raw[pos:].decode("utf-8"))
            break
        except UnicodeDecodeError as exc:
            parts.append(raw[pos : pos + exc.start].decode("utf-8"))
            end = pos + exc.end
            while end < len(raw) and _undecodable_at(raw, end):
                end += 1
            parts.append("‹" + raw[pos + exc.start : end].hex(BYTE_SEP) + "›")
            pos = end
    return "".join(parts)


def _undecodable_at(raw: bytes, pos: int) -> bool:
    """True when no UTF-8 character starts at ``raw[pos]``."""
    try:
        raw[pos : pos + 4].decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start == 0
    return False


def generated_text(tokens: Sequence[TokenInfo]) -> str:
    """What a run wrote so far: its non-special tokens' bytes joined, then :func:`bytes_text`, so
    a character split over tokens shows as its bytes (‹f0 9f›) until its last byte arrives."""
    return bytes_text(b"".join(t.raw for t in tokens if not t.special))


@dataclass(frozen=True)
class TokenInfo:
    """One token: id, its text, its raw bytes (may be a partial UTF-8 character), and where it is.

    ``start``/``end`` are character offsets into the text the model read (the rendered chat
    template in chat mode), or -1 for generated tokens. ``from_user`` marks a special token that
    was parsed out of the user's own text (only when they asked for that); every other special
    token of a prompt was written by the chat template or the tokenizer.
    """

    id: int
    text: str
    raw: bytes
    special: bool = False
    start: int = -1
    end: int = -1
    from_user: bool = False

    @property
    def is_partial(self) -> bool:
        """True when the bytes are not a complete UTF-8 sequence on their own."""
        try:
            self.raw.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False


@dataclass(frozen=True)
class PromptTokens:
    """The exact token sequence the model reads for a prompt, with its rendered text."""

    text: str  # what the user typed
    rendered: str  # what the model reads (chat template applied, or the text itself)
    chat: bool
    tokens: tuple[TokenInfo, ...]
    parse_special: bool = False  # the user's special-token text became control tokens

    @property
    def user_special_count(self) -> int:
        """Special tokens that came from the user's text (0 unless ``parse_special``)."""
        return sum(t.from_user for t in self.tokens)

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class KVCacheStats:
    """KV-cache memory after a forward pass: measured from the tensors held, and by formula."""

    tokens: int  # tokens the model has seen (a windowed layer holds fewer)
    bytes_total: int
    bytes_added: int
    per_layer: np.ndarray  # (layers, 2) int64: key bytes, value bytes
    formula_bytes: int  # Σ layers 2 × kv_heads × head_dim × dtype bytes × tokens held
    mha_bytes: int  # the same context with every query head keeping its own K and V
    device_allocated: int | None = None  # CUDA only
    device_reserved: int | None = None
    # per layer, what it holds: tokens (a sliding-window layer stops at window − 1) and its window
    # (0 = full attention); None / () in records read from session files, which do not store them
    held_tokens: np.ndarray | None = None  # (layers,) int64
    windows: tuple[int, ...] = ()
    cached_kv_heads: int | None = None  # the heads axis of the tensors held (Falcon: all heads)
    # the constant part, included in bytes_total and formula_bytes: conv and recurrent state of
    # Mamba, DeltaNet and convolution layers, which does not grow with the context
    state_bytes: int = 0
    state_formula_bytes: int = 0
    state_per_layer: np.ndarray | None = None  # (layers,) int64; None where no layer has state
    # (device, bytes) of the keys and values per device they sit on ("cpu", "cuda:0"…): a
    # model spread by a device map keeps each layer's cache where the layer runs (the constant
    # state is not in it); () when unknown (records read from session files)
    by_device: tuple[tuple[str, int], ...] = ()
    # the model keeps no KV cache (GPT-1): nothing held, no formula; each step re-reads ``tokens``
    no_cache: bool = False
    # included in bytes_total and formula_bytes: the other tensors a cache layer keeps,
    # measured and by formula (DeepSeek-V4's compressors: waiting tokens, compressed entries)
    compressed_bytes: int = 0
    compressed_formula_bytes: int = 0

    @property
    def growing_bytes(self) -> int:
        """The K/V that grow with the context: the total less the constant state."""
        return self.bytes_total - self.state_bytes


@dataclass(frozen=True)
class StageSummary:
    """The distribution after one sampling stage (or ``raw``), reduced to what a pane plots."""

    name: str
    removed_mass: float  # probability mass (of the previous stage's distribution) set to zero
    kept: int  # tokens with non-zero probability
    entropy: float  # nats
    top_ids: np.ndarray  # (n,) int64
    top_probs: np.ndarray  # (n,) float32


@dataclass(frozen=True)
class StepTiming:
    """Where one step's wall time went, on the model thread.

    ``forward_ms``, ``sample_ms`` and ``capture_ms`` are wall times; the ``*_wait_ms`` are the
    part of each during which the model thread was off the CPU (wall minus the thread's CPU
    time: waiting for the GIL, or for a core another thread or process held). They are measured
    only where wall minus CPU time is that waiting (``waits_measured``): a CPU device with one
    torch thread, or a GPU whose waits for the device keep the thread on the CPU (checked when
    the model loads, :func:`llm_lens.core.loop.clock.off_cpu_share`); elsewhere they are 0 and
    ``waits_measured`` is False. ``queue_ms`` is the part of those waits the thread was ready but
    every core was busy (Linux only); the rest it was blocked: on the GIL. ``between_ms`` is the
    wall time from the previous step's hand-over to this step's start: whatever consumed the
    record (a window's signals, its queued analyses) ran then.
    """

    forward_ms: float
    sample_ms: float
    capture_ms: float
    forward_wait_ms: float = 0.0
    sample_wait_ms: float = 0.0
    capture_wait_ms: float = 0.0
    between_ms: float = 0.0
    queue_ms: float = 0.0
    waits_measured: bool = True

    @property
    def total_ms(self) -> float:
        """The step as the loop times it (TTFT and inter-token latency are built from this)."""
        return self.forward_ms + self.sample_ms + self.capture_ms

    @property
    def wait_ms(self) -> float:
        """Time inside the step the model thread spent off the CPU."""
        return self.forward_wait_ms + self.sample_wait_ms + self.capture_wait_ms

    @property
    def blocked_ms(self) -> float:
        """Waiting with a core free: blocked on a lock, the GIL above all."""
        return self.wait_ms - self.queue_ms

    @property
    def own_ms(self) -> float:
        """The model's own time: the step minus its waits."""
        return self.total_ms - self.wait_ms

    @property
    def wall_ms(self) -> float:
        """Wall time from the previous step's hand-over to this one's: step plus between."""
        return self.total_ms + self.between_ms


@dataclass(frozen=True)
class StepRecord:
    """One step of the loop: a forward pass (the prefill, or one decode) and the token it chose.

    Index 0 is the prefill, which reads the whole prompt and chooses the first response token;
    index i > 0 reads response token i-1 through the KV cache and chooses token i.
    """

    run_id: int
    index: int
    position: int  # position of the query that produced the logits
    token: TokenInfo  # the chosen token
    prob: float  # under the raw (unprocessed) distribution
    logprob: float
    rank: int  # 0-based rank under the raw distribution
    entropy: float  # of the raw distribution, nats
    logits: np.ndarray  # (vocab,) float32 raw logits, kept for re-sampling without the model
    top_ids: np.ndarray  # (N,) int64, raw distribution order
    top_logits: np.ndarray  # (N,) float32
    top_probs: np.ndarray  # (N,) float32
    top_texts: tuple[str, ...]
    stages: tuple[StageSummary, ...]  # raw, then each active processor in order
    attention: np.ndarray  # (layers, heads, kv_len) float32: the query's attention row
    hidden: np.ndarray  # (layers + 1, hidden) float32: residual stream at the query position
    attn_update: np.ndarray  # (layers, hidden) float32: what each attention block added
    kv: KVCacheStats
    timing: StepTiming
    context_ids: np.ndarray  # (position + 1,) int64: every token the model had read
    finish_reason: str | None = None  # set on the last step: eos, stop, length, context, cancelled
    # (4, layers + 1) float32 norms of the residual, attention update, MLP update and layer
    # update (rows 1-3 start at column 1), set where a session kept only the norms: then
    # hidden and attn_update have no columns (shape (layers + 1, 0) and (layers, 0))
    norms: np.ndarray | None = None
    routing: ExpertRouting | None = None  # mixture-of-experts models only: the routers' choices
    # read from a session that kept the logits compactly: how many tokens' logits are their
    # tail bin's level rather than their own value (0: every logit is the model's own)
    tail_levels: int = 0
    # made by an engine that returned only the top alternatives (core.engines): prob and
    # logprob are the engine's, but entropy, rank and the stages come from those alternatives
    # alone, so they are approximate (False: computed from the whole distribution)
    approximate: bool = False

    @property
    def is_prefill(self) -> bool:
        return self.index == 0

    @property
    def mlp_update(self) -> np.ndarray:
        """(layers, hidden): residual change of each layer minus its attention part."""
        out: np.ndarray = np.diff(self.hidden, axis=0) - self.attn_update
        return out

    @property
    def residual_norms(self) -> np.ndarray:
        """(layers + 1,) norm of the residual stream after each layer (0: the embeddings)."""
        if self.norms is not None:
            row: np.ndarray = self.norms[0]
            return row
        norms: np.ndarray = np.linalg.norm(self.hidden, axis=-1)
        return norms

    @property
    def attn_norms(self) -> np.ndarray:
        """(layers,) norm of what each attention block added."""
        if self.norms is not None:
            attn: np.ndarray = self.norms[1, 1:]
            return attn
        out: np.ndarray = np.linalg.norm(self.attn_update, axis=-1)
        return out

    @property
    def mlp_norms(self) -> np.ndarray:
        """(layers,) norm of what each MLP added."""
        if self.norms is not None:
            mlp: np.ndarray = self.norms[2, 1:]
            return mlp
        out: np.ndarray = np.linalg.norm(self.mlp_update, axis=-1)
        return out

    @property
    def update_norms(self) -> np.ndarray:
        """(layers,) norm of each layer's whole change to the residual stream."""
        if self.norms is not None:
            whole: np.ndarray = self.norms[3, 1:]
            return whole
        out: np.ndarray = np.linalg.norm(np.diff(self.hidden, axis=0), axis=-1)
        return out

    def norm_table(self) -> np.ndarray:
        """(4, layers + 1) float32: :attr:`norms`, computed from the vectors if not stored."""
        if self.norms is not None:
            return self.norms
        out = np.zeros((4, self.hidden.shape[0]), np.float32)
        out[0] = self.residual_norms
        out[1:, 1:] = (self.attn_norms, self.mlp_norms, self.update_norms)
        return out


@dataclass(frozen=True)
class PrefillCapture:
    """Per-position data of the prompt's forward pass, for the panes that look at the prompt."""

    run_id: int
    prompt: PromptTokens
    hidden: np.ndarray  # (layers + 1, tokens, hidden) float32; [0] is the input embeddings
    positions: np.ndarray  # (tokens,) int64


@dataclass(frozen=True)
class RunSummary:
    """How a run ended and how fast it went."""

    run_id: int
    prompt: PromptTokens
    generated_ids: tuple[int, ...]
    output_text: str
    finish_reason: str
    ttft_ms: float
    mean_itl_ms: float
    tokens_per_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls, run_id: int, prompt: PromptTokens, steps: Sequence[StepRecord], finish: str | None
    ) -> RunSummary:
        """TTFT is the prefill step's whole time; inter-token latency averages decode steps."""
        ttft = steps[0].timing.total_ms if steps else 0.0
        itl = [s.timing.total_ms for s in steps[1:]]
        total_s = sum(s.timing.total_ms for s in steps) / 1e3
        return cls(
            run_id=run_id,
            prompt=prompt,
            generated_ids=tuple(s.token.id for s in steps),
            output_text=generated_text([s.token for s in steps]),
            finish_reason=finish or "running",
            ttft_ms=ttft,
            mean_itl_ms=float(np.mean(itl)) if itl else 0.0,
            tokens_per_s=len(steps) / total_s if total_s > 0 else 0.0,
        )
