"""Any OpenAI-compatible server as an engine: client (HTTP, server-sent events), stream (chunks
read as tokens), request (the body, every sampling setting explicit), prompt (what the server
says of the model and the prompt's tokens), records (a served token as a StepRecord), engine
(OpenAIEngine, ServedRun). Only re-exports; standard library only, no torch."""

from llm_lens.core.engines.openai.client import Endpoint, ServerError
from llm_lens.core.engines.openai.engine import OpenAIEngine, ServedRun

__all__ = ["Endpoint", "OpenAIEngine", "ServedRun", "ServerError"]
