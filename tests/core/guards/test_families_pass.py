"""The guards refuse no real model: every family and hybrid family the app loads, saved as a
folder, passes the file, header and config checks and loads with nothing missing, unexpected
or of another shape (transformers' own loading report), its weights_id a hash of its bytes."""

from __future__ import annotations

import pytest

from tests.families import FAMILIES, family_model
from tests.hybrid_families import HYBRIDS, hybrid_model


@pytest.mark.parametrize(
    "name", [("family", n) for n in FAMILIES] + [("hybrid", n) for n in HYBRIDS], ids=str
)
def test_every_family_loads_through_the_guards(name, tokenizer, tmp_path):
    from llm_lens.core.loading import load_model

    kind, family = name
    loaded = (family_model if kind == "family" else hybrid_model)(family, tokenizer)
    loaded.model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    info = load_model(str(tmp_path), device="cpu", dtype="float32").info
    assert info.partly_random == "" and len(info.weights_id) == 16
