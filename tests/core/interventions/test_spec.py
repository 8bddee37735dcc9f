"""Interventions are plain data: SPEC strings read to the right values, every value survives
its dict (and JSON) form, and a malformed SPEC or value is one error naming the problem."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from llm_lens.core.interventions import (
    BlockEdit,
    ExpertEdit,
    Forget,
    HeadEdit,
    InterventionError,
    ResidualAdd,
    ResidualPatch,
    from_dict,
    parse_spec,
    to_spec,
)
from llm_lens.core.interventions.specs import positions

VEC = np.array([0.5, -1.0, 2.0])


def _load(path: str) -> Any:
    return {"vec.npy": VEC, "rows.npy": np.stack([VEC, 2 * VEC]), "bad.npy": [1.0, np.nan]}[path]


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        ("head:7.4=0", HeadEdit(7, 4, "scale", 0.0)),
        ("head:7.4*0.5", HeadEdit(7, 4, "scale", 0.5)),
        ("head:7.4=mean", HeadEdit(7, 4, "mean")),
        ("attn:12=0", BlockEdit(12, "attn", 0.0)),
        ("mlp:12*0.5", BlockEdit(12, "mlp", 0.5)),
        ("resid:10@3-5+=vec.npy", ResidualAdd(10, (3, 4, 5), tuple(VEC))),
        ("resid:10+=vec.npy", ResidualAdd(10, (), tuple(VEC))),
        ("resid:10+=vec.npy*4", ResidualAdd(10, (), tuple(4 * VEC))),
        ("resid:10@3+=vec.npy*-0.5", ResidualAdd(10, (3,), tuple(-0.5 * VEC))),
        ("resid:2@4,9=rows.npy", ResidualPatch(2, (4, 9), (tuple(VEC), tuple(2 * VEC)))),
        ("expert:5.2=off", ExpertEdit(5, (2,), "off")),
        ("expert:5.3,1=force", ExpertEdit(5, (1, 3), "force")),
        ("forget:12", Forget(12)),
    ],
)
def test_a_spec_reads_as_its_value_and_round_trips(spec: str, value: Any) -> None:
    item = parse_spec(spec, _load)
    assert item == value
    assert from_dict(json.loads(json.dumps(item.to_dict()))) == item
    if "npy" not in spec:
        assert to_spec(item) == spec.replace("3,1", "1,3")


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("head:7.4*nan", "finite"),
        ("head:7.4*inf", "finite"),
        ("mlp:3*x", "not a number"),
        ("head:7=0", "not a SPEC"),
        ("resid:1@5-3+=vec.npy", "backwards"),
        ("resid:1+=bad.npy", "NaN"),
        ("resid:1+=rows.npy", "1-D"),
        ("resid:1=vec.npy", "names its positions"),
        ("resid:1@1-3=rows.npy", "needs 3 rows"),
        ("resid:1+=missing.npy", "missing.npy"),
        ("expert:1.2=maybe", "not a SPEC"),
        ("resid:1+=vec.npy*nan", "finite"),
        ("resid:1+=vec.npy*big", "not a number"),
        ("resid:1@2=vec.npy*2", "only an added vector"),
    ],
)
def test_a_malformed_spec_is_one_error_naming_it(spec: str, words: str) -> None:
    def load(path: str) -> Any:
        if path == "missing.npy":
            raise FileNotFoundError(f"No such file: {path}")
        return _load(path)

    with pytest.raises(InterventionError, match=words) as info:
        parse_spec(spec, load)
    assert spec in str(info.value) and "\n" not in str(info.value)


def test_positions_read_ranges_and_lists() -> None:
    assert positions("3-5,9,4") == (3, 4, 5, 9)
    assert positions(None) == ()
    with pytest.raises(InterventionError):
        positions("3-")


def test_values_refuse_what_no_model_could_take() -> None:
    with pytest.raises(InterventionError, match="one row per position"):
        ResidualPatch(0, (1, 2), ((1.0,),))
    with pytest.raises(InterventionError, match="scale or mean"):
        HeadEdit(0, 0, "double")
    with pytest.raises(InterventionError, match="unknown intervention kind"):
        from_dict({"kind": "magic"})
    with pytest.raises(InterventionError, match="count from 0"):
        Forget(-1)
