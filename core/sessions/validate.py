"""Checking a session file's manifest before anything is built from it.

A session file may come from anyone. :func:`check_manifest` walks the whole manifest first
(types, finite numbers, ranges: no ``Infinity`` where a count belongs, no string where a
probability belongs); :func:`check_session` then checks the built session against its model
(array shapes against the layer, head, hidden and vocabulary sizes). Either raises
:class:`SessionError` with one line naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_lens.core.sessions.format import (
    KV_SCALARS,
    SERVED,
    TIMING_FIELDS,
    TIMING_FLAGS,
    TIMING_WAITS,
    Session,
    SessionError,
    SessionRun,
    is_served,
)

MODEL_INTS = ("num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size", "vocab_size",
              "context_length", "num_parameters")  # fmt: skip
MODEL_STRS = ("name", "source", "architecture", "dtype", "device", "position_kind", "weights_id")
MAX_COUNT = 1 << 40  # no layer count, id or byte count of a real model comes near this
ENGINE_STRS = ("name", "model")


@dataclass(frozen=True)
class _Vocab:
    """The ids a file may hold: 0..size-1 for a local model; for a served one (its vocabulary
    size perhaps unknown, 0) also -1, a token the server named by text alone."""

    size: int
    served: bool = False

    @property
    def low(self) -> int:
        return -1 if self.served else 0

    @property
    def high(self) -> int:  # the largest id (and rank)
        return MAX_COUNT if self.served and self.size == 0 else self.size - 1


def _fail(where: str, what: str) -> SessionError:
    return SessionError(f"the manifest is invalid: {where} {what}")


def _int(value: Any, where: str, low: int = 0, high: int = MAX_COUNT) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(where, f"must be an integer, not {_show(value)}")
    if not low <= value <= high:
        raise _fail(where, f"must be between {low} and {high}, not {_show(value)}")
    return value


def _num(value: Any, where: str, low: float = -math.inf, high: float = math.inf) -> float:
    """A real number (int or float), finite, within [low, high]."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _fail(where, f"must be a number, not {_show(value)}")
    if not math.isfinite(value) or not low <= value <= high:
        raise _fail(where, f"must be a finite number in [{low:g}, {high:g}], not {_show(value)}")
    return float(value)


