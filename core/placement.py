"""A model bigger than one device: where its layers sit (GPUs, CPU, disk) and how to read them.

accelerate's device map, asked for through ``from_pretrained(device_map=..., max_memory=...)``,
places whole layers on the GPUs, then the CPU, then (the last resort) a folder on disk. An
offloaded layer's weights live on ``meta`` between its calls and are loaded by its hook just
before its forward, so LLM Lens never reads an offloaded module's ``.weight`` directly: every
read goes through :func:`weights_of`, which asks the hook to load them (accelerate's own
``align_module_device``) and puts them back after.

- :class:`Placement`: the user's choice (device map, per-device memory caps, 8/4-bit weights),
  parsed strictly from the command line's text (:func:`parse_placement`; a mistake is one
  :class:`~llm_lens.core.errors.LensError` line).
- :func:`placement_of`: which top-level pieces sit where and the bytes each holds, for the
  model record, the status bar and the KV pane (:func:`placement_line`).
- :func:`weights_of`: a module's weights as real tensors while inside.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_lens.core.errors import LensError

DEVICE_MAPS = ("auto", "balanced", "sequential")
QUANTIZE = ("int8", "int4", "nf4")
_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$", re.IGNORECASE)
_DEVICE = re.compile(r"^(cpu|mps|disk|cuda:\d+|\d+)$")
MAX_MEMORY_HELP = (
    "per-device caps, e.g. 'cpu=150MiB,cuda:0=20GiB' (units B, KB, MB, GB, KiB, MiB, GiB)"
)


@dataclass(frozen=True)
class Placement:
    """Where to put a model's weights and in what precision; the default is one device, as is.

    ``device_map`` is accelerate's strategy (``auto``, ``balanced``, ``sequential``) or None (the
    whole model on one device); ``max_memory`` caps each device's share, (device, bytes) with
    devices as ``cpu``, ``mps``, ``disk`` or ``cuda:N``; ``quantize`` is ``int8``, ``int4`` or
    ``nf4`` weights, or None (see :mod:`llm_lens.core.quantize`)."""

    device_map: str | None = None
    max_memory: tuple[tuple[str, int], ...] = ()
    quantize: str | None = None

    def __post_init__(self) -> None:
        if self.device_map is not None and self.device_map not in DEVICE_MAPS:
            raise LensError(
                f"--device-map must be one of {', '.join(DEVICE_MAPS)}, got {self.device_map!r}"
            )
        if self.quantize is not None and self.quantize not in QUANTIZE:
            raise LensError(
                f"--quantize must be one of {', '.join(QUANTIZE)}, got {self.quantize!r}"
            )
        if self.max_memory and self.device_map is None:
            object.__setattr__(self, "device_map", "auto")  # caps mean nothing on one device

    @property
    def split(self) -> bool:
        """Does accelerate place the layers (rather than one ``.to(device)``)?"""
        return self.device_map is not None

    def words(self) -> str:
        """What the loader's progress line adds: ``device map auto, int8 weights``."""
        words = [f"device map {self.device_map}"] if self.split else []
        return ", ".join(words + ([f"{self.quantize} weights"] if self.quantize else []))

    def accelerate_memory(self) -> dict[int | str, int] | None:
        """``max_memory`` as accelerate reads it: GPU indices as ints, ``cpu``/``mps``/``disk``."""
        if not self.max_memory:
            return None
        return {(int(k.split(":")[-1]) if k[-1].isdigit() else k): v for k, v in self.max_memory}


def from_pretrained_kwargs(
    place: Placement, device_type: str, offload_root: Path, weights_id: str
) -> dict[str, Any]:
    """``from_pretrained``'s arguments for ``place``: accelerate's device map and caps, disk
    offload under ``offload_root`` (one folder per weights and caps, reused; a safetensors
    checkpoint is read where it is, so it stays small), the quantization config."""
    from llm_lens.core.quantize import quantization_config

    kwargs: dict[str, Any] = {}
    if place.quantize:
        kwargs["quantization_config"] = quantization_config(place.quantize, device_type)
    if place.split:
        caps = "-".join(f"{k}{v}" for k, v in place.max_memory) or "all"
        key = hashlib.sha256(f"{weights_id}:{place.device_map}:{caps}".encode()).hexdigest()
        offload = offload_root / key[:16]
        offload.mkdir(parents=True, exist_ok=True)
        kwargs.update(
            device_map=place.device_map,
            max_memory=place.accelerate_memory(),
            offload_folder=str(offload),
        )
    return kwargs


@contextlib.contextmanager
def quiet_offload() -> Iterator[None]:
    """accelerate warns on stderr that an offloaded model has ``meta`` parameters: that is the
    point of offloading (the model record says where each piece sits), so not while loading."""
    import logging

    accelerate_log = logging.getLogger("accelerate.big_modeling")  # where the warning comes from
    level = accelerate_log.level
    accelerate_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        accelerate_log.setLevel(level)


