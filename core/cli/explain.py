"""``llm-lens explain``: generate as ``trace`` does, then say why step K chose its token.

Prints the direct logit attribution (largest pieces), the input tokens that mattered most and
the size of the information-flow graph; ``--json`` writes everything (docs/trace-format.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from llm_lens.core.cli.args import guarded
from llm_lens.core.cli.trace import start_run, trace_parser
from llm_lens.core.errors import LensError


def explain_parser() -> argparse.ArgumentParser:
    p = trace_parser()
    p.prog = "llm-lens explain"
    p.description = "Run the model headless; explain the token chosen at one step."
    p.add_argument("--step", type=int, required=True, help="the step to explain (0: first token)")
    p.add_argument("--vs", default=None, help="explain the logit difference with this token")
    p.add_argument("--threshold", type=float, default=0.04, help="flow graph edge threshold")
    p.add_argument("--json", action="store_true", help="write JSON (to --out or stdout)")
    return p


def vs_token(engine: Any, text: str | None) -> int | None:
    """The id of ``text`` as one token, or a one-line error naming the tokens it is."""
    if text is None:
        return None
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        pieces = ", ".join(repr(engine.texts.text(i)) for i in ids)
        raise LensError(f"--vs {text!r} is {len(ids)} tokens ({pieces}), not one")
    return int(ids[0])


def run_explain(args: argparse.Namespace) -> dict[str, Any]:
    from llm_lens.core.explain.attribution import explain, explanation_dict
    from llm_lens.core.exports.trace import intervention_rows
    from llm_lens.core.interventions import hooked_for

    if args.step < 0:
        raise LensError(f"--step must be ≥ 0; got {args.step}")
    if not 0 < args.threshold <= 1:
        raise LensError(f"--threshold must be in (0, 1]; got {args.threshold}")
    engine, run, _cancel = start_run(args, max_new_tokens=args.step + 1)
    if args.step >= len(run.steps):
        raise LensError(f"--step {args.step}: the run ended after {len(run.steps)} steps")
    vs = vs_token(engine, args.vs)
    try:
        with hooked_for(run):  # the attribution reads the model the run's --intervene made
            x = explain(engine, run.steps[args.step], vs, floor=min(0.01, args.threshold))
    except ValueError as exc:
        raise LensError(str(exc)) from exc
    data = explanation_dict(x, args.threshold)
    if run.interventions:
        data["interventions"] = intervention_rows(run.interventions)
    if engine.info.partly_random:  # explained on a model with random weights: say so
        data["partly_random"] = engine.info.partly_random
    return data


def summary(data: dict[str, Any], top: int = 8) -> str:
    """The human-readable answer: the largest pieces and the inputs that mattered most."""
    what = f"logit({data['token']!r})" + (f" − logit({data['vs']!r})" if data["vs"] else "")
    lines = [
        f"step {data['step']}: {what} = {data['logit']:.3f}"
        f" (final norm scale held at {data['norm_scale']:.4g})",
        f"  pieces sum to {data['sum']:.3f}; residual (biases) {data['residual']:.2e}",
    ]
    if data.get("unsplit"):
        lines[1:] = [f"  not split: {data['unsplit']}"]
    if data.get("after_unembed"):
        lines[-1] += f", of which the final soft-cap {data['after_unembed']:+.3f} (does not split)"
    if data.get("post_norm"):
        lines.append("  each block's post-attention norm is held at its scale for this step")
    parts = [c for c in data["components"] if c["kind"] != "attn" and not data.get("unsplit")]
    for c in sorted(parts, key=lambda c: -abs(c["value"]))[:top]:
        where = "" if c["layer"] is None else f" L{c['layer']}"
        where += "" if c["head"] is None else f" H{c['head']}"
        lines.append(f"  {c['kind']:5s}{where:9s} {c['value']:+.3f}")
    lines.append(f"inputs ({data['input_method']}):")
    tokens = sorted(data["input_attribution"], key=lambda t: -abs(t["value"]))[:top]
    lines += [f"  #{t['index']:<4d} {t['text']!r:16s} {t['value']:+.3f}" for t in tokens]
    g = data["graph"]
    lines.append(
        f"flow graph at {g['threshold']}: {len(g['nodes'])} nodes, {len(g['edges'])} edges"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    def body() -> int:
        args = explain_parser().parse_args(argv)
        data = run_explain(args)
        if args.json:
            from llm_lens.core.exports.trace import emit_json

            emit_json(data, args.out)
        else:
            print(summary(data))
        return 0

    return guarded("explain", body)
