"""The HTML report (``core/exports/report.py``): the run's figures computed by hand, one row per
token, the user's text escaped, and the file written atomically."""

from __future__ import annotations

import html
import math
import os
import re

from llm_lens.core.exports.report import html_report, write_report
from llm_lens.core.records import RunSummary


def report_of(tiny_run) -> tuple[str, list, RunSummary]:
    engine, run = tiny_run
    summary = RunSummary.of(run.run_id, run.prompt, run.steps, run.finish_reason)
    return html_report(engine.info.as_dict(), run.prompt, run.steps, summary), run.steps, summary


def test_the_report_holds_every_token_and_the_figures(tiny_run):
    engine, run = tiny_run
    text, steps, summary = report_of(tiny_run)
    rows = re.findall(r"<tr><td class=num>(\d+)</td><td class=tok>(.*?)</td>", text)
    assert [(int(i), html.unescape(t)) for i, t in rows] == [
        (s.index, repr(s.token.text)) for s in steps
    ]
    for s in steps:
        assert f"<td class=num>{s.prob:.4f}</td>" in text
    mean = sum(s.logprob for s in steps) / 4
    assert f"{mean:.3f} (perplexity {math.exp(-mean):.2f})" in text
    assert "4 (stopped: length)" in text and f"{summary.ttft_ms:.0f} ms" in text
    kv = steps[-1].kv
    assert f"{kv.bytes_total:,} bytes for {kv.tokens} tokens" in text
    assert f"LLM Lens: {engine.info.name}</h1>" in text and "(raw)" in text
    assert text.count("<polyline") == 2  # probability and time sparklines


def test_the_users_text_is_escaped_and_nothing_runs(tiny_run):
    text, _, summary = report_of(tiny_run)
    assert "<b>Tom</b>" not in text and "<i>" not in text
    assert "&lt;b&gt;Tom&lt;/b&gt; &amp; &lt;i&gt;Jerry&lt;/i&gt;" in text
    assert html.escape(summary.output_text) in text
    assert "<script" not in text.lower() and "onload" not in text.lower()


def test_write_report_replaces_the_file_atomically(tiny_run, tmp_path):
    text, _, _ = report_of(tiny_run)
    path = tmp_path / "report.html"
    path.write_text("previous")
    write_report(path, text)
    assert path.read_text(encoding="utf-8") == text
    assert os.listdir(tmp_path) == ["report.html"]


def test_an_intervened_run_lists_its_changes(tiny_engine):
    from llm_lens.core.interventions import Forget, HeadEdit
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY

    run = tiny_engine.start(tiny_engine.tokenize("the cat sat", chat=False), GREEDY,
                            RunConfig(max_new_tokens=2),
                            interventions=(HeadEdit(1, 2), Forget(1)))  # fmt: skip
    run.run_all()
    text = html_report(tiny_engine.info.as_dict(), run.prompt, run.steps, run.summary())
    assert "<th>interventions</th><td>head:1.2=0, forget:1</td>" in text
    plain = RunSummary.of(run.run_id, run.prompt, run.steps, run.finish_reason)
    assert "interventions" not in html_report(tiny_engine.info.as_dict(), run.prompt, run.steps,
                                              plain)  # fmt: skip
