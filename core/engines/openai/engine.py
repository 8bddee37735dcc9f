"""Any OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, LM Studio, Ollama) as a
:class:`~llm_lens.core.engines.base.ModelEngine`: a streamed request per run, each token a
:class:`~llm_lens.core.records.StepRecord` with the server's log-probabilities, alternatives
and the stream's timing; what a server cannot report stays empty, and :attr:`provides` says
why and where to get it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from llm_lens.core.engines.base import EngineIdentity, Provides
from llm_lens.core.engines.openai.client import Endpoint, ServerError
from llm_lens.core.engines.openai.ids import TokenIds
from llm_lens.core.engines.openai.prompt import served_info, tokenize_served
from llm_lens.core.engines.openai.reader import background_events
from llm_lens.core.engines.openai.records import StepPlace, step_record
from llm_lens.core.engines.openai.request import OPENAI_HOST, request_body
from llm_lens.core.engines.openai.stream import Reported, tokens_of
from llm_lens.core.errors import LensError
from llm_lens.core.records import ModelInfo, PromptTokens, RunSummary, StepRecord

if TYPE_CHECKING:
    from llm_lens.core.layers import LensResult
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import SamplingParams

DEFAULT_TOP_LOGPROBS = 20  # the most OpenAI's own API returns; vLLM and llama.cpp allow more
EVERY_TOKEN = -1  # vLLM (started with --max-logprobs -1) then returns the whole vocabulary
ELSEWHERE = "open the model locally or through NDIF"
MISSING = {
    "token_ids": "this server names tokens by text, not id: ids are -1",
    "distribution": "this server returns only the top alternatives, not every token's logit: "
    "start vLLM with --max-logprobs -1 and ask for them all, or open the model locally",
    "sampling": "the sampling stages are computed from the returned alternatives only "
    "(approximate); open the model locally for exact ones",
    "prompt_logprobs": "prompt log-probabilities are not requested (llama.cpp's echo returns "
    "wrong ones)",
    "attention": f"this server reports no attention: {ELSEWHERE} for maps",
    "residual": f"this server reports no residual stream: {ELSEWHERE} for the layers",
    "lens": f"this server reports no hidden states, so no logit lens: {ELSEWHERE}",
    "kv_cache": f"this server does not show its KV cache: {ELSEWHERE} for its bytes",
    "routing": f"this server reports no router choices: {ELSEWHERE} for experts",
    "interventions": f"a server runs its model unchanged: {ELSEWHERE} to intervene",
    "branching": "a served run branches only on its server (a new request on the text so "
    "far): open the server (File → Open server…) and run it there",
}
NO_LOGPROBS = (
    "this server sent no log-probabilities (a tokens-only run): ask one that returns logprobs "
    "(vLLM, SGLang, llama.cpp) or open the model locally"
)
TOKENS_ONLY = frozenset({"tokens", "timing", "prefix_cache"})
_run_ids = itertools.count(1)


class OpenAIEngine:
    """A model behind an OpenAI-compatible API at ``endpoint``. Constructing it asks the server
    which models it serves (a wrong URL or key fails here, in one line)."""

    name = "openai"

    def __init__(
        self,
        endpoint: Endpoint,
        model: str | None,
        top_logprobs: int = DEFAULT_TOP_LOGPROBS,
        logprobs: bool = True,
    ) -> None:
        self.endpoint = endpoint
        self.top_logprobs = top_logprobs
        self.logprobs = logprobs  # False: not asked for (a server that refuses the field)
        self.sent_logprobs: bool | None = None  # did the last run's server send any?
        self.listed = _listed_models(endpoint)
        self.model = _choose_model(model, [m["id"] for m in self.listed], endpoint.public)
        self.ids = TokenIds(endpoint, self.model)
        # vLLM sends each token's id beside its text when asked (return_token_ids)
        self.sends_ids = any(m.get("owned_by") == "vllm" for m in self.listed)
        self.reported_model: str | None = None  # as the stream's chunks name it
        self._info = served_info(self.model, endpoint.public, self.listed)

    @property
    def identity(self) -> EngineIdentity:
        model = self.reported_model or self.model
        return EngineIdentity(self.name, model, self.endpoint.public, (("requested", self.model),))

    @property
    def whole_distribution(self) -> bool:
        """Asked for every token's log-probability: entropy, rank and stages are exact."""
        return self.top_logprobs == EVERY_TOKEN

    @property
    def tokens_only(self) -> bool:
        """No log-probabilities: not asked for, or the last run's server sent none."""
        return not self.logprobs or self.sent_logprobs is False

    @property
    def provides(self) -> Provides:
        if self.tokens_only:
            return tokens_only_provides()
        fills = {"tokens", "logprobs", "alternatives", "timing", "prefix_cache", "branching"}
        missing = dict(MISSING)
        del missing["branching"]  # a continuation of the text so far (core.runs.served_branches)
        if self.sends_ids or self.ids.dialect is not None:  # ids from the stream or tokenize
            fills.add("token_ids")
            del missing["token_ids"]
        if self.whole_distribution:
            fills.add("sampling")
            del missing["sampling"]
        return Provides(frozenset(fills), missing, self.top_logprobs, not self.whole_distribution)

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def standard_only(self) -> bool:
        """OpenAI's own API refuses the non-standard sampling fields."""
        return self.endpoint.public.startswith(OPENAI_HOST)

    def tokenize(
        self, text: str, chat: bool = True, system: str | None = None, parse_special: bool = False
    ) -> PromptTokens:
        """The prompt's tokens as far as the server says (its tokenize endpoint where it has
        one); in chat mode the server applies its own template, so the tokens are unknown."""
        return tokenize_served(self.endpoint, self.model, text, chat, parse_special)

    def start(
        self,
        prompt: PromptTokens,
        params: SamplingParams,
        config: RunConfig | None = None,
        cancel: threading.Event | None = None,
    ) -> ServedRun:
        from llm_lens.core.loop.engine import RunConfig

        return ServedRun(self, prompt, params, config or RunConfig(), cancel or threading.Event())

    def logit_lens(self, step: StepRecord, k: int = 5) -> LensResult | None:
        return None


