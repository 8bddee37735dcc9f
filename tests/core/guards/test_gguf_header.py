"""core/guards/gguf_header.py: the lean reader gives what gguf's own reader gives (keys,
array lengths, tensor names, shapes, types, data offsets), and a lying length is an error
at once, not a loop or an allocation."""

from __future__ import annotations

import numpy as np
import pytest

from llm_lens.core.guards.gguf_header import HeaderError, read_header, tensor_bytes
from tests.core.guards.builders import gguf_file, patched


def test_the_same_table_as_ggufs_reader(tmp_path):
    import gguf

    path = gguf_file(tmp_path / "m.gguf", blocks=3, held_blocks=3, vocab=11, rows=12)
    ours, theirs = read_header(path), gguf.GGUFReader(str(path))
    assert ours.fields["llama.block_count"] == 3 and ours.fields["general.architecture"] == "llama"
    assert ours.fields["tokenizer.ggml.tokens"] == ("array", 11)
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for mine, real in zip(ours.tensors, theirs.tensors, strict=True):
        assert mine.shape == tuple(int(d) for d in real.shape)
        assert ours.data_start + mine.offset == int(real.data_offset)
        assert tensor_bytes(mine) == int(real.n_bytes)


def test_the_bundled_models_table(loaded):
    from llm_lens.core.loading import bundled_gguf

    header = read_header(bundled_gguf())
    assert header.fields["llama.block_count"] == 30
    assert header.fields["tokenizer.ggml.tokens"] == ("array", 49152)
    assert len(header.tensors) == 272


@pytest.mark.parametrize("offset", [24, 56])  # the first key's length; its string value's
def test_a_lying_length_is_an_error(tmp_path, offset):
    path = gguf_file(tmp_path / "m.gguf")
    bad = patched(path, offset, np.uint64(2**62).tobytes(), tmp_path / "bad.gguf")
    with pytest.raises(HeaderError):
        read_header(bad)
