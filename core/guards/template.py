"""A model's chat template rendered once under limits before transformers renders it for real.

A chat template is a program the model folder ships (Jinja, in transformers' immutable
sandbox). The sandbox stops it reaching Python's internals but not from running for ever (nested
loops), building a string of gigabytes (doubling one forty times), recursing until Python's
stack ends, or failing in its own words (``raise_exception``). :func:`check_template` renders
the template with the same environment, globals and inputs as transformers'
``apply_chat_template``, but with limits on time, executed template lines, macro depth and the
size of every string or list it builds or outputs; what breaks one is a :class:`PromptError` of
one line naming the template and what went wrong. When it passes, transformers' own rendering
(the same program on the same input) is bounded the same way.
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

from llm_lens.core.errors import PromptError

MAX_SECONDS = 3.0  # a real template renders in about a millisecond
MAX_LINES = 300_000  # template lines executed (a real template's loops: thousands)
MAX_DEPTH = 64  # macro calls inside macro calls
MAX_ITEMS = 16 * 2**20  # characters of any string (or items of any list) it builds or writes
TEMPLATE_FILE = "<template>"  # the file name Jinja gives code compiled from a string


class TemplateLimit(Exception):
    """A limit of the guarded rendering was reached (the message says which)."""


def check_template(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> None:
    """Render ``tokenizer``'s chat template on ``messages`` under the limits, or raise one line.

    ``kwargs`` are what ``apply_chat_template`` is given besides the messages
    (``add_generation_prompt``)."""
    source = tokenizer.chat_template
    if not isinstance(source, str):
        return  # a dict of named templates: transformers chooses, and the real call reports
    name = _template_name(tokenizer)
    try:
        template = _compile(source)
        variables = dict(getattr(tokenizer, "special_tokens_map", {}) or {})
        variables |= {"messages": messages, "tools": None, "documents": None, **kwargs}
        _render_bounded(template, variables)
    except PromptError:
        raise
    except Exception as exc:
        raise PromptError(f"the chat template of {name}: {describe_error(exc)}") from None


def render_failed(tokenizer: Any, exc: BaseException) -> PromptError:
    """The one line for transformers' own rendering failing (after the guarded one passed)."""
    return PromptError(f"the chat template of {_template_name(tokenizer)}: {describe_error(exc)}")


def describe_error(exc: BaseException) -> str:
    """What went wrong, in one line: the limit, the sandbox, a syntax error's line, the
    template's own ``raise_exception`` message, or the error's type and first line."""
    import jinja2

    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    if isinstance(exc, TemplateLimit):
        return text
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return f"tried to leave Jinja's sandbox ({text}); refused"
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"syntax error at line {exc.lineno}: {text}"
    if isinstance(exc, RecursionError):
        return "recursed too deeply (Python's recursion limit)"
    if isinstance(exc, MemoryError):
        return "ran out of memory while rendering"
    if isinstance(exc, jinja2.TemplateError):
        return f"it raised an error: {text}"
    return f"it failed ({type(exc).__name__}: {text})"


def _template_name(tokenizer: Any) -> str:
    where = str(getattr(tokenizer, "name_or_path", "") or "").strip()
    return where or "this model"


