"""``llm-lens steer``: the vector it writes is :func:`steering_vector`'s on the same prompts, and
``--intervene resid:L+=FILE*S`` reads it back; a missing or empty prompt file, a layer the model
lacks or an --out that is not .npy is one line, exit 2, and no file."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from llm_lens.core.cli import main
from llm_lens.core.interventions import parse_spec
from llm_lens.core.interventions.steer import steering_vector

FORMAL = "Dear Sir, I would be grateful for your reply.\n\nPlease find the report attached.\n"
CASUAL = "hey can u send it lol\nyo thx for the stuff\n"


def _files(tmp_path: Any) -> tuple[str, str]:
    (tmp_path / "pos.txt").write_text(FORMAL, encoding="utf-8")
    (tmp_path / "neg.txt").write_text(CASUAL, encoding="utf-8")
    return str(tmp_path / "pos.txt"), str(tmp_path / "neg.txt")


@pytest.mark.slow
def test_steer_writes_the_vector(tmp_path: Any, engine: Any, capsys: Any) -> None:
    pos, neg = _files(tmp_path)
    out = tmp_path / "formal.npy"
    code = main(["steer", "--layer", "3", "--positive", pos, "--negative", neg,
                 "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["layer"] == 3 and summary["positives"] == 2 and summary["negatives"] == 2
    ids = [
        [list(engine.tokenize(t, chat=False).ids) for t in text.splitlines() if t]
        for text in (FORMAL, CASUAL)
    ]
    skip = set(engine.tokenizer.all_special_ids)
    want = steering_vector(engine.model, 3, *ids, engine.anatomy, skip)
    np.testing.assert_allclose(np.load(out), want.vector, atol=1e-6)
    assert summary["norm"] == pytest.approx(want.norm)
    assert parse_spec(f"resid:3+={out}*2") == want.to_intervention(2.0)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"--layer": "30"}, "no layer 30"),
        ({"--positive": "missing.txt"}, "missing.txt"),
        ({"--negative": "empty.txt"}, "holds no prompts"),
        ({"--out": "vec.json"}, ".npy"),
    ],
)
def test_steer_mistakes_are_one_line(
    tmp_path: Any, loaded: Any, capsys: Any, change: dict[str, str], words: str
) -> None:
    pos, neg = _files(tmp_path)
    (tmp_path / "empty.txt").write_text("\n  \n", encoding="utf-8")
    args = {"--layer": "3", "--positive": pos, "--negative": neg, "--out": "vec.npy"} | {
        k: str(tmp_path / v) if k != "--layer" else v for k, v in change.items()
    }
    args["--out"] = args["--out"] if "--out" in change else str(tmp_path / "vec.npy")
    code = main(["steer", *[x for kv in args.items() for x in kv], "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1
    assert not list(tmp_path.glob("vec*"))
