"""What every headless command shares (``core/cli/args.py``): argument types that refuse what
torch or the loop cannot take, a parser whose mistakes are a LensError, Ctrl+C that stops between
steps, and the guard's exit statuses."""

from __future__ import annotations

import argparse
import signal
import threading

import pytest

from llm_lens.core.cli.args import (
    INTERRUPTED,
    Parser,
    cancellable,
    cap_new_tokens,
    ctrl_c_cancels,
    finite_float,
    guarded,
    seed_int,
    token_count,
)
from llm_lens.core.errors import LensError


@pytest.mark.parametrize(("text", "value"), [("0.7", 0.7), ("-2", -2.0), ("1e3", 1000.0)])
def test_finite_float_takes_numbers(text, value):
    assert finite_float(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("abc", "must be a number"), ("nan", "finite"), ("inf", "finite"), ("1e400", "finite")],
)
def test_finite_float_refuses_what_is_not_a_finite_number(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        finite_float(text)


def test_seed_int_is_what_torchs_generator_takes():
    import torch

    assert seed_int("0") == 0 and seed_int(str(2**64 - 1)) == 2**64 - 1  # unsigned 64-bit
    torch.Generator().manual_seed(seed_int(str(2**64 - 1)))  # torch takes it
    for text, message in [("-1", "from 0 to"), (str(2**64), "from 0 to"), ("1.5", "whole")]:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            seed_int(text)


def test_token_count_takes_any_whole_number_and_caps_at_the_context(capsys):
    assert token_count("32") == 32 and token_count("1e30") == 2**62
    assert token_count("1000000000") == 10**9 and token_count("2.0") == 2
    for text, message in [("0", "at least 1"), ("-3", "at least 1"), ("nan", "whole"),
                          ("1.5", "whole"), ("inf", "whole"), ("x", "whole")]:  # fmt: skip
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            token_count(text)
    assert cap_new_tokens(10, 5, 100) == 10 and capsys.readouterr().err == ""
    assert cap_new_tokens(10**9, 20, 8192) == 8172
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "llm-lens: --max-new-tokens 1000000000 is past the model's context of 8192 tokens "
        "(20 in the prompt): capped at 8172"
    ]


def test_a_usage_mistake_is_a_lens_error_not_a_printed_block(capsys):
    parser = Parser(prog="llm-lens x")
    parser.add_argument("--seed", type=seed_int)
    with pytest.raises(LensError, match="argument --seed: must be from 0 to"):
        parser.parse_args(["--seed", "-5"])
    assert capsys.readouterr() == ("", "")


def test_guard_statuses(capsys):
    assert guarded("x", lambda: 0) == 0

    def fails(exc: BaseException):
        def body() -> int:
            raise exc

        return body

    assert guarded("x", fails(LensError("bad\nsetting"))) == 2
    assert capsys.readouterr().err == "llm-lens x: error: bad setting\n"  # one line
    assert guarded("x", fails(FileNotFoundError(2, "No such file", "a.json"))) == 2
    assert "No such file" in capsys.readouterr().err
    assert guarded("x", fails(SystemExit(0))) == 0  # --help
    assert guarded("x", fails(KeyboardInterrupt())) == INTERRUPTED == 130
    assert "interrupted (Ctrl+C)" in capsys.readouterr().err


def test_the_first_ctrl_c_sets_cancel_and_the_second_interrupts():
    def loop(cancel) -> int:
        signal.raise_signal(signal.SIGINT)  # the first: the loop sees cancel and stops
        assert cancel.is_set()
        return 3

    with pytest.raises(KeyboardInterrupt):  # raised once the work has stopped
        cancellable(loop)
    before = signal.getsignal(signal.SIGINT)
    cancel = threading.Event()
    with pytest.raises(KeyboardInterrupt), ctrl_c_cancels(cancel):
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)  # the second interrupts at once
        pytest.fail("not interrupted")  # pragma: no cover
    assert cancel.is_set() and signal.getsignal(signal.SIGINT) is before  # handler restored
    result, cancel = cancellable(lambda c: 5)
    assert (result, cancel.is_set()) == (5, False)