@functools.lru_cache(maxsize=8)
def _compile(source: str) -> Any:
    """The template in a sandbox like transformers' own (same options, extensions, filters and
    globals, copied from its compiled environment), with every attribute, item, call and
    operator result measured."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from transformers.utils.chat_template_utils import _compile_jinja_template

    # an empty template compiled by transformers: its environment, without compiling ``source``
    # there (Jinja folds constants such as 'x' * 10**10 while compiling, where nothing checks)
    theirs = _compile_jinja_template("").environment

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "+", "**", "//", "%"})

        def getattr(self, obj: Any, attribute: str) -> Any:
            return _sized(super().getattr(obj, attribute))

        def getitem(self, obj: Any, argument: Any) -> Any:
            return _sized(super().getitem(obj, argument))

        def call(self, context: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(obj, "__name__", "") in ("format", "format_map"):
                bound = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
                _check_format(getattr(bound, "__self__", None), args, kwargs)
            return _sized(super().call(context, obj, *args, **kwargs))

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _check_binop(operator, left, right)
            return _sized(super().call_binop(context, operator, left, right))

    env = Bounded(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[type(e) for e in theirs.extensions.values()],
    )
    env.filters.update(theirs.filters)
    env.globals.update(theirs.globals)
    _check_constants(env.parse(source))
    return env.from_string(source)


def _check_constants(tree: Any) -> None:
    """Refuse a constant expression that would be huge, which transformers' own compiling
    would fold into a value (even in a branch never taken)."""
    from jinja2 import nodes

    for node in tree.find_all((nodes.Mul, nodes.Pow)):
        _fold(node)


def _fold(node: Any) -> Any:
    """The value of a constant arithmetic expression, each operation checked; None when it
    is not constant."""
    from jinja2 import nodes

    if isinstance(node, nodes.Const):
        return node.value
    ops = {nodes.Mul: "*", nodes.Pow: "**", nodes.Add: "+"}
    op = ops.get(type(node))
    if op is None:
        return None
    left, right = _fold(node.left), _fold(node.right)
    if left is None or right is None:
        return None
    _check_binop(op, left, right)
    try:
        return {"*": lambda: left * right, "**": lambda: left**right, "+": lambda: left + right}[
            op
        ]()
    except Exception:
        return None


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse ``'x' * 10**9`` and ``2 ** 10**9`` before computing them."""
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if (
                isinstance(seq, str | list | tuple)
                and isinstance(n, int)
                and n * len(seq) > MAX_ITEMS
            ):
                raise TemplateLimit(f"built a string or list longer than {MAX_ITEMS} items")
    if operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, type(left)):
        if len(left) + len(right) > MAX_ITEMS:
            raise TemplateLimit(f"built a string or list longer than {MAX_ITEMS} items")
    if operator == "%" and isinstance(left, str):
        _check_format(left, right if isinstance(right, tuple) else (right,), {})
    if operator == "**" and isinstance(right, int) and abs(right) > 4096:
        raise TemplateLimit(f"raised a number to the power {right}")


def _check_format(text: Any, args: Any, kwargs: Any) -> None:
    """Refuse a format that pads a field to millions of characters ('{:>9999999999}', '%*s')."""
    widths = [a for a in (*args, *kwargs.values()) if isinstance(a, int) and a > MAX_ITEMS]
    if isinstance(text, str) and (re.search(r"\d{8,}", text) or widths):
        raise TemplateLimit("formats a field wider than the limit")


def _sized(value: Any) -> Any:
    if isinstance(value, str | list | tuple | dict) and len(value) > MAX_ITEMS:
        raise TemplateLimit(f"built a string or list longer than {MAX_ITEMS} items")
    return value


def _render_bounded(template: Any, variables: dict[str, Any]) -> None:
    """Render, counting what is written, with a line tracer on the template's own code."""
    tracer = _Tracer(time.monotonic() + MAX_SECONDS)
    previous = sys.gettrace()
    sys.settrace(tracer.call)
    try:
        written = 0
        for chunk in template.generate(**variables):
            written += len(chunk)
            if written > MAX_ITEMS:
                raise TemplateLimit(f"wrote more than {MAX_ITEMS} characters")
    finally:
        sys.settrace(previous)


class _Tracer:
    """``sys.settrace`` hooks that follow only frames of template code: each executed line is
    counted and timed, and its strings and namespaces measured; macro depth is counted."""

    def __init__(self, deadline: float) -> None:
        self.deadline, self.lines, self.depth = deadline, 0, 0

    def call(self, frame: Any, event: str, _arg: Any) -> Any:
        if frame.f_code.co_filename != TEMPLATE_FILE:
            return None
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TemplateLimit(f"called macros more than {MAX_DEPTH} deep (recursion)")
        return self.line

    def line(self, frame: Any, event: str, _arg: Any) -> Any:
        if event == "return":
            self.depth -= 1
        elif event == "line":
            self.lines += 1
            if self.lines > MAX_LINES:
                raise TemplateLimit(f"ran more than {MAX_LINES} template steps (a loop too long)")
            if self.lines % 1024 == 0 and time.monotonic() > self.deadline:
                raise TemplateLimit(f"took longer than {MAX_SECONDS:g} s to render")
            for value in _values(frame.f_locals):
                _sized(value)
        return self.line


def _values(local: dict[str, Any]) -> Iterator[Any]:
    from jinja2.utils import Namespace

    for value in local.values():
        if isinstance(value, Namespace):  # its values are kept under a private name
            yield from object.__getattribute__(value, "_Namespace__attrs").values()
        else:
            yield value