def _type(value: Any, kind: type | tuple[type, ...], where: str, name: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _fail(where, f"must be {name}, not {_show(value)}")
    return value


def _opt(value: Any, check: Callable[[Any, str], Any], where: str) -> Any:
    return None if value is None else check(value, where)


def _show(value: Any) -> str:
    text = (
        repr(value)
        if isinstance(value, str | int | float | bool) or value is None
        else (type(value).__name__)
    )
    return text if len(text) <= 40 else text[:37] + "…"


def _str(value: Any, where: str) -> str:
    return str(_type(value, str, where, "a string"))


def _dict(value: Any, where: str) -> dict[str, Any]:
    return dict(_type(value, dict, where, "an object"))


def _list(value: Any, where: str) -> list[Any]:
    return list(_type(value, list, where, "a list"))


def _field(d: dict[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise _fail(f"{where}.{key}", "is missing")
    return d[key]


# ---- the manifest --------------------------------------------------------------------------


def check_manifest(m: dict[str, Any]) -> None:
    """Every field the reader uses, by type and range, before any object is built."""
    _str(_field(m, "app_version", "manifest"), "app_version")
    _str(_field(m, "created", "manifest"), "created")
    model = _dict(_field(m, "model", "manifest"), "model")
    served = is_served(model)  # a server's model: shapes it cannot report are 0
    for key in MODEL_INTS:
        _int(
            _field(model, key, "model"),
            f"model.{key}",
            0 if served or key == "num_parameters" else 1,
        )
    for key in MODEL_STRS:
        _str(_field(model, key, "model"), f"model.{key}")
    _opt(_field(model, "rope_theta", "model"), lambda v, w: _num(v, w, 0.0), "model.rope_theta")
    _opt(model.get("partly_random"), _str, "model.partly_random")  # absent before issue 38
    runs = _list(_field(m, "runs", "manifest"), "runs")
    if not runs:
        raise SessionError("the manifest is invalid: the file holds no runs")
    _check_engine(m.get("engine"), served)
    vocab = _Vocab(model["vocab_size"], served)
    for i, run in enumerate(runs):
        _check_run(_dict(run, f"runs[{i}]"), f"runs[{i}]", vocab)
    if served:
        _check_served_tree(runs)
    _int(m.get("shown", -1), "shown", -1, len(runs) - 1)
    for i, c in enumerate(_list(m.get("comparisons", []), "comparisons")):
        c = _dict(c, f"comparisons[{i}]")
        at = _list(_field(c, "runs", f"comparisons[{i}]"), f"comparisons[{i}].runs")
        for j, index in enumerate(at):
            _int(index, f"comparisons[{i}].runs[{j}]", 0, len(runs) - 1)
        _num(_field(c, "shared_prefill_ms", f"comparisons[{i}]"), "shared_prefill_ms", 0.0)


def _check_served_tree(runs: list[dict[str, Any]]) -> None:
    """A served branch names a run of the file and a step both have, holds that run's tokens
    before it (a branch keeps its whole path), and no run is its own ancestor."""
    by_id = {r["run_id"]: r for r in runs}
    for i, r in enumerate(runs):
        if r["parent"] is None:
            continue
        where, (up, step) = f"runs[{i}].parent", r["parent"]
        parent = by_id.get(up)
        if parent is None or up == r["run_id"]:
            raise _fail(where, f"names run {up}, which is not another run of the file")
        if step >= min(len(r["steps"]), len(parent["steps"])):
            raise _fail(where, f"names step {step}, past the steps of the branch or its parent")
        mine, theirs = (
            [s["token"]["text"] for s in x["steps"][:step]] for x in (r, parent)
        )  # fmt: skip
        if mine != theirs:
            raise _fail(where, f"the branch's steps before step {step} are not run {up}'s")
        seen, at = {r["run_id"]}, parent
        while at["parent"] is not None and at["parent"][0] in by_id:
            if at["run_id"] in seen or len(seen) > len(runs):
                raise _fail(where, "makes a cycle: a run would be its own ancestor")
            seen.add(at["run_id"])
            at = by_id[at["parent"][0]]


def _check_engine(engine: Any, served: bool) -> None:
    """The engine record: strings (the url without credentials); a served model needs one."""
    if engine is None:
        if served:
            raise _fail("engine", f"is missing (the model is {SERVED!r})")
        return
    engine = _dict(engine, "engine")
    for key in ENGINE_STRS:
        _str(_field(engine, key, "engine"), f"engine.{key}")
    url = _opt(engine.get("url"), _str, "engine.url")
    if url is not None and ("@" in url.partition("//")[2].partition("/")[0] or "?" in url):
        raise _fail("engine.url", "must not hold credentials")
    for key, value in engine.items():
        _opt(value, _str, f"engine.{key}")


def _check_token(t: Any, where: str, vocab: _Vocab) -> None:
    t = _dict(t, where)
    _int(_field(t, "id", where), f"{where}.id", vocab.low, vocab.high)
    _str(_field(t, "text", where), f"{where}.text")
    raw = _str(_field(t, "raw", where), f"{where}.raw")
    try:
        bytes.fromhex(raw)
    except ValueError:
        raise _fail(f"{where}.raw", "must be hexadecimal bytes") from None
    _type(_field(t, "special", where), bool, f"{where}.special", "true or false")
    for key in ("start", "end"):
        _int(_field(t, key, where), f"{where}.{key}", -1)


def _check_prompt(p: Any, where: str, vocab: _Vocab) -> None:
    p = _dict(p, where)
    _str(_field(p, "text", where), f"{where}.text")
    _str(_field(p, "rendered", where), f"{where}.rendered")
    _type(_field(p, "chat", where), bool, f"{where}.chat", "true or false")
    tokens = _list(_field(p, "tokens", where), f"{where}.tokens")
    if not tokens and not vocab.served:  # a server that applied its template: unknown
        raise _fail(f"{where}.tokens", "is empty")
    for i, t in enumerate(tokens):
        _check_token(t, f"{where}.tokens[{i}]", vocab)


def _check_run(r: dict[str, Any], where: str, vocab: _Vocab) -> None:
    _int(_field(r, "run_id", where), f"{where}.run_id")
    _str(_field(r, "label", where), f"{where}.label")
    parent = _field(r, "parent", where)
    if parent is not None:
        pair = _list(parent, f"{where}.parent")
        if len(pair) != 2:
            raise _fail(f"{where}.parent", "must be [run_id, step]")
        _int(pair[0], f"{where}.parent[0]")
        _int(pair[1], f"{where}.parent[1]")
    _check_prompt(_field(r, "prompt", where), f"{where}.prompt", vocab)
    _check_params(_dict(_field(r, "params", where), f"{where}.params"), f"{where}.params")
    _opt(_field(r, "finish_reason", where), _str, f"{where}.finish_reason")
    _dict(_field(r, "arrays", where), f"{where}.arrays")
    for i, step in enumerate(_list(_field(r, "steps", where), f"{where}.steps")):
        _check_step(_dict(step, f"{where}.steps[{i}]"), f"{where}.steps[{i}]", i, vocab)
    prefill = _field(r, "prefill", where)
    if prefill is not None:
        p = _dict(prefill, f"{where}.prefill")
        _int(_field(p, "run_id", f"{where}.prefill"), f"{where}.prefill.run_id")
        for key in ("hidden", "positions"):
            _str(_field(p, key, f"{where}.prefill"), f"{where}.prefill.{key}")
        if "prompt" in p:
            _check_prompt(p["prompt"], f"{where}.prefill.prompt", vocab)
    for key in ("prompt_attention", "generator_state"):
        _opt(r.get(key), _str, f"{where}.{key}")
    for name, member in _dict(r.get("extras") or {}, f"{where}.extras").items():
        _str(member, f"{where}.extras.{name}")
    _check_texts(_dict(r.get("extras_json") or {}, f"{where}.extras_json"), where)


def _check_params(p: dict[str, Any], where: str) -> None:
    for key, value in p.items():
        if value is not None and not isinstance(value, bool | str):
            _num(value, f"{where}.{key}")
    if isinstance(p.get("seed"), int | float) and not isinstance(p.get("seed"), bool):
        _int(p["seed"], f"{where}.seed", -(1 << 63), (1 << 64) - 1)


def _check_texts(texts: dict[str, Any], where: str) -> None:
    """Recorded lens texts: lists (of lists) of strings."""

    def strings(value: Any, at: str, depth: int) -> None:
        for i, item in enumerate(_list(value, at)):
            if depth:
                strings(item, f"{at}[{i}]", depth - 1)
            else:
                _str(item, f"{at}[{i}]")

    for key, depth in (("lens_top_texts", 2), ("prompt_lens_texts", 1)):
        if key in texts:
            strings(texts[key], f"{where}.extras_json.{key}", depth)


def _check_step(s: dict[str, Any], where: str, index: int, vocab: _Vocab) -> None:
    _int(_field(s, "run_id", where), f"{where}.run_id")
    _int(_field(s, "index", where), f"{where}.index", index, index)
    # a served step before the prompt's length is known (a stream cut before its usage): -1
    _int(_field(s, "position", where), f"{where}.position", vocab.low)
    _check_token(_field(s, "token", where), f"{where}.token", vocab)
    # null: a number the engine did not report (a server that sent no log-probabilities)
    _opt(_field(s, "prob", where), lambda v, w: _num(v, w, 0.0, 1.0), f"{where}.prob")
    logprob = _field(s, "logprob", where)
    if logprob != -math.inf:  # a chosen token whose probability underflowed float32
        _opt(logprob, lambda v, w: _num(v, w, high=0.0), f"{where}.logprob")
    _int(_field(s, "rank", where), f"{where}.rank", 0, vocab.high)
    _opt(_field(s, "entropy", where), lambda v, w: _num(v, w, 0.0), f"{where}.entropy")
    for i, text in enumerate(_list(_field(s, "top_texts", where), f"{where}.top_texts")):
        _str(text, f"{where}.top_texts[{i}]")
    for i, g in enumerate(_list(_field(s, "stages", where), f"{where}.stages")):
        at = f"{where}.stages[{i}]"
        g = _dict(g, at)
        _str(_field(g, "name", at), f"{at}.name")
        _num(_field(g, "removed_mass", at), f"{at}.removed_mass", -1e-3, 1 + 1e-3)
        _int(_field(g, "kept", at), f"{at}.kept", 0, vocab.high + 1)
        _num(_field(g, "entropy", at), f"{at}.entropy", 0.0)
    kv = _dict(_field(s, "kv", where), f"{where}.kv")
    for key in KV_SCALARS:
        check = _int if not key.startswith("device_") else lambda v, w: _opt(v, _int, w)
        check(_field(kv, key, f"{where}.kv"), f"{where}.kv.{key}")
    timing = _dict(_field(s, "timing", where), f"{where}.timing")
    for key in TIMING_FIELDS:
        _num(_field(timing, key, f"{where}.timing"), f"{where}.timing.{key}", 0.0)
    for key in TIMING_WAITS:  # optional (older files)
        _opt(timing.get(key), lambda v, w: _num(v, w, 0.0), f"{where}.timing.{key}")
    for key in TIMING_FLAGS:
        flag = timing.get(key)
        _opt(flag, lambda v, w: _type(v, bool, w, "true or false"), f"{where}.timing.{key}")
    _opt(_field(s, "finish_reason", where), _str, f"{where}.finish_reason")
    flag = s.get("approximate")  # served steps only
    _opt(flag, lambda v, w: _type(v, bool, w, "true or false"), f"{where}.approximate")


# ---- the built session against its model ---------------------------------------------------


def check_session(session: Session) -> None:
    """Array shapes against the model's sizes, so no pane meets a shape it cannot draw."""
    m = session.model
    for i, run in enumerate(session.runs):
        _check_run_arrays(run, f"run {i}", m)


def _shape(array: np.ndarray, want: tuple[int | None, ...], what: str) -> None:
    pairs = zip(want, array.shape, strict=False)
    ok = array.ndim == len(want) and all(w is None or w == n for w, n in pairs)
    if not ok:
        shown = tuple("any" if w is None else w for w in want)
        raise SessionError(
            f"the arrays disagree with the model: {what} has shape {tuple(array.shape)}, "
            f"expected {shown}"
        )


def _check_run_arrays(run: SessionRun, where: str, m: dict[str, Any]) -> None:
    layers, heads, hidden = m["num_layers"], m["num_heads"], m["hidden_size"]
    served = is_served(m)
    vocab = 0 if served else m["vocab_size"]  # a server returns no whole distribution
    low = -1 if served else 0  # a token a server named by text alone has id -1
    for s in run.steps:
        at = f"{where} step {s.index}"
        _shape(s.logits, (vocab,), f"{at} logits")
        n = len(s.top_texts)
        for name in ("top_ids", "top_logits", "top_probs"):
            _shape(getattr(s, name), (n,), f"{at} {name}")
        _shape(s.attention, (layers, heads, None), f"{at} attention")
        width = 0 if s.norms is not None else hidden  # format 3 may keep only the norms
        _shape(s.hidden, (layers + 1, width), f"{at} hidden")
        _shape(s.attn_update, (layers, width), f"{at} attn_update")
        if s.norms is not None:
            _shape(s.norms, (4, layers + 1), f"{at} norms")
        _shape(s.kv.per_layer, (layers, 2), f"{at} kv_per_layer")
        # a served chat prompt's tokens are unknown: its context holds the generated ones only
        _shape(s.context_ids, (None if served else s.position + 1,), f"{at} context_ids")
        high = MAX_COUNT if served and not m["vocab_size"] else m["vocab_size"] - 1
        if s.top_ids.size and not (low <= int(s.top_ids.min()) and int(s.top_ids.max()) <= high):
            raise SessionError(f"the arrays disagree with the model: {at} top_ids out of range")
        for g in s.stages:
            _shape(g.top_ids, (g.top_probs.shape[0],), f"{at} stage {g.name} top_ids")
    if run.prefill is not None:
        t = run.prefill.positions.shape[0] if run.prefill.positions.ndim == 1 else -1
        _shape(run.prefill.positions, (None,), f"{where} prefill positions")
        _shape(run.prefill.hidden, (layers + 1, t, hidden), f"{where} prefill hidden")
    if run.prompt_attention is not None:
        t = len(run.prompt)
        _shape(run.prompt_attention, (layers, heads, t, t), f"{where} prompt attention")
    _check_extras(run, where)


def _check_extras(run: SessionRun, where: str) -> None:
    e, texts = run.extras, run.extras_json
    ids, probs = e.get("lens_top_ids"), e.get("lens_top_probs")
    if ids is not None or probs is not None:
        if ids is None or probs is None or ids.ndim != 3 or probs.shape != ids.shape:
            raise SessionError(f"the arrays disagree: {where} lens arrays")
        _shape(ids, (len(run.steps), None, None), f"{where} lens_top_ids")
        rows = texts.get("lens_top_texts")
        if not isinstance(rows, list) or len(rows) != len(run.steps):
            raise SessionError(f"the manifest is invalid: {where} lens texts do not match")
    pl_ids, pl_probs = e.get("prompt_lens_ids"), e.get("prompt_lens_probs")
    if pl_ids is not None and (
        pl_probs is None
        or pl_ids.ndim != 2
        or pl_probs.shape != pl_ids.shape
        or "prompt_lens_texts" not in texts
    ):
        raise SessionError(f"the arrays disagree: {where} prompt lens arrays")
    coords = e.get("embedding_coords")
    if coords is not None and coords.ndim != 2:
        raise SessionError(f"the arrays disagree: {where} embedding coordinates")
