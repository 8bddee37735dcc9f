"""A model spread by accelerate's device map (most layers read from disk) computes every number
the panes show exactly as the unsplit model does; the options that ask for it are strict."""

from __future__ import annotations

import pytest

from llm_lens.core.errors import LensError
from llm_lens.core.placement import (
    PlacedPart,
    Placement,
    bytes_by_place,
    parse_max_memory,
    parse_placement,
    placement_line,
)

TOL = 1e-5


@pytest.mark.parametrize(
    "text, caps",
    [
        ("cpu=150MiB", (("cpu", 150 * 2**20),)),
        ("cuda:0=20GiB, cpu=1.5GB", (("cuda:0", 20 * 2**30), ("cpu", 1_500_000_000))),
        ("0=1KiB,disk=4096B", (("cuda:0", 1024), ("disk", 4096))),
    ],
)
def test_max_memory_reads_devices_and_sizes(text, caps):
    assert parse_max_memory(text) == caps


@pytest.mark.parametrize(
    "text, words",
    [
        ("cpu", "not DEVICE=SIZE"),
        ("cpu=", "not DEVICE=SIZE"),
        ("gpu=1GiB", "unknown device 'gpu'"),
        ("cpu=12 parsecs", "not a size"),
        ("cpu=0MiB", "more than 0 bytes"),
        ("cpu=1GiB,cpu=2GiB", "named twice"),
        ("cpu=1GiB,", "not DEVICE=SIZE"),
        ("cpu=" + "9" * 400 + "GiB", "too large"),  # inf as a float: once an OverflowError
        ("cpu=9999999999TiB", "too large"),
    ],
)
def test_a_malformed_max_memory_is_one_line(text, words):
    with pytest.raises(LensError, match=words) as info:
        parse_max_memory(text)
    assert "\n" not in str(info.value)


def test_placement_defaults_and_caps_imply_a_device_map():
    assert not Placement().split
    place = parse_placement(max_memory="cpu=1GiB")
    assert place.split and place.device_map == "auto"
    assert place.accelerate_memory() == {"cpu": 2**30}
    assert parse_placement(max_memory="cuda:1=2GiB").accelerate_memory() == {1: 2 * 2**30}
    with pytest.raises(LensError, match="--device-map"):
        Placement(device_map="everywhere")
    with pytest.raises(LensError, match="--quantize"):
        Placement(quantize="int3")


def test_placement_line_groups_each_place():
    parts = tuple(
        PlacedPart(n, w, b)
        for n, w, b in [
            ("model.embed_tokens", "cuda:0", 2_000_000),
            ("model.layers.0", "cuda:0", 1_000_000),
            ("model.layers.1", "cpu", 1_000_000),
            ("model.layers.2", "disk", 1_000_000),
            ("model.layers.3", "disk", 1_000_000),
            ("model.norm", "disk", 1000),
        ]
    )
    assert bytes_by_place(parts) == {"cuda:0": 3_000_000, "cpu": 1_000_000, "disk": 2_001_000}
    assert placement_line(parts) == (
        "cuda:0: layer 0, embed_tokens (3 MB) · cpu: layer 1 (1 MB) · disk: layers 2–3, norm (2 MB)"
    )
    assert placement_line(()) == ""
    whole = (PlacedPart("", "disk", 3_000_000),)  # a 1 KiB cap: accelerate maps "" to disk
    assert placement_line(whole) == "disk: the whole model (3 MB)"


@pytest.mark.parametrize(
    "flag",
    [
        ["--max-memory", "cpu=lots"],
        ["--max-memory", "gpu=1GiB"],
        ["--device-map", "wherever"],
        ["--quantize", "int3"],
    ],
)
def test_a_malformed_option_is_one_line_and_exit_2(flag, capsys):
    from llm_lens.core.cli import main

    assert main(["trace", "hi", *flag, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag[0] in err


def test_nf4_on_a_cpu_names_what_it_needs(capsys):
    from llm_lens.core.cli import main

    assert main(["trace", "hi", "--quantize", "nf4", "--device", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a CUDA GPU" in err


def test_status_bar_and_kv_pane_lines():
    from types import SimpleNamespace

    from llm_lens.core.placement import kv_device_line, model_placement_line

    info = SimpleNamespace(
        placement=(("model.layers.0", "cpu", 2_000_000), ("model.layers.1", "disk", 3_000_000)),
        quantization="int8 weights (quanto): the numbers of this model as quantized",
    )
    assert model_placement_line(info) == (
        "cpu: layer 0 (2 MB) · disk: layer 1 (3 MB) · int8 weights (quanto)"
    )
    assert model_placement_line(SimpleNamespace(placement=(), quantization="")) == ""
    two = SimpleNamespace(by_device=(("cuda:0", 1_200_000), ("cuda:1", 900_000)))
    assert kv_device_line(two) == "KV cache: cuda:0 1.2 MB · cuda:1 0.9 MB"
    assert kv_device_line(SimpleNamespace(by_device=(("cpu", 5),))) == ""


def test_from_pretrained_kwargs_offload_into_the_given_folder(tmp_path):
    from llm_lens.core.placement import from_pretrained_kwargs

    assert from_pretrained_kwargs(Placement(), "cpu", tmp_path, "w") == {}
    place = parse_placement("sequential", "cpu=1GiB,disk=4GiB")
    kwargs = from_pretrained_kwargs(place, "cpu", tmp_path, "w")
    assert kwargs["device_map"] == "sequential"
    assert kwargs["max_memory"] == {"cpu": 2**30, "disk": 4 * 2**30}
    folder = kwargs["offload_folder"]
    assert folder.startswith(str(tmp_path)) and (tmp_path / folder).is_dir()
    assert from_pretrained_kwargs(place, "cpu", tmp_path, "w")["offload_folder"] == folder
    assert from_pretrained_kwargs(place, "cpu", tmp_path, "v")["offload_folder"] != folder
    assert place.words() == "device map sequential"
