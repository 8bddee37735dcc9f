"""The body of one streamed generation request, with every sampling setting sent explicitly.

Servers' defaults differ from neutral (llama.cpp applies repeat_penalty 1.1, top_k 40 and
min_p 0.05 unless told; vLLM's repetition_penalty is 1.0), so each setting is sent even when
it is the neutral one, and the penalties the OpenAI API knows (frequency, presence) are sent
as 0. The non-standard fields (top_k, min_p, repeat_penalty, repetition_penalty) are left out
for OpenAI's own API, which refuses fields it does not know.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llm_lens.core.records import PromptTokens

if TYPE_CHECKING:
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import SamplingParams

CHAT_PATH = "chat/completions"
COMPLETIONS_PATH = "completions"
OPENAI_HOST = "https://api.openai.com"
TOP_K_OFF = 0  # "consider every token" for llama.cpp and vLLM (llama-cpp-python refuses -1)


def sampling_fields(params: SamplingParams, standard_only: bool) -> dict[str, Any]:
    """The settings as the server reads them (greedy: temperature 0)."""
    greedy = params.is_greedy
    fields: dict[str, Any] = {
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
    }
    if params.seed is not None and not greedy:
        fields["seed"] = params.seed
    if not standard_only:
        fields |= {
            "top_k": TOP_K_OFF if greedy or params.top_k == 0 else params.top_k,
            "min_p": 0.0 if greedy else params.min_p,
            "repeat_penalty": params.repetition_penalty,  # llama.cpp's name
            "repetition_penalty": params.repetition_penalty,  # vLLM's and SGLang's
        }
    return fields


def request_body(
    model: str,
    prompt: PromptTokens,
    params: SamplingParams,
    config: RunConfig,
    top_logprobs: int | None,
    standard_only: bool = False,
) -> tuple[str, dict[str, Any]]:
    """(path under the API root, JSON body) for a chat prompt (the server applies its chat
    template to the typed text) or a raw one (the text as typed, /completions).
    ``top_logprobs`` None asks for no log-probabilities (a tokens-only run)."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": config.max_new_tokens,
        "n": 1,
    } | sampling_fields(params, standard_only)
    if config.stop_strings:
        body["stop"] = list(config.stop_strings)
    if prompt.chat:
        body["messages"] = [{"role": "user", "content": prompt.text}]
        if top_logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = top_logprobs
        return CHAT_PATH, body
    body["prompt"] = prompt.text
    if top_logprobs is not None:
        body["logprobs"] = top_logprobs
    return COMPLETIONS_PATH, body
