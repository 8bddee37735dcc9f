"""Does the window slow the model? The same engine headless and inside the window, one process run.

For each prompt (a 40-token chat prompt and a 1,000-token text) and each repetition the runs go
in turn: headless (the window's own engine, run on the GUI thread while the event loop waits),
in the window with every pane on screen, in the window with no pane visible (every dock
hidden), and headless again. Each window run is divided by the mean of the two headless runs
around it, so a machine that gets busier or quieter during the benchmark moves both alike.
Every run is greedy, and the window's sampling controls are set to greedy too, as a user's
controls are the settings of the run the Run button starts.

Figures are the model thread's own records: TTFT is step 0's time, the inter-token latency is
each decode step's wall time (forward + sample + capture + the time between steps, when the
window's signals and analyses ran). With all panes visible the GUI thread's longest gap (a 10 ms
timer, stopped in the no-pane runs: each tick is Python that takes the GIL, about 2.5 % of a
GIL-bound model's step time) and the pane repaints are measured too, with each pane's renders
per second while the run streams and the GUI thread's pane work per second; ``os.getloadavg()``
is printed beside every figure (the machine may be shared). ``--switch-interval`` repeats
everything at several values of ``sys.setswitchinterval``; ``--schedule`` under several settings
of the pane scheduler's streaming budget; ``--profile`` prints a cProfile of the GUI thread
during one streaming run; ``--full-context`` runs one prompt of the model's whole context in the
window instead and reports memory and the attention window's time.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ["LLM_LENS_CONFIG_DIR"] = _config = tempfile.mkdtemp(prefix="llm-lens-bench-")
atexit.register(shutil.rmtree, _config, ignore_errors=True)  # the window's settings, this run's

from PySide6.QtCore import QElapsedTimer, QEventLoop, Qt, QTimer, qInstallMessageHandler  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

SHORT = "Explain transformers like I am 12"
FILLER = " the quick brown fox jumps over the lazy dog."


def show_every_pane(win: Any) -> None:
    """Take the tab groups apart: every pane in a grid of three columns, all on screen at once."""
    docks = list(win.docks.values())
    horizontal, vertical = Qt.Orientation.Horizontal, Qt.Orientation.Vertical
    for dock in docks:
        win.removeDockWidget(dock)
    rows = [docks[i : i + 3] for i in range(0, len(docks), 3)]
    win.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, rows[0][0])
    for above, row in zip(rows[:-1], rows[1:], strict=True):  # first column, then each row
        win.splitDockWidget(above[0], row[0], vertical)
    for row in rows:
        for left, right in zip(row[:-1], row[1:], strict=True):
            win.splitDockWidget(left, right, horizontal)
    for dock in docks:
        dock.show()
    QApplication.processEvents()


def set_docks_visible(win: Any, visible: bool) -> None:
    for dock in win.docks.values():
        dock.setVisible(visible)
    QApplication.processEvents()


def wait(ms: int) -> None:
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def wait_for(signal: Any, timeout_s: float, *others: Any) -> None:
    """Until ``signal`` (or any of ``others``) is emitted, or the timeout."""
    loop = QEventLoop()
    for sig in (signal, *others):
        sig.connect(loop.quit)
    QTimer.singleShot(int(timeout_s * 1e3), loop.quit)
    loop.exec()
    for sig in (signal, *others):
        sig.disconnect(loop.quit)


class GapClock:
    """A 10 ms timer on the GUI thread: the gaps between its ticks while measuring. ``ticking``
    stops and restarts it (its ticks cost a model thread that needs the GIL)."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self.on = False
        self._clock = QElapsedTimer()
        self._timer = QTimer(interval=10)
        self._timer.timeout.connect(self._tick)
        self._timer.start()

    def ticking(self, on: bool) -> None:
        if on:
            self._timer.start()
        else:
            self._timer.stop()

    def start(self) -> None:
        self.gaps.clear()
        self._clock.start()
        self.on = True

    def _tick(self) -> None:
        if self.on:
            self.gaps.append(float(self._clock.restart()))

    def longest_at(self) -> float:
        """Seconds from :meth:`start` to the beginning of the longest gap."""
        if not self.gaps:
            return 0.0
        longest = max(range(len(self.gaps)), key=self.gaps.__getitem__)
        return sum(self.gaps[:longest]) / 1e3


