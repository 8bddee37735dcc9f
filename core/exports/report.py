"""A one-page HTML report of a run to share: prompt, response, key figures, every token.

Self-contained (inline CSS and SVG, no scripts), written atomically.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_lens.core.fileio import atomic_write_text
from llm_lens.core.records import PromptTokens, RunSummary, StepRecord

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;max-width:60em;margin:2em auto;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
pre{white-space:pre-wrap;background:#f5f5f5;padding:.8em;border-radius:4px}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}
.num{text-align:right;font-variant-numeric:tabular-nums}
.tok{font-family:monospace;white-space:pre}
.bar{display:inline-block;height:.8em;background:#3d7bd9}
"""


def _figures(
    model: dict[str, Any], steps: Sequence[StepRecord], summary: RunSummary
) -> list[tuple[str, str]]:
    mean_logprob = sum(s.logprob for s in steps) / len(steps) if steps else 0.0
    kv = steps[-1].kv if steps else None
    return [
        ("model", f"{model.get('name')} ({model.get('num_layers')} layers, "
                  f"{model.get('num_heads')}/{model.get('num_kv_heads')} heads, "
                  f"{model.get('dtype')} on {model.get('device')})"
                  + (f"; {model['quantization']}" if model.get("quantization") else "")),
        ("tokens generated", f"{len(steps)} (stopped: {summary.finish_reason})"),
        ("time to first token", f"{summary.ttft_ms:.0f} ms"),
        ("inter-token latency", f"{summary.mean_itl_ms:.1f} ms mean"),
        ("throughput", f"{summary.tokens_per_s:.1f} tokens/s"),
        ("mean log-probability", f"{mean_logprob:.3f} (perplexity {math.exp(-mean_logprob):.2f})"),
        ("KV cache at the end", "—" if kv is None else
         f"{kv.bytes_total:,} bytes for {kv.tokens} tokens (full MHA: {kv.mha_bytes:,})"),
    ] + _changes(summary)  # fmt: skip


def _changes(summary: RunSummary) -> list[tuple[str, str]]:
    """An intervened run's changes (its summary's ``extra["interventions"]``) as SPECs."""
    from llm_lens.core.interventions import from_dict, to_spec

    rows = summary.extra.get("interventions") or []
    return [("interventions", ", ".join(to_spec(from_dict(d)) for d in rows))] if rows else []


def _sparkline(values: Sequence[float], width: int = 600, height: int = 60) -> str:
    if not values:
        return ""
    top = max(values) or 1.0
    step = width / max(1, len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - v / top * (height - 4):.1f}"
                      for i, v in enumerate(values))  # fmt: skip
    return (f'<svg width="{width}" height="{height}" role="img"><polyline fill="none" '
            f'stroke="#3d7bd9" stroke-width="1.5" points="{points}"/></svg>')  # fmt: skip


def html_report(
    model: dict[str, Any], prompt: PromptTokens, steps: Sequence[StepRecord], summary: RunSummary
) -> str:
    """The report as one HTML string."""
    e = html.escape
    rows = "".join(
        f"<tr><td class=num>{s.index}</td><td class=tok>{e(repr(s.token.text))}</td>"
        f"<td class=num>{s.token.id}</td><td class=num>{s.prob:.4f}</td>"
        f'<td><span class=bar style="width:{s.prob * 120:.0f}px"></span></td>'
        f"<td class=num>{s.rank + 1}</td><td class=num>{s.entropy:.2f}</td>"
        f"<td class=num>{s.timing.total_ms:.1f}</td></tr>"
        for s in steps
    )
    figures = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>"
                      for k, v in _figures(model, steps, summary))  # fmt: skip
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>LLM Lens report</title><style>{STYLE}</style></head><body>
<h1>LLM Lens: {e(model.get("name", "model"))}</h1>
<h2>Prompt{" (chat template applied)" if prompt.chat else " (raw)"}</h2><pre>{e(prompt.text)}</pre>
<h2>Response</h2><pre>{e(summary.output_text)}</pre>
<h2>Key figures</h2><table>{figures}</table>
<h2>Probability of each chosen token</h2>{_sparkline([s.prob for s in steps])}
<h2>Time per step (ms)</h2>{_sparkline([s.timing.total_ms for s in steps])}
<h2>Every token</h2><table><tr><th>step</th><th>token</th><th>id</th><th>prob</th><th></th>
<th>rank</th><th>entropy</th><th>ms</th></tr>{rows}</table>
<p>Made with LLM Lens: every number is what the model computed on this run.</p>
</body></html>"""


def write_report(path: str | Path, text: str) -> None:
    """Write the report atomically."""
    atomic_write_text(path, text)
