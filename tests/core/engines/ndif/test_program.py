"""What the server computes per step, checked against the local code that computes it here."""

from __future__ import annotations

import numpy as np
import torch

from llm_lens.core.engines.ndif import program
from llm_lens.core.logits import read_logits
from llm_lens.core.sessions import compact


def test_tail_bins_are_the_session_format_s():
    assert (program.TAIL_BINS, program.TAIL_WIDTH) == (compact.TAIL_BINS, compact.TAIL_WIDTH)


def test_reading_equals_the_local_reading_and_the_session_tail():
    torch.manual_seed(0)
    logits = torch.randn(5000) * 4  # (vocab,)
    chosen = torch.tensor(1234)
    got = program._reading(logits, chosen, 50, program.TAIL_BINS, program.TAIL_WIDTH)
    want = read_logits(logits, 1234, 50)
    np.testing.assert_array_equal(got["top_ids"].long().numpy(), want.top_ids)
    np.testing.assert_array_equal(got["top_logits"].numpy(), want.top_logits)
    np.testing.assert_array_equal(got["top_logprobs"].exp().numpy(), want.top_probs)
    assert float(got["chosen_logprob"]) == want.logprob
    assert int(got["rank"]) == want.rank
    assert float(got["entropy"]) == want.entropy
    kept = np.unique(np.concatenate([want.top_ids, [1234]]))
    counts, lse = compact.tail_histogram(want.logits, kept)
    np.testing.assert_array_equal(got["tail_counts"].numpy(), counts)
    np.testing.assert_allclose(got["tail_lse"].numpy(), lse, rtol=1e-6)


def test_norms_of_the_residual_and_its_updates():
    torch.manual_seed(1)
    residual, attn = torch.randn(4, 16), torch.randn(3, 16)  # (layers + 1, hidden), (layers, .)
    got = program._norms(residual, attn).numpy()
    r, a = residual.numpy(), attn.numpy()
    change = np.diff(r, axis=0)
    np.testing.assert_allclose(got[0], np.linalg.norm(r, axis=-1), rtol=1e-6)
    np.testing.assert_allclose(got[1, 1:], np.linalg.norm(a, axis=-1), rtol=1e-6)
    np.testing.assert_allclose(got[2, 1:], np.linalg.norm(change - a, axis=-1), rtol=1e-6)
    np.testing.assert_allclose(got[3, 1:], np.linalg.norm(change, axis=-1), rtol=1e-6)
    assert (got[1:, 0] == 0).all()


class _NoLens:
    """An import finder that refuses llm_lens, as on an NDIF server (where it is not installed);
    the local simulation hides sys.path and sys.modules but not an editable install's finder."""

    def find_spec(self, name, path=None, target=None):
        if name == "llm_lens" or name.startswith("llm_lens."):
            raise ModuleNotFoundError(f"No module named {name!r} on the server")
        return None


def test_the_request_needs_no_llm_lens_on_the_server(monkeypatch, tokenizer):
    """The trace and its helpers travel by value: the request deserializes and runs with
    llm_lens unimportable (it is not installed on NDIF)."""
    import sys

    from nnsight.schema.request import RequestModel

    from llm_lens.core.engines.ndif import CaptureSpec, NdifEngine
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY
    from tests.families import family_model

    plain = RequestModel.deserialize

    def without_lens(*args, **kwargs):
        sys.meta_path.insert(0, _NoLens())
        try:
            return plain(*args, **kwargs)
        finally:
            sys.meta_path.pop(0)

    monkeypatch.setattr(RequestModel, "deserialize", staticmethod(without_lens))
    engine = NdifEngine.local(family_model("mixtral", tokenizer))
    spec = CaptureSpec(heads=((0, 1),))
    run = engine.start(engine.tokenize("Hi"), GREEDY, RunConfig(max_new_tokens=2), spec=spec)
    assert len(run.run_all()) == 2


def test_no_save_is_left_on_every_object():
    """nnsight mounts ``.save()`` on every object when imported; where the engine is what
    imports it, it takes that off again (a fresh process: this one may have nnsight already)."""
    import subprocess
    import sys

    code = (
        "from llm_lens.core.engines.ndif.program import load_nnsight\n"
        "nnsight = load_nnsight()\n"
        "assert not hasattr(object(), 'save') and callable(nnsight.save)\n"
        "import nnsight as again\n"
        "assert not hasattr(object(), 'save')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
