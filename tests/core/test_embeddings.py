"""Embeddings (``core/embeddings.py``): the table's PCA, the residual paths' PCA and the nearest
neighbours, each against numpy's own SVD and cosine similarity on a small known table."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from llm_lens.core.embeddings import embedding_projection, hidden_paths, neighbours


def table(rows: int = 60, dim: int = 8, seed: int = 0) -> np.ndarray:
    """Rows with a clear spectrum (10, 4, 1, 0.3, ...): the first two components are well apart."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(rows, dim)))
    v, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    s = np.array([10, 4, 1, 0.3, 0.2, 0.1, 0.05, 0.01]) * np.sqrt(rows)
    return ((u * s) @ v.T + rng.normal(size=dim)).astype(np.float32)


def fake_engine(weights: np.ndarray) -> SimpleNamespace:
    embed = torch.nn.Embedding.from_pretrained(torch.from_numpy(weights))
    texts = SimpleNamespace(text=lambda i: f"tok{i}")
    return SimpleNamespace(anatomy=SimpleNamespace(embed=embed), texts=texts)


def numpy_pca2(x: np.ndarray, fit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(coords of ``x``, explained fractions) by numpy's exact SVD of ``fit`` (default ``x``)."""
    fit = x if fit is None else fit
    x64, fit64 = x.astype(np.float64), fit.astype(np.float64)
    mean = fit64.mean(axis=0)
    _, s, vt = np.linalg.svd(fit64 - mean, full_matrices=False)
    return (x64 - mean) @ vt[:2].T, s[:2] ** 2 / (s**2).sum()


def same_up_to_sign(got: np.ndarray, want: np.ndarray, atol: float) -> None:
    for c in range(2):  # a principal axis has no sign of its own
        sign = np.sign(np.dot(got[..., c].ravel(), want[..., c].ravel()))
        np.testing.assert_allclose(sign * got[..., c], want[..., c], atol=atol)


def test_embedding_projection_is_the_tables_pca():
    weights = table()
    proj = embedding_projection(fake_engine(weights))
    coords, explained = numpy_pca2(weights)
    assert proj.coords.shape == (60, 2) and proj.components.shape == (2, 8)
    np.testing.assert_allclose(proj.mean, weights.mean(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(proj.explained, explained, rtol=1e-4)
    same_up_to_sign(proj.coords, coords, atol=1e-3 * np.abs(coords).max())
    np.testing.assert_allclose(proj.components @ proj.components.T, np.eye(2), atol=1e-5)
    assert not proj.coords.flags.writeable


def test_hidden_paths_leave_an_outlier_out_of_the_fit_but_project_it():
    states = table(rows=12)  # (layers + 1) * tokens = 3 * 4 states
    states[0] *= 1000  # the first token's first state: an "attention sink"
    hidden = states.reshape(4, 3, 8).transpose(1, 0, 2)  # (layers + 1, tokens, hidden)
    paths = hidden_paths(hidden)
    coords, explained = numpy_pca2(states, fit=states[1:])
    assert paths.coords.shape == (4, 3, 2)
    np.testing.assert_allclose(paths.explained, explained, rtol=1e-3)
    same_up_to_sign(paths.coords.reshape(12, 2), coords, atol=1e-2 * np.abs(coords[1:]).max())
    too_few = hidden_paths(np.ones((2, 1, 8), np.float32))
    assert too_few.coords.shape == (1, 2, 2) and not too_few.coords.any()


def test_neighbours_are_the_highest_cosine_similarities():
    weights = table(rows=40)
    got = neighbours(fake_engine(weights), token_id=7, k=5)
    unit = weights / np.linalg.norm(weights, axis=1, keepdims=True)
    sims = unit @ unit[7]
    order = [int(i) for i in np.argsort(-sims) if i != 7][:5]
    assert got.token_id == 7 and got.ids.tolist() == order
    np.testing.assert_allclose(got.similarities, sims[order], rtol=1e-5)
    assert got.texts == tuple(f"tok{i}" for i in order)


def test_a_table_read_in_blocks_gives_the_same_pca_and_neighbours(monkeypatch):
    """A table larger than one block (7 rows to a block here; 8,192 in use): the PCA and the
    neighbours equal numpy's on the whole table, for float32 and bfloat16 weights alike."""
    from llm_lens.core import embeddings

    monkeypatch.setattr(embeddings, "ROWS", 7)
    weights = table(rows=60)
    for dtype in (torch.float32, torch.bfloat16):
        held = torch.from_numpy(weights).to(dtype)
        engine = fake_engine(held.float().numpy())
        engine.anatomy.embed.weight.data = held
        exact = held.float().numpy()
        proj = embedding_projection(engine)
        coords, explained = numpy_pca2(exact)
        np.testing.assert_allclose(proj.mean, exact.mean(axis=0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(proj.explained, explained, rtol=1e-4)
        same_up_to_sign(proj.coords, coords, atol=1e-3 * np.abs(coords).max())
        unit = exact / np.linalg.norm(exact, axis=1, keepdims=True)
        sims = unit @ unit[40]
        order = [int(i) for i in np.argsort(-sims) if i != 40][:5]
        got = neighbours(engine, token_id=40, k=5)
        assert got.ids.tolist() == order
        np.testing.assert_allclose(got.similarities, sims[order], rtol=1e-5)


def test_no_whole_table_is_converted_at_once(monkeypatch):
    """The projection and the neighbours turn at most a block of rows into float32 at a time
    (a whole 152,064 × 5,120 bfloat16 table as float32 is 3 GiB more, its centred copy 3 again)."""
    from llm_lens.core import embeddings

    monkeypatch.setattr(embeddings, "ROWS", 7)
    held = torch.from_numpy(table(rows=60)).to(torch.bfloat16)
    engine = fake_engine(held.float().numpy())
    engine.anatomy.embed.weight.data = held
    sizes: list[int] = []
    to_float = torch.Tensor.float

    def counted(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        sizes.append(self.shape[0] if self.dim() == 2 else 1)
        return to_float(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "float", counted)
    embedding_projection(engine)
    neighbours(engine, token_id=3, k=5)
    assert sizes and max(sizes) <= 7
