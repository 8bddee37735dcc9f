"""Smaller weights: 8-bit and 4-bit linear layers through transformers' own quantization
integrations, where they run on the device in use.

- ``int8`` and ``int4``: optimum-quanto (transformers' ``QuantoConfig``), weight-only, on CPU,
  CUDA and MPS alike (measured here on CPU: the bundled model loads and runs in either).
- ``nf4``: bitsandbytes' 4-bit NormalFloat (``BitsAndBytesConfig``), which needs CUDA.

A quantized model's numbers are its own numbers as quantized, not the full-precision model's:
the model record says so (:func:`quantization_note`), and with it every saved trace, session and
export.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from llm_lens.core.errors import ModelLoadError

LIBRARIES = {"int8": "optimum-quanto", "int4": "optimum-quanto", "nf4": "bitsandbytes"}


def quantization_config(kind: str, device_type: str) -> Any:
    """transformers' quantization config for ``kind`` on ``device_type`` (``cpu``, ``cuda``,
    ``mps``); a choice the machine cannot run is one :class:`ModelLoadError` naming its need."""
    library = LIBRARIES.get(kind)
    if library is None:
        raise ModelLoadError(f"--quantize {kind}: unknown (int8, int4 or nf4)")
    if kind == "nf4":
        if device_type != "cuda":
            raise ModelLoadError(
                f"--quantize nf4 needs a CUDA GPU and bitsandbytes; this model runs on "
                f"{device_type}: use --quantize int4 (optimum-quanto) instead"
            )
        _need("bitsandbytes", "bitsandbytes")
        from transformers import BitsAndBytesConfig

        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")  # type: ignore[no-untyped-call]
    _need("optimum.quanto", "optimum-quanto")
    from transformers import QuantoConfig

    return QuantoConfig(weights=kind)


def _need(module: str, package: str) -> None:
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a missing parent package (optimum)
        found = False
    if not found:
        raise ModelLoadError(
            f"--quantize needs {package}: run `pip install --no-deps {package}` "
            "(or `pip install llm-lens[quantize]`)"
        )


def quantization_note(model: Any) -> str:
    """What the loaded weights are, for the model record: empty for full-precision weights, else
    e.g. ``int8 weights (quanto): the numbers of this model as quantized``."""
    config = getattr(model.config, "quantization_config", None)
    if config is None or getattr(model, "hf_quantizer", None) is None:
        return ""
    method = str(getattr(config, "quant_method", "quantized")).rsplit(".", 1)[-1].lower()
    if method == "quanto":
        weights = str(getattr(config, "weights", "?"))
    elif method == "bitsandbytes":
        weights = "nf4" if getattr(config, "load_in_4bit", False) else "int8"
    else:
        weights = method
    return f"{weights} weights ({method}): the numbers of this model as quantized"


def fit_inference_mode(model: Any) -> int:
    """Let quanto's 4-bit linear layers run under ``torch.inference_mode`` (the engine's mode):
    their custom autograd function cannot take inference tensors (quanto 0.2.7: "Cannot set
    version_counter for inference tensor"), so there each such layer runs with autograd off
    instead, on a copy of its input; its numbers are unchanged (tested). Returns the layers."""
    import torch

    count = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if type(weight).__name__ != "WeightQBitsTensor":
            continue
        module.forward = _outside_inference_mode(module.forward, torch)
        count += 1
    return count


def _outside_inference_mode(forward: Any, torch: Any) -> Any:
    def run(x: Any, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_inference_mode_enabled():
            return forward(x, *args, **kwargs)
        with torch.inference_mode(False), torch.no_grad():
            return forward(x.clone() if x.is_inference() else x, *args, **kwargs)

    return run
