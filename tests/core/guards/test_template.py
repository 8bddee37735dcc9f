"""core/guards/template.py: a real chat template renders exactly as transformers renders it
(the guard only measures), and each way a template can run away stops at its limit in one
line naming the template; the limits are reached quickly, not after the damage."""

from __future__ import annotations

import time

import pytest

from llm_lens.core.errors import PromptError
from llm_lens.core.guards import template as guard
from llm_lens.core.tokens import render_prompt


@pytest.fixture
def tok(tokenizer):
    original = tokenizer.chat_template
    yield tokenizer
    tokenizer.chat_template = original


def test_a_real_template_renders_as_transformers_does(tok):
    text = "Explain transformers like I am 12 " * 50
    messages = [{"role": "user", "content": text}]
    expected = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert render_prompt(tok, text, True) == expected
    guard.check_template(tok, messages, add_generation_prompt=True)  # passes, raises nothing


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         "template steps"),
        ("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
         "{% endfor %}", "longer than"),
        ("{{ 'x' * 10**10 }}", "longer than"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "deep (recursion)"),
        ("{{ raise_exception('no tools here') }}", "it raised an error: no tools here"),
        ("{% if %}", "syntax error at line 1"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "tried to leave Jinja's sandbox"),
    ],
)  # fmt: skip
def test_a_runaway_template_is_one_line(tok, source, needle, monkeypatch):
    monkeypatch.setattr(guard, "MAX_SECONDS", 30.0)  # the step limit, not the clock, stops it
    tok.chat_template = source
    start = time.monotonic()
    with pytest.raises(PromptError) as caught:
        render_prompt(tok, "hi", True)
    line = str(caught.value)
    assert needle in line and "\n" not in line
    assert line.startswith(f"the chat template of {tok.name_or_path}: ")
    assert time.monotonic() - start < 15


def test_the_clock_stops_a_slow_template(tok, monkeypatch):
    monkeypatch.setattr(guard, "MAX_SECONDS", 0.2)
    monkeypatch.setattr(guard, "MAX_LINES", 10**9)
    tok.chat_template = (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    )
    with pytest.raises(PromptError, match="took longer than 0.2 s"):
        render_prompt(tok, "hi", True)


def test_a_big_user_text_is_not_a_bomb(tok):
    """A 1 MB prompt is far below the size limit: rendered (then refused for the context)."""
    text = "word " * 200_000
    assert text in render_prompt(tok, text, True)


def test_the_tracer_is_restored(tok):
    import sys

    def mine(*_a):
        return None

    sys.settrace(mine)
    try:
        render_prompt(tok, "hi", True)
        assert sys.gettrace() is mine
    finally:
        sys.settrace(None)