def figures(steps: Any) -> dict[str, float]:
    """TTFT, mean inter-token wall time and its parts, from the records (ms).

    ``itl_free`` and ``ttft_free`` leave out the time the model thread queued for a core held by
    another process: what they would be on a machine with a core free for the model.
    """
    decode = [s.timing for s in steps[1:]]
    first = steps[0].timing

    def mean(key: str) -> float:
        return statistics.mean(getattr(t, key) for t in decode)

    return {
        "ttft": first.total_ms,
        "ttft_free": first.total_ms - first.queue_ms,
        "itl": mean("wall_ms"),
        "itl_free": mean("wall_ms") - mean("queue_ms"),
        "own": mean("own_ms"),
        "gil": mean("blocked_ms"),
        "core": mean("queue_ms"),
        "between": mean("between_ms"),
    }


def worker_idle(win: Any, gaps: GapClock | None = None) -> None:
    """Wait until the worker has served every analysis queued so far and runs none, nor any
    guess (``Worker.ahead``): the headless run shares its engine (and its capture hooks) and
    would share the cores.

    A marker job queued last has run; then one more is waited for *without* processing events,
    so no pane can ask for anything between it and the caller's next step. ``gaps`` measures the
    GUI thread until then (not that last wait, which blocks it on purpose)."""
    import threading

    worker = win.controller.worker

    def marker() -> threading.Event:
        done = threading.Event()
        worker.submit("bench_marker", ("bench_marker",), lambda _bench: done.set())
        win.controller.request_serve()
        return done

    if gaps is not None:
        gaps.start()
    wait(500)  # the panes render and ask for their analyses
    worker.flags.want()  # no guess computed ahead starts (one running stops) until the next run
    first = marker()
    for _ in range(12000):  # a long prompt's deferred analyses take long on a busy machine
        if first.is_set():
            break
        wait(50)
    if gaps is not None:
        gaps.on = False
    marker().wait(600)


def headless(win: Any, text: str, chat: bool, tokens: int) -> dict[str, float]:
    """The window's engine, run here on the GUI thread: no pane, no signal, no event loop."""
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    worker_idle(win)
    engine = win.controller.worker.workbench.engine
    run = engine.start(engine.tokenize(text, chat), GREEDY, RunConfig(max_new_tokens=tokens))
    return figures(run.run_all())


def in_window(
    win: Any, text: str, chat: bool, tokens: int, gaps: GapClock, profile: Any = None
) -> dict[str, float]:
    """One run through the controller, as the Run button starts it; waits for the panes.

    ``profile`` (a ``cProfile.Profile``) records the GUI thread while the run streams."""
    from llm_lens.core.sampling import GREEDY

    ctl = win.controller
    for pane in win.panes.values():
        pane.render_times_ms.clear()
        pane.paint_times_ms.clear()
    gaps.start()
    t0 = time.perf_counter()
    first: list[float] = []

    def arrived() -> None:
        if not first:
            first.append((time.perf_counter() - t0) * 1e3)

    ctl.sig_steps_changed.connect(arrived)
    if profile is not None:
        profile.enable()
    ctl.request_run(text, chat, GREEDY, tokens)
    wait_for(ctl.sig_run_finished, 1200, ctl.sig_error)
    streamed_s = time.perf_counter() - t0
    if profile is not None:
        profile.disable()
    ctl.sig_steps_changed.disconnect(arrived)
    live = {name: len(pane.render_times_ms) for name, pane in win.panes.items()}
    live_ms = sum(sum(p.render_times_ms) + sum(p.paint_times_ms) for p in win.panes.values())
    wait(500)  # the last repaints and analyses
    gaps.on = False
    if len(ctl.steps) < 2:
        return {"gap": max(gaps.gaps, default=0.0)}
    out = figures(ctl.steps)
    units = [r + p for pane in win.panes.values()
             for r, p in zip(pane.render_times_ms, pane.paint_times_ms, strict=False)]  # fmt: skip
    out.update(
        shown=first[0] if first else float("nan"),
        gap=max(gaps.gaps, default=0.0),
        gap_at=gaps.longest_at(),
        streamed=streamed_s,
        repaint=statistics.median(units) if units else 0.0,
        repaints=float(len(units)),
        gui_ms_per_s=live_ms / max(streamed_s, 1e-9),
    )
    out["per_pane"] = {  # type: ignore[assignment]
        name: (live[name] / streamed_s, _median(pane.render_times_ms), _median(pane.paint_times_ms))
        for name, pane in win.panes.items()
    }
    return out


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):5.2f} ({min(values):.2f}–{max(values):.2f})"


