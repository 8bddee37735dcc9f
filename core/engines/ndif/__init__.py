"""NDIF / nnsight: the internals of a hosted model, captured by traces that run on the server.

- :mod:`.program` the nnsight trace of one generation and what each step sends back
- :mod:`.records` that payload as the local engine's frozen records (and the lens)
- :mod:`.status` the job's status updates and the API key
- :mod:`.engine` :class:`NdifEngine` (local simulation or NDIF) and its runs
"""

from llm_lens.core.engines.ndif.engine import NdifEngine, NdifRun
from llm_lens.core.engines.ndif.program import CaptureSpec
from llm_lens.core.engines.ndif.status import JobStatus, api_key

__all__ = ["CaptureSpec", "JobStatus", "NdifEngine", "NdifRun", "api_key"]
