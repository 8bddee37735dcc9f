"""NDIF / nnsight: the internals of a hosted model, captured by traces that run on the server.

- :mod:`.program` the nnsight trace of one generation and what each step sends back
- :mod:`.records` that payload as the local engine's frozen records (and the lens)
- :mod:`.status` the job's status updates and the API key
- :mod:`.engine` :class:`NdifEngine` (local simulation or NDIF): what it reads, what it provides
- :mod:`.run` :class:`NdifRun`: one job, its payload as step records
"""

from llm_lens.core.engines.ndif.engine import NdifEngine
from llm_lens.core.engines.ndif.program import CaptureSpec
from llm_lens.core.engines.ndif.run import NdifRun
from llm_lens.core.engines.ndif.status import JobStatus, api_key

__all__ = ["CaptureSpec", "JobStatus", "NdifEngine", "NdifRun", "api_key"]
