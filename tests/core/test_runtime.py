"""Process set-up helpers: the thread count and giving freed heap memory back."""

from __future__ import annotations

import sys

import pytest

from llm_lens.core.runtime import default_threads, release_memory


def test_one_torch_thread_on_two_cores_and_one_core_left_to_the_gui_beyond():
    assert default_threads(1) == 1 and default_threads(2) == 1
    assert default_threads(4) == 3 and default_threads(16) == 15


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_blocks_go_back_to_the_system():
    """Blocks under glibc's (raised) mmap threshold stay in the heap when freed behind a live
    one; release_memory returns their pages."""

    def rss_mb() -> float:
        import os

        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    big = bytearray(30 << 20)
    del big  # glibc raises its mmap threshold to 30 MB: the blocks below go to the heap
    blocks = [bytearray(8 << 20) for _ in range(24)]  # 192 MB
    for block in blocks:
        block[::4096] = b"\1" * len(range(0, len(block), 4096))  # touched: resident
    keep = bytearray(1 << 10)  # a live block above them: free() cannot shrink the heap top
    del blocks
    before = rss_mb()
    assert release_memory()
    after = rss_mb()
    del keep
    assert before - after > 100, (before, after)


def test_every_core_for_a_block_then_the_model_count_again(monkeypatch):
    import os

    import torch

    from llm_lens.core.runtime import every_core

    monkeypatch.delenv("LLM_LENS_THREADS", raising=False)
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), every_core() as n:
        assert n == torch.get_num_threads() == os.cpu_count()
        raise RuntimeError("a failing job still gives the cores back")
    assert torch.get_num_threads() == before
