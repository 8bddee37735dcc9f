"""The cache's constant part predicted from a config alone, by the model's own modules.

A hybrid's conv and recurrent state (Mamba, gated DeltaNet, a short convolution, lightning
attention) has a shape each family spells in its own config fields. Rather than a table of
those spellings, :func:`state_elements_from_config` builds the model from the config on
PyTorch's ``meta`` device (its modules and their shapes, no weights, no memory) and reads each
layer's mixer as the loaded model is read (:func:`llm_lens.core.anatomy.state_elements`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

STATE_WORDS = ("mamba", "ssm", "conv", "linear", "state", "deltanet", "block_type", "hybrid")


def may_hold_state(section: Mapping[str, Any]) -> bool:
    """Does the config name anything that keeps constant state (so building it is worth it)?"""
    words = " ".join(str(k).lower() for k in section) + " " + str(section.get("model_type"))
    types = section.get("layer_types") or section.get("layers_block_type") or []
    text = words + " " + " ".join(str(t).lower() for t in types if isinstance(t, str))
    return any(w in text for w in STATE_WORDS)


def state_elements_from_config(config: Any) -> tuple[int, ...] | None:
    """Per layer, the elements of conv/recurrent state one sequence's cache keeps, from the
    modules of ``config`` (a transformers config) built on the meta device; None where the
    model cannot be built or its layers found."""
    import torch
    from transformers import AutoModelForCausalLM

    from llm_lens.core.anatomy import Anatomy, state_elements
    from llm_lens.core.errors import ModelLoadError

    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
        anatomy = Anatomy.of(model)
    except (ModelLoadError, Exception):  # noqa: BLE001 - any family transformers cannot build
        return None
    return tuple(state_elements(m) for m in anatomy.state_mixers)