def tokens_only_provides() -> Provides:
    """What a run without log-probabilities provides: its tokens and the stream's timing; the
    panes that draw probabilities say :data:`NO_LOGPROBS`."""
    missing = dict(MISSING) | {
        c: NO_LOGPROBS for c in ("logprobs", "alternatives", "distribution", "sampling")
    }
    return Provides(TOKENS_ONLY, missing, 0, approximate=True)


def _listed_models(endpoint: Endpoint) -> list[dict[str, Any]]:
    reply = endpoint.get_json("models")
    data = reply.get("data") if isinstance(reply, dict) else None
    if not isinstance(data, list):
        raise ServerError(f"{endpoint.url('models')} did not list models as the OpenAI API does")
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def _choose_model(model: str | None, served: list[str], where: str) -> str:
    if model is None:
        if len(served) == 1:
            return served[0]
        names = ", ".join(served) or "none"
        raise LensError(f"name the model with --model; {where} serves {names}")
    if served and model not in served:
        raise LensError(f"{where} does not serve {model!r}; it serves {', '.join(served)}")
    return model


@dataclass
class ServedRun:
    """One streamed generation. Iterating yields each token's record as its chunk arrives; the
    last record gets the finish reason when the stream ends (``steps[-1]``). A failure after
    the first token ends the run with ``finish_reason`` "error" and ``stop_error`` its line:
    nothing already received is lost. A failure before it (the request refused, a prompt
    longer than the server's context) raises its :class:`ServerError`."""

    engine: OpenAIEngine
    prompt: PromptTokens
    params: SamplingParams
    config: RunConfig
    cancel: threading.Event
    run_id: int = field(default_factory=lambda: next(_run_ids))
    steps: list[StepRecord] = field(default_factory=list)
    finish_reason: str | None = None
    stop_error: str | None = None
    reported: Reported = field(default_factory=Reported)
    sent: dict[str, Any] = field(default_factory=dict)  # the request's body (no key in it)
    prefill: None = None  # a server shows no per-position data of the prompt

    def __iter__(self) -> Iterator[StepRecord]:
        eng = self.engine
        top = eng.top_logprobs if eng.logprobs else None
        path, self.sent = request_body(
            eng.model, self.prompt, self.params, self.config, top, eng.standard_only
        )
        if eng.sends_ids:  # each chunk's ids beside its texts (vLLM ≥ 0.10)
            self.sent["return_token_ids"] = True
        t0 = time.perf_counter()
        events = background_events(eng.endpoint, path, self.sent, self.cancel)
        try:
            for step in self._steps(events, t0):
                yield step
                if self.cancel.is_set():
                    break
            if self.cancel.is_set():  # noticed within reader.POLL_S, a chunk or not
                self._finish("cancelled")
                return
        except ServerError as exc:
            self.stop_error = str(exc)
            self._finish("error")
            if not self.steps:  # nothing received: the failure is the run's, as a raise
                raise
            return
        self._finish(self._reason())

    def _steps(self, events: Any, t0: float) -> Iterator[StepRecord]:
        previous = t0
        context = list(self.prompt.ids)
        for sent in tokens_of(events, self.reported):
            token = self.engine.ids.with_texts(sent)
            parsed = time.perf_counter()
            self.engine.reported_model = self.reported.model or self.engine.reported_model
            gap = (token.arrived - previous) * 1e3 if token.first_in_chunk else 0.0
            previous = token.arrived
            place = StepPlace(self.run_id, len(self.steps), len(context) - 1, tuple(context))
            exact = self.engine.whole_distribution
            record = step_record(token, place, gap, (parsed - token.arrived) * 1e3, exact)
            context.append(token.token_id)
            self.steps.append(record)
            yield record

    def _name_ids(self, reason: str) -> None:
        """Give the text-only tokens their ids (the server's tokenize endpoint), once the
        stream has ended; not after an error (the server may not answer) nor a cancel (a
        server may finish the abandoned generation before it answers: llama-cpp-python did,
        for a minute, here)."""
        if all(s.token.id >= 0 for s in self.steps):
            return
        if reason in ("error", "cancelled"):
            self.reported.ids_missing = f"the run ended ({reason}) before its ids were asked: -1"
            return
        named = self.engine.ids.named_steps(self.steps, self.prompt.ids)
        self.steps[:], self.reported.ids_tokenized, self.reported.ids_missing = named

    def _reason(self) -> str:
        """The server's finish reason in the local loop's words."""
        said = self.reported.finish_reason
        if said == "length":
            return "length"
        if said == "stop":
            text = self.output_text()
            stopped = any(s and s in text for s in self.config.stop_strings)
            return "stop" if stopped or self.config.stop_strings else "eos"
        if said is None:
            self.stop_error = "the server ended the stream without a finish reason"
            return "error"
        return said

    def _finish(self, reason: str) -> None:
        self.finish_reason = reason
        if self.reported.tokens:
            self.engine.sent_logprobs = self.reported.with_logprob > 0
        self._name_ids(reason)
        if self.steps:
            self.steps[-1] = replace(self.steps[-1], finish_reason=reason)
        counted = self.reported.usage.get("prompt_tokens")
        if not self.prompt.tokens and isinstance(counted, int) and counted > 0:
            # the server applied its template to a prompt we could not tokenize: its count
            # places the steps
            self.steps[:] = [replace(s, position=counted - 1 + s.index) for s in self.steps]

    def engine_record(self) -> dict[str, Any]:
        """What a trace keeps of the server's side: which numbers it reported, and the
        request's settings (never the key, which travels only in a header)."""
        request = {k: v for k, v in self.sent.items() if k not in ("messages", "prompt")}
        return {"reported": self.reported.as_dict(), "request": request}

    def run_all(self) -> list[StepRecord]:
        for _ in self:
            pass
        return self.steps

    def output_text(self) -> str:
        from llm_lens.core.records import generated_text

        return generated_text([s.token for s in self.steps])

    def summary(self) -> RunSummary:
        summary = RunSummary.of(self.run_id, self.prompt, self.steps, self.finish_reason)
        summary.extra["engine"] = self.engine.identity.as_dict()
        summary.extra["reported"] = self.reported.as_dict()
        if self.stop_error:
            summary.extra["stop_error"] = self.stop_error
        return summary
