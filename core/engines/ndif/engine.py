"""An engine whose model runs on NDIF (or nnsight's local simulation of it): one job a run.

``NdifEngine.local(loaded)`` wraps a model loaded here and runs every trace with
``remote="local"`` (serialised exactly as for NDIF, run on this machine): what the tests and
the bundled model use. ``NdifEngine.hosted(hub_id)`` builds the model's skeleton without weights
and sends each run to NDIF with the user's key. Either way a run is one
:func:`~llm_lens.core.engines.ndif.program.generate_steps` trace, whose payload becomes the same
:class:`~llm_lens.core.records.StepRecord` the local engine yields, with the lens computed there.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from llm_lens.core.anatomy import Anatomy
from llm_lens.core.engines.ndif.program import HEAD_SCALES, CaptureSpec, Targets, load_nnsight
from llm_lens.core.engines.ndif.run import NdifRun, reinstate
from llm_lens.core.engines.ndif.status import (
    StatusCallback,
    local_backend,
    remote_backend,
)
from llm_lens.core.experts import find_routers
from llm_lens.core.layers import LensResult
from llm_lens.core.loading import LoadedModel, describe
from llm_lens.core.loop.engine import RunConfig
from llm_lens.core.records import ModelInfo, PromptTokens, StepRecord
from llm_lens.core.sampling import SamplingParams
from llm_lens.core.tokens import TokenText, tokenize_prompt

ATTENTION_CALL = "attention_interface"  # transformers' attention function, as .source names it


class NdifEngine:
    """Tokenizes here; runs each generation as one nnsight trace on the server."""

    name = "ndif"
    one_job_a_run = True  # a model thread runs it through ndif.live.ndif_live, one job a run

    def __init__(self, model: Any, hf_model: Any, tokenizer: Any, info: ModelInfo, **how: Any):
        self.model = model  # the nnsight wrapper
        self.hf_model = hf_model
        self.tokenizer = tokenizer
        self.remote: bool | str = how.get("remote", "local")
        self.key: str | None = how.get("key")  # held in memory only
        self.host: str | None = how.get("host")
        self.info = replace(info, device=self._where(info.device))  # the model line says so
        self.texts = TokenText(tokenizer)
        self.anatomy = Anatomy.of(hf_model)
        self.routers = find_routers(hf_model)
        self.eos_ids = _eos_ids(hf_model, tokenizer)
        self.spec: CaptureSpec = how.get("spec") or CaptureSpec()  # what a run asks for
        self.head_scale = head_scale(hf_model)  # what the forward does after the head
        self.lenses: dict[tuple[int, int], LensResult] = {}  # (run_id, step) -> the server's
        self.on_status: StatusCallback | None = how.get("on_status")  # a run's, unless given

    @classmethod
    def local(cls, loaded: LoadedModel) -> NdifEngine:
        """The engine over a model loaded here, its traces run by ``remote="local"``."""
        load_nnsight()
        from nnsight.modeling.transformers import TransformersModel

        reinstate(loaded.model)
        model = TransformersModel(loaded.model, task="text-generation", tokenizer=loaded.tokenizer)
        return cls(model, loaded.model, loaded.tokenizer, loaded.info, remote="local")

    @classmethod
    def hosted(cls, hub_id: str, key: str, host: str | None = None) -> NdifEngine:
        """The engine for ``hub_id`` as NDIF serves it: its skeleton built here without weights
        (config and tokenizer from the Hub), each run sent with ``key``."""
        load_nnsight()
        from nnsight.modeling.transformers import TransformersModel
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(hub_id)
        model = TransformersModel(hub_id, task="text-generation", tokenizer=tokenizer)
        hf_model = model._module
        info = describe(hf_model, hub_id, "ndif", f"hub:{hub_id}")
        return cls(model, hf_model, tokenizer, info, remote=True, key=key, host=host)

    @property
    def source(self) -> str:
        """Where runs go, without credentials: "ndif (local simulation)" or the host."""
        return "ndif (local simulation)" if self.remote == "local" else f"ndif {self.host or ''}"

    def _where(self, device: str) -> str:
        """Where runs go, for the status bar's model line in place of the device the
        weights sit on here: "NDIF (local simulation on cpu)", "NDIF at api.ndif.us"."""
        if self.remote == "local":
            return f"NDIF (local simulation on {device})"
        from urllib.parse import urlsplit

        host = self.host or _default_host()
        return f"NDIF at {urlsplit(host).hostname or host}"

    @property
    def identity(self) -> Any:
        """:class:`~llm_lens.core.engines.base.EngineIdentity`: ndif, the model, the host (no
        credentials; None for the local simulation)."""
        from llm_lens.core.engines.base import EngineIdentity, public_url  # type: ignore[import-not-found,unused-ignore]

        url = None if self.remote == "local" else public_url(self.host or _default_host())
        mode = "local simulation" if self.remote == "local" else "NDIF"
        capture = "full logits" if self.spec.full_logits else f"top {self.spec.top_n}"
        routing = "yes" if self.routers else "no"
        details = (("backend", mode), ("capture", capture), ("routing", routing))
        return EngineIdentity("ndif", self.info.name, url, details)

    @property
    def provides(self) -> Any:
        """:class:`~llm_lens.core.engines.base.Provides` for runs made with :attr:`spec`."""
        from llm_lens.core.engines.base import Provides  # type: ignore[import-not-found,unused-ignore]

        fills, missing = provided(self.spec, bool(self.routers))
        top_n = -1 if self.spec.full_logits else self.spec.top_n
        approximate = not self.spec.full_logits
        return Provides(frozenset(fills), missing, top_n, approximate, head_rows=True)

    def logit_lens(self, step: StepRecord, k: int = 5) -> LensResult | None:
        """The lens the server computed for ``step`` (its top ``k`` ≤ the run's), or None."""
        lens = self.lenses.get((step.run_id, step.index))
        if lens is None:
            return None
        texts = tuple(row[:k] for row in lens.top_texts)
        return LensResult(lens.top_ids[:, :k], lens.top_probs[:, :k], texts, lens.final_id)

    def tokenize(
        self, text: str, chat: bool = True, system: str | None = None, parse_special: bool = False
    ) -> PromptTokens:
        return tokenize_prompt(
            self.tokenizer, text, chat, system, self.info.context_length, 1, parse_special
        )

    def targets(self, spec: CaptureSpec) -> Targets:
        """The envoys of the parts the trace reads (the attention calls only for opened heads)."""
        envoys = {id(e._module): e for e in self.model.modules()}
        a = self.anatomy
        calls = {n: _attention_call(envoys[id(a.mixers[n])]) for n, _h in spec.heads}
        return Targets(
            layers=tuple(envoys[id(m)] for m in a.layers),
            mixers=tuple(envoys[id(m)] for m in a.mixers),
            final_norm=envoys[id(a.final_norm)],
            lm_head=envoys[id(a.lm_head)],
            project_out=_project_out(self.hf_model, envoys),
            routers=tuple((n, envoys[id(r)]) for n, r in self.routers),
            attention_calls={n: c for n, c in calls.items() if c is not None},
            groups=max(1, self.info.num_heads // max(1, self.info.num_kv_heads)),
        )

    def start(
        self,
        prompt: PromptTokens,
        params: SamplingParams,
        config: RunConfig | None = None,
        cancel: threading.Event | None = None,
        spec: CaptureSpec | None = None,
        on_status: StatusCallback | None = None,
    ) -> NdifRun:
        """A run ready to iterate; the job is sent at the first ``next()`` (``cancel`` set
        before then sends none; a job under way runs to its end, then stops the records).
        ``on_status`` None: the engine's own :attr:`on_status` hears the job's statuses."""
        config = config or RunConfig()
        spec = spec or replace(self.spec, top_n=config.top_n)
        seed = None if params.is_greedy else params.seed
        spec = replace(spec, head_scale=self.head_scale, seed=seed)
        report = on_status or self.on_status
        return NdifRun(self, prompt, params, config, spec, report, cancel or threading.Event())

    def backend(self, on_status: StatusCallback | None) -> Any:
        if self.remote == "local":
            return local_backend(self.model, on_status)
        return remote_backend(self.model, self.key or "", on_status, self.host)


WHOLE = "the whole distribution each step"  # the NDIF dialog's checkbox, as it begins
MISSING = {
    "residual": "NDIF runs bring back each layer's residual norms, not the vectors: open the "
    "model locally for them",
    "attention": "NDIF runs bring back the attention rows of the heads you open only: open "
    "the model locally for whole maps",
    "prompt_logprobs": "NDIF runs read the prompt's last position only: open the model locally",
    "prefix_cache": "NDIF keeps no cache between jobs",
    "interventions": "not sent to NDIF yet: open the model locally to change it",
    "branching": "each NDIF run is one job from the prompt: open the model locally to branch",
}


def provided(spec: CaptureSpec, moe: bool) -> tuple[set[str], dict[str, str]]:
    """The capabilities runs made with ``spec`` fill, and a line for each they do not."""
    fills = {"tokens", "token_ids", "logprobs", "alternatives", "lens", "kv_cache", "timing"}
    missing = dict(MISSING)
    if spec.full_logits:
        fills |= {"distribution", "sampling"}
    else:
        missing["distribution"] = missing["sampling"] = (
            f"NDIF runs bring back the top {spec.top_n} logits and a histogram of the rest (each "
            f"other token at its bin's level): tick '{WHOLE}' in File → Model on NDIF… for exact "
            "stages"
        )
    if moe:
        fills.add("routing")
    else:
        missing["routing"] = "this model has no mixture-of-experts routers"
    return fills, missing


def head_scale(model: Any) -> tuple[tuple[str, float], ...]:
    """The numbers the model's forward applies to the head's logits (see
    :data:`~llm_lens.core.engines.ndif.program.HEAD_SCALES`), from its config, or none."""
    config = getattr(model, "config", None)
    config = getattr(config, "get_text_config", lambda: config)()
    found = ((name, getattr(config, name, None)) for name in HEAD_SCALES)
    return tuple((name, float(value)) for name, value in found if value is not None)


def _project_out(model: Any, envoys: dict[int, Any]) -> Any | None:
    """The envoy of OPT's ``project_out`` (the decoder's projection after its final norm)."""
    base = getattr(model, "base_model", model)
    module = getattr(getattr(base, "decoder", base), "project_out", None)
    return envoys.get(id(module)) if module is not None else None


def _default_host() -> str:
    from nnsight import CONFIG

    host: str = CONFIG.API.HOST
    return host


def _attention_call(mixer: Any) -> Any | None:
    """The call of transformers' attention function inside ``mixer``'s forward (its inputs are
    the rotated q and the cached k), or None where the family computes attention otherwise."""
    try:
        names = [n for n in mixer.source.names if n.startswith(ATTENTION_CALL)]
    except Exception:  # noqa: BLE001 - no source to read (a compiled or C module): no rows
        return None
    return getattr(mixer.source, names[-1]) if names else None


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (model.generation_config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        ids.update(value if isinstance(value, list) else [] if value is None else [value])
    return ids
