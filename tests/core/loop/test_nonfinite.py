"""core/loop/nonfinite.py: where the model first computed NaN or Inf, as the trace JSON and the
window's panes record it, from real broken tiny models run through the CLI."""

from __future__ import annotations

import json

import pytest
import torch

from llm_lens.core.cli import main
from llm_lens.core.errors import NonFiniteError
from llm_lens.core.loop.capture import EMBEDDINGS, layer_output
from llm_lens.core.loop.nonfinite import from_message, placed, split_where
from tests.conftest import make_tiny


def _strict(text: str):
    def refuse(name):
        raise ValueError(name)

    return json.loads(text, parse_constant=refuse)


def _save(loaded, tokenizer, folder):
    loaded.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _trace(capsys, folder, out, *extra):
    capsys.readouterr()
    code = main(["trace", "hi there", "--model", str(folder), "--quiet", "--out", str(out), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err, _strict(out.read_text())


def test_nan_in_one_mlp_is_recorded_in_the_trace(tokenizer, tmp_path, capsys):
    loaded = make_tiny(tokenizer, num_hidden_layers=3)
    with torch.no_grad():
        loaded.model.model.layers[2].mlp.down_proj.weight[1, 1] = float("nan")
    folder = _save(loaded, tokenizer, tmp_path / "nan-mlp")
    code, err, data = _trace(capsys, folder, tmp_path / "t.json", "--greedy")
    assert code == 1 and len(err) == 1 and "layer 2's MLP output" in err[0]
    record = data["non_finite"]
    assert record["value"] == "NaN" and record["step"] == 0
    assert (record["layer"], record["sublayer"]) == (2, "MLP")
    assert record["positions"] and data["steps"] == []
    assert from_message(err[0]).layer == 2  # the line the window reads carries the place too


def test_float16_overflow_is_recorded_as_inf(tokenizer, tmp_path, capsys):
    loaded = make_tiny(tokenizer, num_hidden_layers=3)
    with torch.no_grad():  # float32 weights that overflow float16's 65,504 in layer 1's MLP
        loaded.model.model.layers[1].mlp.up_proj.weight.mul_(3000)
        loaded.model.model.layers[1].mlp.down_proj.weight.mul_(3000)
    folder = _save(loaded, tokenizer, tmp_path / "fp16")
    code, err, data = _trace(capsys, folder, tmp_path / "t.json", "--greedy", "--dtype", "float16")
    assert code == 1 and len(err) == 1, err
    record = data["non_finite"]
    assert (record["value"], record["layer"], record["sublayer"]) == ("Inf", 1, "MLP")


@pytest.mark.parametrize(
    ("where", "layer", "sublayer"),
    [
        ("layer 3's attention output", 3, "attention"),
        ("layer 0's norm (post_attention_layernorm) output", 0, "norm (post_attention_layernorm)"),
        (layer_output(4), 4, "output"),
        (EMBEDDINGS, None, "embeddings"),
        ("the head's logits", None, "head"),
    ],
)
def test_every_stage_is_split_into_layer_and_sublayer(where, layer, sublayer):
    assert split_where(where) == (layer, sublayer)
    err = NonFiniteError("Inf", 7, where, (2, 3, 4, 9))
    record = placed(err)
    assert (record.layer, record.sublayer, record.step, record.positions) == (
        layer, sublayer, 7, (2, 3, 4, 9)
    )  # fmt: skip
    back = from_message(f"llm-lens trace: error: {err}")
    assert back is not None and (back.layer, back.sublayer, back.where) == (layer, sublayer, where)


def test_other_messages_are_not_read_as_non_finite():
    assert from_message("these settings make the distribution NaN; temperature=0.7") is None
    assert from_message("no model is loaded yet") is None