def load() -> str:
    """The 1, 5 and 15 minute load averages, printed beside every figure (2 shared cores)."""
    return "load " + "/".join(f"{v:.1f}" for v in os.getloadavg())


def compare(
    win: Any, name: str, text: str, chat: bool, tokens: int, args: Any, gaps: GapClock
) -> None:
    """ABAB: headless, all panes, idle, headless; ratios against the headless runs around."""
    ratios: dict[str, dict[str, list[float]]] = {"all": {}, "idle": {}}
    seen: dict[str, list[dict[str, Any]]] = {"headless": [], "all": [], "idle": []}
    loads = [load()]
    for rep in range(args.reps):
        before = headless(win, text, chat, tokens)
        set_docks_visible(win, True)
        worker_idle(win)  # the analyses the shown panes ask for
        profile = _profiler() if args.profile and rep == 0 else None
        every = in_window(win, text, chat, tokens, gaps, profile)
        set_docks_visible(win, False)
        worker_idle(win)
        gaps.ticking(False)  # not measured with no pane on screen: its ticks would cost the run
        idle = in_window(win, text, chat, tokens, gaps)
        gaps.ticking(True)
        after = headless(win, text, chat, tokens)
        seen["headless"] += [before, after]
        seen["all"].append(every)
        seen["idle"].append(idle)
        loads.append(load())
        for mode, got in (("all", every), ("idle", idle)):
            for key in ("itl", "ttft", "itl_free", "ttft_free"):
                ratios[mode].setdefault(key, []).append(got[key] / ((before[key] + after[key]) / 2))
        if profile is not None:
            _print_profile(profile)
    set_docks_visible(win, True)
    report(f"{name}, {tokens} new tokens", seen, ratios, loads)


def _profiler() -> Any:
    import cProfile

    return cProfile.Profile()


def _print_profile(profile: Any) -> None:
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    print("GUI thread while the run streamed (cProfile, by own time):")
    print("\n".join(out.getvalue().splitlines()[:40]), flush=True)


def report(name: str, seen: dict[str, Any], ratios: dict[str, Any], loads: list[str]) -> None:
    def ms(mode: str, key: str) -> str:
        values = [r[key] for r in seen[mode]]
        return f"{min(values):6.0f}–{max(values):<6.0f}"

    cols = ("ttft", "itl", "own", "gil", "core", "between")
    print(f"{name}: ms (min–max over runs); decode steps: own, waiting for the GIL, for a core")
    print(f"  {', then '.join(loads)} (before the first and after each repetition)")
    print("  " + " " * 9 + "".join(f"{c:>14s}" for c in cols))
    for mode in ("headless", "all", "idle"):
        print(f"  {mode:9s} " + " ".join(ms(mode, k) for k in cols))
    print("  ratio to the headless runs around it: median (min–max); 'free': less the core waits")
    for mode, label in (("all", "every pane"), ("idle", "no pane")):
        r = ratios[mode]
        print(
            f"  {label:10s} ITL {spread(r['itl'])}  TTFT {spread(r['ttft'])}  "
            f"ITL free {spread(r['itl_free'])}  TTFT free {spread(r['ttft_free'])}"
        )
    every = seen["all"]
    print(
        "  every pane: GUI longest gap "
        + ", ".join(f"{r['gap']:.0f}" for r in every)
        + " ms; median pane repaint "
        + ", ".join(f"{r['repaint']:.1f}" for r in every)
        + " ms; pane work while streaming "
        + ", ".join(f"{r['gui_ms_per_s']:.0f}" for r in every)
        + " ms/s; first step on screen after "
        + ", ".join(f"{r['shown']:.0f}" for r in every)
        + " ms",
        flush=True,
    )
    panes = every[0].get("per_pane", {})
    print(
        "  per pane while streaming (first run): renders/s, median render / paint ms: "
        + "; ".join(f"{n} {rate:.1f}/s {r:.1f}/{p:.1f}" for n, (rate, r, p) in panes.items()),
        flush=True,
    )


