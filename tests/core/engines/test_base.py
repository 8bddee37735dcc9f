"""The engine seam: capabilities checked by name, one line for each missing one, URLs written
without credentials, and today's transformers engine as one implementation of the protocol."""

from __future__ import annotations

import pytest

from llm_lens.core.engines import CAPABILITIES, EngineIdentity, ModelEngine, Provides, public_url


def test_provides_refuses_unknown_and_contradictory_capabilities():
    with pytest.raises(ValueError, match="unknown"):
        Provides(frozenset({"telepathy"}))
    with pytest.raises(ValueError, match="both"):
        Provides(frozenset({"tokens"}), {"tokens": "no"})


def test_each_missing_capability_has_its_line():
    served = Provides(
        frozenset({"tokens", "logprobs"}),
        {"attention": "this server reports no attention: open the model locally for maps"},
        top_n=5,
        approximate=True,
    )
    assert served.has("tokens") and not served.has("attention")
    assert served.why_not("tokens") is None
    assert served.why_not("attention").startswith("this server reports no attention")
    assert "kv_cache" in served.why_not("kv_cache")  # a default line for one not explained
    table = served.as_dict()
    assert table["fills"] == ["tokens", "logprobs"]
    assert set(table["missing"]) == set(CAPABILITIES) - {"tokens", "logprobs"}


@pytest.mark.parametrize(
    ("url", "public"),
    [
        ("https://user:secret@example.com:8443/v1/?key=abc#x", "https://example.com:8443/v1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://tok@[::1]:9000/v1", "http://[::1]:9000/v1"),
    ],
)
def test_public_url_drops_credentials(url, public):
    assert public_url(url) == public


def test_identity_as_dict():
    ident = EngineIdentity("openai", "smollm2", "http://127.0.0.1:8000/v1", (("server", "x"),))
    assert ident.as_dict() == {
        "name": "openai",
        "model": "smollm2",
        "url": "http://127.0.0.1:8000/v1",
        "server": "x",
    }


def test_local_engine_is_a_model_engine(engine):
    from llm_lens.core.engines.local import LocalEngine
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    local = LocalEngine(engine)
    assert isinstance(local, ModelEngine)
    assert local.identity.engine == "local" and local.identity.url is None
    assert local.provides.has("distribution") and local.provides.top_n == -1
    prompt = local.tokenize("Hi")
    assert prompt.ids == engine.tokenize("Hi").ids
    run = local.start(prompt, GREEDY, RunConfig(max_new_tokens=2))
    steps = list(run)
    assert [s.token.id for s in steps] == run.generated_ids and len(steps) == 2
    assert not steps[0].approximate
    lens = local.logit_lens(steps[0], k=1)
    assert lens is not None and int(lens.final_id) == int(steps[0].top_ids[0])
