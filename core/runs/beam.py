"""Beam search, step by step, with the exact semantics of transformers' ``_beam_search``.

Each step keeps the 2·B best continuations (B = beams; more when the model has several EOS ids)
of all live beams by cumulative log-probability. Of those, the best B that did not stop stay
live; those among the first B that stopped (EOS, or the length limit) become finished
hypotheses scored ``logprob / generated_len ** length_penalty``. The search ends when no live
beam can beat the worst kept hypothesis (the heuristic of ``early_stopping``), when all B slots
are full and ``early_stopping is True``, or when every candidate stopped. The tensor operations
mirror transformers' own (same topk calls, same −1e9 masking), so ties resolve the same way and
the best beam equals ``model.generate(num_beams=B, do_sample=False, ...)``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ParamSpec

import torch

from llm_lens.core.errors import PromptError, SamplingError
from llm_lens.core.loop.engine import EAGER_PREFILL_LIMIT, Engine
from llm_lens.core.records import PromptTokens
from llm_lens.core.runtime import synchronize

NEG = -1.0e9  # transformers' "impossible" score
MIN_BEAMS, MAX_BEAMS = 2, 8
P = ParamSpec("P")


@dataclass(frozen=True)
class BeamCandidate:
    """One of a step's best continuations and what became of it."""

    beam: int  # the live beam (of the previous step) it extends
    token_id: int
    text: str
    score: float  # cumulative log-probability
    fate: str  # "live", "finished", "stopped" (stopped outside the first B) or "pruned"


@dataclass(frozen=True)
class Hypothesis:
    """A finished beam: its generated tokens (with the EOS it ended on) and its score."""

    token_ids: tuple[int, ...]
    score: float  # cumulative log-probability / len(token_ids) ** length_penalty


@dataclass(frozen=True)
class BeamStep:
    """The search after one forward pass over every live beam."""

    index: int
    beams: tuple[tuple[int, ...], ...]  # live beams' generated token ids, best first
    scores: tuple[float, ...]  # their cumulative log-probabilities
    parents: tuple[int, ...]  # the previous step's beam each live beam extends
    candidates: tuple[BeamCandidate, ...]  # the best continuations, best first
    finished: tuple[Hypothesis, ...]  # the best finished hypotheses so far (at most B)
    forward_ms: float

    @property
    def pruned(self) -> tuple[BeamCandidate, ...]:
        return tuple(c for c in self.candidates if c.fate in ("pruned", "stopped"))


@dataclass(frozen=True)
class BeamResult:
    prompt: PromptTokens
    num_beams: int
    length_penalty: float
    early_stopping: bool | str
    steps: tuple[BeamStep, ...]
    token_ids: tuple[int, ...]  # the best hypothesis' generated tokens
    score: float  # its length-normalised score (generate's ``sequences_scores``)
    text: str
    finish_reason: str  # "done" or "cancelled"