def full_context(win: Any, tokens: int, gaps: GapClock) -> None:
    """One prompt of the model's whole context in the window: memory and the attention window."""
    import resource

    from llm_lens.core import attention
    from llm_lens.desktop.model_thread.worker import TRIM_AFTER_ANSWER_MS

    ctl = win.controller
    engine = ctl.worker.workbench.engine
    length = engine.info.context_length - tokens
    encode = engine.tokenizer.encode  # the filler may take more tokens than the context holds
    ids = encode(FILLER * (length // 8 + 1), add_special_tokens=False)[:length]
    text = engine.tokenizer.decode(ids)
    while len(encode(text)) > length:  # decoding may merge differently; special tokens count
        ids = ids[:-8]
        text = engine.tokenizer.decode(ids)
    errors: list[str] = []
    ctl.sig_error.connect(errors.append)
    rss0 = _rss_mb()
    got = in_window(win, text, False, tokens, gaps)
    if errors or not ctl.steps:
        print(f"full context: the run failed: {errors}", flush=True)
        return
    rss_run = _rss_mb() - rss0
    t0 = time.perf_counter()
    worker_idle(win, gaps)  # the panes' analyses of the long prompt, deferred to the run's end
    deferred = time.perf_counter() - t0
    analyses_gap = max(gaps.gaps, default=0.0)
    wait(TRIM_AFTER_ANSWER_MS + 300)  # the worker gives the freed heap back after its answers
    rss_settled = _rss_mb() - rss0
    run = ctl.worker.workbench.store.runs[ctl.run_id]
    ctl.worker.flags.nothing_wanted()  # guesses may run again (worker_idle stopped them)
    shown = win.panes["Attention"].layer_box.value()
    top = engine.info.num_layers - 1

    def at(n: int) -> int:  # the bundled model's layer n (of 0-29), scaled to this model's
        return round(n * top / 29)

    layers = [at(n) for n in (12, 29, 1, 20) if at(n) != shown][:3]
    gaps.start()
    # a person reading each map before the next (STEP_PAUSE_S): a new layer far from the last
    # (its queries and keys computed), then another head of it
    windows = []
    for layer, head in [(n, h) for n in layers for h in (0, 5)]:
        pause(STEP_PAUSE_S)
        windows.append(window_ms(ctl, layer, head))
    far = (min(top, layers[0] + at(4)), max(0, layers[1] - at(4)))
    back_to_back = [window_ms(ctl, n, 3) for n in far]
    steps = [n for n in range(at(5), top + 1) if n not in layers][:3]
    pause(STEP_PAUSE_S)
    stepped = [window_ms(ctl, steps[0], 0)]  # stepping through layers, reading each
    for layer, head in ((steps[1], 0), (steps[2], 0), (steps[1], 0), (steps[1], 1)):
        pause(STEP_PAUSE_S)
        stepped.append(window_ms(ctl, layer, head))
    gaps.on = False
    window_gap = max(gaps.gaps, default=0.0)
    near = {n + d for n in (shown, *layers, *far, *steps) for d in (-1, 0, 1)}  # asked, guessed
    fresh = next((n for n in range(engine.info.num_layers) if n not in near), top)
    ctl.worker.queue.ahead.clear()  # no guess computing beside it
    pause(0.5)
    engine.map_memo.clear()  # (a small model has no layer left that nothing asked for)
    t0 = time.perf_counter()  # the same on the GUI thread, the process's default torch threads
    attention.attention_map(engine, run.cache, run.prefill.hidden, fresh, 0, max_size=256)
    direct = (time.perf_counter() - t0) * 1e3
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"full context: {len(run.prompt)}-token prompt + {tokens} tokens in the window: "
        f"TTFT {got['ttft'] / 1e3:.1f} s, ITL {got['itl']:.0f} ms, GUI longest gap "
        f"{got['gap']:.0f} ms ({_when(got)}); RSS {rss_run:+.0f} MB over the loaded model "
        "after the run, "
        f"{rss_settled:+.0f} MB after the panes' analyses ({deferred:.0f} s, GUI longest "
        f"gap meanwhile {analyses_gap:.0f} ms), {_rss_mb() - rss0:+.0f} MB at the end; peak RSS "
        f"{peak:.0f} MB; one head's pooled 256² attention window, asked of the worker as the "
        f"Attention pane asks, {STEP_PAUSE_S:.1f} s apart, a new layer / another head of it "
        f"(layers {', '.join(map(str, layers))}): "
        + ", ".join(f"{a:.0f} / {b:.0f}" for a, b in zip(windows[::2], windows[1::2], strict=True))
        + " ms; two new layers asked as soon as the last answer came (the window drawing it "
        "meanwhile): "
        + " / ".join(f"{ms:.0f}" for ms in back_to_back)
        + f" ms; stepping layers {steps[0]}, {steps[1]}, {steps[2]}, {steps[1]}, then head 1, "
        f"{STEP_PAUSE_S:.1f} s apart (the worker computes the maps a step away from the one "
        "shown meanwhile): "
        + " / ".join(f"{ms:.0f}" for ms in stepped)
        + f" ms (GUI longest gap meanwhile {window_gap:.0f} ms; a new layer ({fresh}) on the GUI "
        f"thread with {_torch_threads()} torch thread(s): {direct:.0f} ms); {load()}",
        flush=True,
    )


STEP_PAUSE_S = 1.0  # a person reading one layer's map before stepping to the next


def pause(seconds: float) -> None:
    """Let the window's event loop run for ``seconds`` (a person looking)."""
    loop = QEventLoop()
    QTimer.singleShot(int(seconds * 1e3), loop.quit)
    loop.exec()


def window_ms(ctl: Any, layer: int, head: int) -> float:
    """One attention window asked of the worker, as the Attention pane asks: from the request
    to its result on the GUI thread (ms)."""
    args = {"layer": layer, "head": head, "max_size": 256}
    wanted = ("attention_map", ctl.run_id, *sorted(args.items()))
    t0 = time.perf_counter()
    if ctl.request_analysis("attention_map", **args) is None:
        loop = QEventLoop()

        def arrived(kind: str, key: Any, _result: Any) -> None:
            if key == wanted:
                loop.quit()

        ctl.sig_result.connect(arrived)
        QTimer.singleShot(60_000, loop.quit)
        loop.exec()
        ctl.sig_result.disconnect(arrived)
    return (time.perf_counter() - t0) * 1e3


def _when(got: dict[str, float]) -> str:
    """Where the longest gap began: against the first token's arrival and the run's end."""
    at, first, end = got["gap_at"], got["shown"] / 1e3, got["streamed"]
    if at < first:
        return f"{first - at:.1f} s before the first token showed"
    if at <= end:
        return f"{at - first:.1f} s after the first token showed"
    return f"{at - end:.2f} s after the run ended"


def _schedule(text: str) -> tuple[float, float, float | None]:
    """SHARE/LIVE_MS[/SWITCH_MS] of ``--schedule``: the switch interval in seconds, or None."""
    parts = [float(v) for v in text.split("/")]
    return parts[0], parts[1], parts[2] / 1e3 if len(parts) > 2 else None


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=2, help="repetitions of each ABAB cycle")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens a run")
    parser.add_argument("--long", type=int, default=1000, help="long prompt tokens (0: skip)")
    parser.add_argument(
        "--long-tokens", type=int, default=8, help="new tokens a run of the long prompt"
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the GUI thread in one streaming run"
    )
    parser.add_argument(
        "--model", default=None, help="a model folder or .gguf file (default: the bundled model)"
    )
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda, mps")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument(
        "--switch-interval", default="", help="comma-separated seconds (default: the app's)"
    )
    parser.add_argument(
        "--schedule",
        default="",
        help="comma-separated SHARE/LIVE_MS[/SWITCH_MS] for the pane scheduler while streaming "
        "(e.g. 1/0,0.1/150,0.1/150/1; 1/0: no budget; default: the app's)",
    )
    parser.add_argument("--full-context", action="store_true", help="the 8,192-token prompt")
    parser.add_argument(
        "--no-ahead", action="store_true", help="the worker computes nothing ahead of requests"
    )
    return parser.parse_args()