def parse_size(text: str, where: str = "--max-memory") -> int:
    """Bytes from ``150MiB``, ``20GiB``, ``1.5GB``, ``4096B``; anything else is a LensError."""
    match = _SIZE.match(text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise LensError(f"{where}: {text!r} is not a size (e.g. 150MiB, 20GiB, 1.5GB)")
    value = float(match.group(1)) * unit  # 400 digits are inf, not an error, as a float
    if not value < 2**63:
        raise LensError(f"{where}: {text[:40]!r} is too large (at most 8 EiB)")
    size = int(value)
    if size <= 0:
        raise LensError(f"{where}: {text!r} must be more than 0 bytes")
    return size


def parse_max_memory(text: str) -> tuple[tuple[str, int], ...]:
    """``cpu=150MiB,cuda:0=20GiB`` → (("cpu", 157286400), ("cuda:0", 21474836480)); strict:
    each device once, one of cpu, mps, disk, cuda:N (or N), each size a positive size."""
    caps: dict[str, int] = {}
    for part in text.split(","):
        device, eq, size = (s.strip() for s in part.partition("="))
        device = device.lower()
        if not eq or not device or not size:
            raise LensError(
                f"--max-memory: {part.strip()!r} is not DEVICE=SIZE ({MAX_MEMORY_HELP})"
            )
        if not _DEVICE.match(device):
            raise LensError(f"--max-memory: unknown device {device!r} (cpu, mps, disk or cuda:N)")
        device = f"cuda:{device}" if device.isdigit() else device
        if device in caps:
            raise LensError(f"--max-memory: {device} is named twice")
        caps[device] = parse_size(size)
    return tuple(caps.items())


def parse_placement(
    device_map: str | None = None, max_memory: str | None = None, quantize: str | None = None
) -> Placement:
    """The command line's (or the open dialog's) text as a :class:`Placement`; torch-free, so a
    mistake is one line before any model is read."""
    return Placement(
        device_map=device_map or None,
        max_memory=parse_max_memory(max_memory) if max_memory else (),
        quantize=quantize or None,
    )


@dataclass(frozen=True)
class PlacedPart:
    """One piece the device map placed: its module name, where its weights sit (``cpu``,
    ``cuda:0``, ``disk``…) and the bytes of its parameters and buffers."""

    name: str
    where: str
    nbytes: int


def placement_of(model: Any) -> tuple[PlacedPart, ...]:
    """Which pieces of ``model`` sit where (transformers' ``hf_device_map``) and their bytes;
    empty for a model that was not split (everything on one device)."""
    device_map = getattr(model, "hf_device_map", None)
    if (
        not isinstance(device_map, dict)
        or len(set(device_map.values())) <= 1
        and not _offloaded(device_map)
    ):
        return ()
    modules = dict(model.named_modules())
    parts = []
    for name, where in device_map.items():
        module = modules.get(name, model if name == "" else None)
        nbytes = 0 if module is None else _module_bytes(module)
        parts.append(PlacedPart(name, _where(where), nbytes))
    return tuple(parts)


def offloaded(model: Any) -> bool:
    """Did the device map put any of ``model``'s weights on the CPU or disk, to be loaded by a
    hook for each forward (so they are on ``meta`` in between)?"""
    from accelerate.utils import has_offloaded_params

    if getattr(model, "hf_device_map", None) is None:
        return False
    return any(has_offloaded_params(m) for m in model.modules())


def _offloaded(device_map: dict[str, Any]) -> bool:
    return any(_where(w) == "disk" for w in device_map.values())


def _where(value: Any) -> str:
    if isinstance(value, int):
        return f"cuda:{value}"
    return str(value)


def _module_bytes(module: Any) -> int:
    """Parameter and buffer bytes of ``module``, offloaded ones too (their ``meta`` stand-ins
    carry the real shape and dtype)."""
    seen: set[int] = set()
    total = 0
    for t in [*module.parameters(), *module.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def bytes_by_place(parts: tuple[PlacedPart, ...]) -> dict[str, int]:
    """Total bytes per place (``cuda:0``, ``cpu``, ``disk``), GPUs first, disk last."""
    totals: dict[str, int] = {}
    for part in parts:
        totals[part.where] = totals.get(part.where, 0) + part.nbytes
    order = sorted(totals, key=lambda w: (w == "disk", w == "cpu", w))
    return {w: totals[w] for w in order}


def placement_line(parts: tuple[PlacedPart, ...]) -> str:
    """One line for the status bar, each place with what it holds, GPUs first: ``cpu: layers
    0–1, embed_tokens, lm_head (255 MB) · disk: layers 2–29, norm, rotary_emb (396 MB)``; empty
    for a model on one device."""
    if not parts:
        return ""
    totals = bytes_by_place(parts)
    bits = []
    for where, nbytes in totals.items():
        here = [p.name for p in parts if p.where == where]
        layers = sorted(i for i in map(_layer_index, here) if i is not None)
        others = [n.rsplit(".", 1)[-1] or "the whole model" for n in here
                  if _layer_index(n) is None]  # fmt: skip
        names = ([_ranges(layers)] if layers else []) + others
        bits.append(f"{where}: {', '.join(names)} ({nbytes / 1e6:.0f} MB)")
    return " · ".join(bits)


def _ranges(layers: list[int]) -> str:
    """[0, 1, 2, 5] → ``layers 0–2, 5``; [3] → ``layer 3``."""
    spans: list[list[int]] = []
    for i in layers:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in spans)
    return f"layer {text}" if len(layers) == 1 else f"layers {text}"


def _layer_index(name: str) -> int | None:
    match = re.search(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)$", name)
    return int(match.group(1)) if match else None


def _hook_owners(root: Any, module: Any) -> list[Any]:
    """The modules whose accelerate hooks load ``module``'s weights: those in it whose hook
    offloads (accelerate hooks each leaf that holds weights), else its nearest ancestor's."""
    from accelerate.utils import has_offloaded_params

    inside = [m for m in module.modules() if has_offloaded_params(m)]
    if inside:
        return inside
    name = next((n for n, m in root.named_modules() if m is module), None)
    if name is None:
        return []
    parts = name.split(".")
    for i in range(len(parts) - 1, -1, -1):
        owner = root.get_submodule(".".join(parts[:i]))
        if has_offloaded_params(owner):
            return [owner]
    return []


@contextlib.contextmanager
def weights_of(root: Any, *modules: Any) -> Iterator[None]:
    """While inside, each of ``modules`` (parts of ``root``) holds its real weights, loaded by
    accelerate's hook where the device map offloaded it (to the CPU or to disk), on the device
    its forward runs on; outside, they go back. Calls of those modules inside reuse the loaded
    weights (their hook's offloading waits until the end). Free for a model not split.

    Only what is asked for is loaded: ask for one layer at a time, or the point of offloading
    (one layer's weights in memory at once) is lost."""
    if getattr(root, "hf_device_map", None) is None:
        yield
        return
    owners: list[Any] = []
    for module in modules:
        for owner in _hook_owners(root, module) if module is not None else []:
            if all(owner is not o for o in owners):
                owners.append(owner)
    loaded: list[Any] = []
    try:
        for owner in owners:
            hook = owner._hf_hook
            before = getattr(hook, "input_device", None)  # a forward in progress keeps its own
            hook.pre_forward(owner)  # accelerate's align_module_device does the same
            hook.input_device = before
            hook.offload = False  # the module's own calls inside leave the weights loaded
            loaded.append(owner)
        yield
    finally:
        for owner in reversed(loaded):
            hook = owner._hf_hook
            hook.offload = True
            hook.post_forward(owner, None)


@contextlib.contextmanager
def forwards_replaced(pairs: list[tuple[Any, Any]]) -> Iterator[None]:
    """Each (module, forward) pair's ``module.forward`` is ``forward`` while inside; afterwards
    whatever it was before: accelerate's hook wrapper, where a device map put one (deleting the
    attribute, as a model without hooks allows, would drop the hook and its weight loading)."""
    saved = [(module, module.__dict__.get("forward")) for module, _ in pairs]
    for module, forward in pairs:
        module.forward = forward
    try:
        yield
    finally:
        for module, before in reversed(saved):
            if before is None:
                del module.forward
            else:
                module.forward = before


def input_device(model: Any) -> Any:
    """The device a forward's inputs go to: where the first weights are, or, for a model whose
    first pieces a device map offloaded (their weights on ``meta``), the device their hook runs
    them on (the CPU, or the main GPU)."""
    import torch

    hook = getattr(model.get_input_embeddings(), "_hf_hook", None)
    device = getattr(hook, "execution_device", None)
    if device is not None:
        return torch.device(device if not isinstance(device, int) else f"cuda:{device}")
    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device("cpu")


def model_placement_line(info: Any) -> str:
    """The status bar's words for a loaded model (a ``ModelInfo``): where its pieces sit and
    whether its weights are quantized; empty for a whole model with its own weights."""
    parts = tuple(PlacedPart(str(n), str(w), int(b)) for n, w, b in info.placement)
    quantized = info.quantization.split(":", 1)[0] if info.quantization else ""
    return " · ".join(bit for bit in (placement_line(parts), quantized) if bit)


def kv_device_line(kv: Any) -> str:
    """The KV pane's words for the cache's bytes per device (a ``KVCacheStats``), e.g.
    ``KV cache: cuda:0 1.2 MB · cuda:1 0.9 MB``; empty when it sits on one device."""
    if len(kv.by_device) <= 1:
        return ""
    return "KV cache: " + " · ".join(f"{w} {b / 1e6:.1f} MB" for w, b in kv.by_device)