class BeamSearch:
    """Iterate to get :class:`BeamStep` records; :meth:`result` gives the best hypothesis."""

    def __init__(
        self,
        engine: Engine,
        prompt: PromptTokens,
        num_beams: int,
        max_new_tokens: int,
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
        eos_ids: Iterable[int] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        if not MIN_BEAMS <= num_beams <= MAX_BEAMS:
            raise SamplingError(
                f"beams must be between {MIN_BEAMS} and {MAX_BEAMS}; got {num_beams}"
            )
        if max_new_tokens < 1:
            raise PromptError(f"max new tokens must be ≥ 1; got {max_new_tokens}")
        if early_stopping not in (True, False, "never"):
            raise SamplingError(f"early stopping is True, False or 'never'; got {early_stopping!r}")
        self.engine, self.prompt, self.b = engine, prompt, num_beams
        self.n, self.lp, self.early = max_new_tokens, float(length_penalty), early_stopping
        self.eos = torch.tensor(sorted(engine.eos_ids if eos_ids is None else set(eos_ids)))
        self.keep = max(2, 1 + len(self.eos)) * num_beams  # candidates kept per step
        self.cancel = cancel or threading.Event()
        self.steps: list[BeamStep] = []
        self.finish_reason = "running"
        self._init_state()

    def _init_state(self) -> None:
        b, n = self.b, self.n
        fill = int(self.eos[0]) if len(self.eos) else -1
        self.run_seqs = torch.full((1, b, n), fill, dtype=torch.int64)  # (1, beams, new tokens)
        self.run_scores = torch.zeros((1, b))
        self.run_scores[:, 1:] = NEG  # only beam 0 may extend the prompt at step 0
        self.fin_seqs = self.run_seqs.clone()
        self.fin_lens = torch.zeros((1, b), dtype=torch.int64)
        self.fin_scores = torch.full((1, b), NEG)
        self.fin_done = torch.zeros((1, b), dtype=torch.bool)
        self.unsatisfied = torch.ones((1, 1), dtype=torch.bool)  # the heuristic allows more
        self.top_mask = torch.arange(self.keep) < b  # (keep,)
        self.cache: Any = None

    def __iter__(self) -> Iterator[BeamStep]:
        with torch.inference_mode():
            ids = torch.tensor([self.prompt.ids] * self.b)  # (beams, prompt_len)
            self.cache = self.engine.new_cache()
            for t in range(self.n):
                step, hits = self._step(ids, t)
                self.steps.append(step)
                yield step
                if self._done(hits) or self.cancel.is_set():
                    break
                ids = self.run_seqs[0, :, t : t + 1]  # (beams, 1) last token of each live beam
        self.finish_reason = "cancelled" if self.cancel.is_set() else "done"

    def _forward(self, ids: Any) -> tuple[Any, float]:
        """(beams, vocab) float32 last-position logits; the cache grows by ids' length."""
        eng = self.engine
        t0 = time.perf_counter()
        eager = ids.shape[1] <= EAGER_PREFILL_LIMIT
        logits = eng.forward_batch(ids.to(eng.device), self.cache, eager)  # (beams, vocab)
        synchronize(eng.device)
        return logits.float().cpu(), (time.perf_counter() - t0) * 1e3

    def _step(self, ids: Any, t: int) -> tuple[BeamStep, Any]:
        logits, ms = self._forward(ids)
        log_probs = torch.log_softmax(logits, dim=-1)  # (beams, vocab)
        vocab = log_probs.shape[-1]
        acc = (log_probs + self.run_scores[0, :, None]).reshape(1, -1)  # (1, beams · vocab)
        top_lp, top_idx = torch.topk(acc, k=self.keep)  # (1, keep)
        origin, tokens = top_idx // vocab, top_idx % vocab
        top_seqs = self.run_seqs[:, origin[0]].clone()  # (1, keep, new tokens)
        top_seqs[:, :, t] = tokens
        hits = torch.isin(tokens, self.eos) | (t + 1 >= self.n)  # (1, keep) stop criteria
        run_lp = top_lp + hits.to(torch.float32) * NEG
        live = torch.topk(run_lp, k=self.b)[1]  # (1, beams)
        did = hits & self.top_mask[None, :]
        self._update_finished(top_seqs, top_lp, did, t)
        self.run_seqs, self.run_scores = top_seqs[:, live[0]], run_lp[:, live[0]]
        parents = origin[0, live[0]]
        self.cache.reorder_cache(parents.to(self.engine.device))
        self._update_heuristic(t + 1)
        return self._record(t, origin, tokens, top_lp, live, did, hits, parents, ms), hits

    def _update_finished(self, top_seqs: Any, top_lp: Any, did: Any, t: int) -> None:
        scores = top_lp / ((t + 1) ** self.lp)
        full = torch.all(self.fin_done, dim=-1, keepdim=True) & (self.early is True)
        scores = scores + full.to(torch.float32) * NEG
        scores = scores + (~self.unsatisfied).to(torch.float32) * NEG
        scores = scores + (~did) * NEG
        merged_seqs = torch.cat((self.fin_seqs, top_seqs), dim=1)
        merged_scores = torch.cat((self.fin_scores, scores), dim=1)
        new_lens = torch.full((1, top_seqs.shape[1]), t + 1, dtype=torch.int64)
        merged_lens = torch.cat((self.fin_lens, new_lens), dim=1)
        merged_done = torch.cat((self.fin_done, did), dim=1)
        best = torch.topk(merged_scores, k=self.b)[1][0]
        self.fin_seqs, self.fin_scores = merged_seqs[:, best], merged_scores[:, best]
        self.fin_lens, self.fin_done = merged_lens[:, best], merged_done[:, best]

    def _update_heuristic(self, generated: int) -> None:
        """transformers' ``_check_early_stop_heuristic`` after ``generated`` new tokens."""
        length = self.n if self.early == "never" and self.lp > 0.0 else generated
        best_running = self.run_scores[:, :1] / (length**self.lp)
        worst = torch.where(self.fin_done, torch.min(self.fin_scores, dim=1, keepdim=True)[0], NEG)
        self.unsatisfied = self.unsatisfied & torch.any(best_running > worst, dim=-1, keepdim=True)

    def _done(self, hits: Any) -> bool:
        improvable = bool(torch.any(self.unsatisfied))
        open_beam = not (bool(torch.all(self.fin_done)) and self.early is True)
        return not (improvable and open_beam and not bool(torch.all(hits)))

    def _record(
        self,
        t: int,
        origin: Any,
        tokens: Any,
        top_lp: Any,
        live: Any,
        did: Any,
        hits: Any,
        parents: Any,
        ms: float,
    ) -> BeamStep:
        texts = self.engine.texts
        live_set = set(live[0].tolist())
        candidates = []
        for j in range(self.keep):
            fate = "live" if j in live_set else "pruned"
            if bool(hits[0, j]):
                fate = "finished" if bool(did[0, j]) else "stopped"
            tid = int(tokens[0, j])
            candidates.append(
                BeamCandidate(int(origin[0, j]), tid, texts.text(tid), float(top_lp[0, j]), fate)
            )
        return BeamStep(
            index=t,
            beams=tuple(tuple(row[: t + 1].tolist()) for row in self.run_seqs[0]),
            scores=tuple(self.run_scores[0].tolist()),
            parents=tuple(parents.tolist()),
            candidates=tuple(candidates),
            finished=self.finished(),
            forward_ms=ms,
        )

    def finished(self) -> tuple[Hypothesis, ...]:
        """The kept finished hypotheses, best first (empty slots left out)."""
        rows = zip(
            self.fin_seqs[0], self.fin_lens[0], self.fin_scores[0], self.fin_done[0], strict=True
        )
        return tuple(
            Hypothesis(tuple(seq[: int(n)].tolist()), float(s)) for seq, n, s, d in rows if d
        )

    def run(self) -> BeamResult:
        """Search to the end (or until cancelled); the result."""
        for _ in self:
            pass
        return self.result()

    def result(self) -> BeamResult:
        """The best finished hypothesis; the best live beam if the search was cancelled first."""
        done = self.finished()
        if done:
            ids, score = done[0].token_ids, done[0].score
        else:
            t = len(self.steps)
            ids = tuple(self.run_seqs[0, 0, :t].tolist())
            score = float(self.run_scores[0, 0]) / max(t, 1) ** self.lp
        return BeamResult(
            self.prompt,
            self.b,
            self.lp,
            self.early,
            tuple(self.steps),
            ids,
            score,
            self.engine.texts.join(ids),
            self.finish_reason,
        )


def _whole(search: Callable[P, BeamSearch]) -> Callable[P, BeamResult]:
    def run(*args: P.args, **kwargs: P.kwargs) -> BeamResult:
        return search(*args, **kwargs).run()

    run.__doc__ = "Run a whole beam search (the arguments of :class:`BeamSearch`)."
    return run


beam_search = _whole(BeamSearch)  # BeamSearch's own parameters, run to the end