def quiet(_mode: Any, _context: Any, message: str) -> None:
    """The offscreen platform's warning on every size-hint change is noise here."""
    if "propagateSizeHints" not in message:
        print(message, file=sys.stderr)


def main() -> int:
    args = parse()
    qInstallMessageHandler(quiet)
    app = QApplication(sys.argv[:1])
    from llm_lens.desktop.startup.app import apply_theme, tune_process
    from llm_lens.desktop.window.main_window import MainWindow

    tune_process()
    apply_theme(app)
    win = MainWindow(device=args.device, dtype=args.dtype)
    win.sessions.confirm_close = False
    win.resize(1920, 1200)
    win.show()
    show_every_pane(win)
    gaps = GapClock()
    errors: list[str] = []
    win.controller.sig_error.connect(errors.append)
    win.load(args.model)
    wait_for(win.controller.sig_model_loaded, 600, win.controller.sig_error)
    if not win.controller.worker.workbench.loaded:
        print(f"the model did not load: {'; '.join(errors) or 'no answer in 600 s'}", flush=True)
        return 1
    from llm_lens.core.sampling import GREEDY

    win.controller.request_params(GREEDY)  # the controls' settings are the runs', as for Run
    wait(3000)  # the vocabulary projection and first analyses
    engine = win.controller.worker.workbench.engine
    print(
        f"device {engine.device}, dtype {engine.info.dtype}, {sys.platform}, "
        f"{os.cpu_count()} cores, torch threads {_torch_threads()}, {load()}",
        flush=True,
    )
    if args.no_ahead:
        from llm_lens.core.runs import budget

        budget.AHEAD_AFTER_MS = float("inf")
    if args.full_context:
        full_context(win, args.tokens, gaps)
        win.close()
        return 0
    long_text = FILLER * (args.long // 10 + 1)
    long_ids = engine.tokenize(long_text, chat=False).ids[: args.long]
    prompts = [(f"{len(engine.tokenize(SHORT).ids)}-token chat prompt", SHORT, True, args.tokens)]
    if args.long:
        long_text = engine.tokenizer.decode(long_ids)
        count = len(engine.tokenize(long_text, chat=False).ids)
        prompts.append((f"{count}-token prompt", long_text, False, args.long_tokens))
    intervals = [float(v) for v in args.switch_interval.split(",") if v] or [
        sys.getswitchinterval()
    ]
    headless(win, SHORT, True, 4)  # warm-up
    from llm_lens.desktop.state import scheduler as sched

    default = (sched.scheduler().share, float(sched.LIVE_MS), None)
    for share, live, switch in [_schedule(v) for v in args.schedule.split(",") if v] or [default]:
        sched.scheduler().share, sched.LIVE_MS = share, int(live)
        for interval in [switch] if switch else intervals:
            sys.setswitchinterval(interval)
            print(
                f"== sys.setswitchinterval({interval * 1e3:g} ms), panes within {share:.0%} of "
                f"the GUI thread, each at most every {int(live)} ms while streaming; {load()}",
                flush=True,
            )
            for name, text, chat, tokens in prompts:
                compare(win, name, text, chat, tokens, args, gaps)
    win.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
