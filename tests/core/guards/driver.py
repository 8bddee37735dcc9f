"""Runs catalogue cases in one process (``python -m tests.core.guards.driver CASES RESULTS``):
each case calls the CLI's ``main`` in-process with stdout and stderr captured and an alarm
bounding it; the results (exit status, stderr lines, seconds) go to a JSON file. The caller
bounds the process's memory (RLIMIT_AS) and its wall time."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import time

CASE_SECONDS = 30


class Hung(BaseException):
    """A case ran past its alarm (a BaseException: the CLI's guard must not turn it into a line)."""


def _alarm(_signum: int, _frame: object) -> None:
    raise Hung


def run_case(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    from llm_lens.core.cli import main

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    err, out = io.StringIO(), io.StringIO()
    start = time.monotonic()
    signal.alarm(CASE_SECONDS)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code: object = main(argv)
    except Hung:
        code = "hung"
    except BaseException as exc:  # noqa: BLE001 - what escaped the guard is the finding
        code = f"escaped {type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {
        "code": code,
        "err": err.getvalue(),
        "out_bytes": len(out.getvalue()),
        "seconds": time.monotonic() - start,
    }


def main() -> None:
    cases = json.loads(open(sys.argv[1], encoding="utf-8").read())
    signal.signal(signal.SIGALRM, _alarm)
    results = {c["id"]: run_case(c["argv"], c.get("env", {})) for c in cases}
    import resource

    results["__maxrss_mb__"] = {"code": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
