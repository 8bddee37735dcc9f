"""The hostile-input catalogue of issue 38: model files whose headers lie, absurd configs,
pathological chat templates and tokenizer regexes, prompts past the context, control and
bidirectional characters, every sampler setting at and past its bounds, outputs that would
clobber, weights that do not fit the config.

All cases run in ONE subprocess (``tests/core/guards/driver.py``) bounded by RLIMIT_AS and a
timeout; each calls the CLI's ``main`` in-process under an alarm. Every case must end with its
exit status, the one line it expects on stderr (none for a run that works) and no traceback;
no crash log is written, the previous files are intact, nothing from a model folder runs.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.core.guards import builders as b

MEMORY_LIMIT = 6 * 2**30  # address space of the whole catalogue process
WALL_SECONDS = 300
BIG = "/dev/zero"


@dataclass
class Case:
    id: str
    argv: list[str]
    code: int = 2
    needle: str = ""
    lines: int = 1  # lines on stderr (0: a run that works)
    env: dict[str, str] = field(default_factory=dict)


def _trace(
    model: Path | str, *extra: str, prompt: str = "hi", out: Path | None = None
) -> list[str]:
    argv = ["trace", prompt, "--model", str(model), "--quiet", "--greedy"]
    argv += ["--max-new-tokens", "2", *extra]
    return argv + (["--out", str(out)] if out is not None else ["--out", os.devnull])


def _folder_cases(base: Path, tmp: Path) -> list[Case]:
    """Model files that are not regular files of a sane size."""
    cases = []
    kinds = [
        ("config.json", "fifo", None, "config.json is a fifo"),
        ("config.json", "link", BIG, "config.json is a character device (a link to /dev/zero)"),
        ("config.json", "folder", None, "config.json is a folder"),
        ("config.json", "link", "nowhere.json", "config.json is missing (or a link to nothing)"),
        ("config.json", "sparse", 300 * 2**20, "config.json is 314572800 bytes"),
        ("tokenizer_config.json", "link", "/dev/urandom", "tokenizer_config.json is a character"),
        ("tokenizer_config.json", "fifo", None, "tokenizer_config.json is a fifo"),
        ("tokenizer.json", "fifo", None, "tokenizer.json is a fifo"),
        ("tokenizer.json", "link", BIG, "tokenizer.json is a character device"),
        ("tokenizer.json", "sparse", 2**40, "tokenizer.json is 1099511627776 bytes"),
        ("generation_config.json", "fifo", None, "generation_config.json is a fifo"),
        ("special_tokens_map.json", "link", "/dev/urandom", "special_tokens_map.json is a char"),
        ("chat_template.jinja", "fifo", None, "chat_template.jinja is a fifo"),
        ("chat_template.jinja", "link", BIG, "chat_template.jinja is a character device"),
        ("model.safetensors", "fifo", None, "model.safetensors is a fifo"),
        ("model.safetensors", "link", BIG, "model.safetensors is a character device"),
        ("vocab.json", "fifo", None, "vocab.json is a fifo"),
        ("merges.txt", "link", "/dev/urandom", "merges.txt is a character device"),
    ]
    for i, (name, how, payload, needle) in enumerate(kinds):
        folder = b.variant(base, tmp / f"files-{i}")
        b.replace_file(folder, name, how, payload)
        cases.append(Case(f"file-{name}-{how}-{i}", _trace(folder), needle=needle))
    loop = b.variant(base, tmp / "files-loop")
    b.replace_file(loop, "config.json", "link", loop / "config2.json")
    os.symlink(loop / "config.json", loop / "config2.json")
    cases.append(Case("file-config-link-loop", _trace(loop), needle="config.json"))
    beside = tmp / "gguf-beside-fifo"
    beside.mkdir()
    os.mkfifo(beside / "config.json")  # read (as plain JSON, for auto_map) before converting
    spec = b.gguf_file(beside / "m.gguf")
    env = {"LLM_LENS_CACHE": str(tmp / "gguf-cache")}
    cases.append(
        Case("file-fifo-beside-gguf", _trace(spec), needle="config.json is a fifo", env=env)
    )
    fifo_gguf = tmp / "fifo.gguf"
    os.mkfifo(fifo_gguf)
    cases.append(Case("file-gguf-fifo", _trace(fifo_gguf), needle="not a model folder or .gguf"))
    dev_gguf = tmp / "zero.gguf"
    os.symlink(BIG, dev_gguf)
    cases.append(Case("file-gguf-dev-zero", _trace(dev_gguf), needle="not a model folder or .gguf"))
    return cases


def _config_cases(base: Path, tmp: Path) -> list[Case]:
    """Configs whose numbers are absurd, or that the weights cannot back."""
    claims = [
        ("layers-million", {"num_hidden_layers": 1_000_000}, "num_hidden_layers is 1000000"),
        ("layers-more-than-held", {"num_hidden_layers": 3}, "claims 3 layers; the weights hold 2"),
        ("layers-4000", {"num_hidden_layers": 4000}, "claims 4000 layers; the weights hold 2"),
        ("layers-zero", {"num_hidden_layers": 0}, "num_hidden_layers is 0"),
        ("layers-negative", {"num_hidden_layers": -1}, "num_hidden_layers is -1"),
        ("layers-string", {"num_hidden_layers": "2"}, "num_hidden_layers is '2'"),
        ("layers-float", {"num_hidden_layers": 1e30}, "num_hidden_layers is 1e+30"),
        ("layers-bool", {"num_hidden_layers": True}, "num_hidden_layers is true"),
        ("hidden-billion", {"hidden_size": 10**9}, "hidden_size is 1000000000"),
        ("vocab-trillion", {"vocab_size": 10**12}, "vocab_size is 1000000000000"),
        ("vocab-zero", {"vocab_size": 0}, "vocab_size is 0"),
        ("context-zero", {"max_position_embeddings": 0}, "max_position_embeddings is 0"),
        ("context-negative", {"max_position_embeddings": -5}, "max_position_embeddings is -5"),
        ("intermediate-huge", {"intermediate_size": 2**40}, "intermediate_size is 1099511627776"),
        ("intermediate-per-layer-huge", {"intermediate_size": [32, 2**40]}, "is 1099511627776"),
        ("heads-billion", {"num_attention_heads": 10**9}, "num_attention_heads is 1000000000"),
        ("size-claim", {"hidden_size": 4096}, "at least"),
        ("text-config-layers", {"text_config": {"num_hidden_layers": 10**7}}, "10000000"),
        (
            "vocab-disagrees",
            {"vocab_size": 50000},
            "weight model.embed_tokens.weight is [49152, 16] in the file; the config implies "
            "[50000, 16]",
        ),
        ("hidden-disagrees", {"hidden_size": 32, "head_dim": 8}, "in the file; the config implies"),
        ("model-type-unknown", {"model_type": "no-such-family"}, "not a loadable causal lm"),
        ("architecture-encoder", {"architectures": ["BertModel"]}, "not a causal language model"),
        ("auto-map", {"auto_map": {"AutoModelForCausalLM": "evil.Evil"}}, "needs custom code"),
    ]
    cases = []
    for name, edits, needle in claims:
        folder = b.variant(base, tmp / f"config-{name}", edits)
        cases.append(Case(f"config-{name}", _trace(folder), needle=needle.lower()))
    raw = [
        ("not-json", b"\x00\xff garbage {", "config.json is not readable json"),
        ("nested", b"[" * 100_000 + b"]" * 100_000, "config.json is not readable json"),
        ("empty", b"", "config.json is not readable json"),
        ("list", b"[1, 2, 3]", ""),
    ]
    for name, data, needle in raw:
        folder = b.variant(base, tmp / f"config-raw-{name}")
        b.replace_file(folder, "config.json", "bytes", data)
        cases.append(Case(f"config-{name}", _trace(folder), needle=needle))
    return cases


def _weights_cases(base: Path, tmp: Path) -> list[Case]:
    """Weights that do not fit the config, and safetensors headers that lie."""
    extra = b.with_extra_tensor(base, tmp / "w-extra", "model.layers.0.mlp.surplus.weight")
    renamed = b.with_renamed_tensor(
        base, tmp / "w-renamed", "model.norm.weight", "model.final_norm.weight"
    )
    partly = b.variant(base, tmp / "w-partly", {"num_hidden_layers": 3})
    cases = [
        Case("weights-unexpected", _trace(extra), needle="model.layers.0.mlp.surplus.weight"),
        Case("weights-renamed", _trace(renamed), needle="missing from the files (model.norm"),
        Case(
            "weights-missing-allowed",
            _trace(partly, "--allow-partly-random", out=tmp / "partly.json"),
            code=2,  # a layer the weights lack is refused before loading, flag or not
            needle="claims 3 layers",
        ),
        Case(
            "weights-renamed-allowed",
            _trace(
                renamed,
                "--allow-partly-random",
                "--session",
                str(tmp / "renamed.llmlens"),
                out=tmp / "renamed.json",
            ),  # fmt: skip
            code=0,
            needle="partly random: 1 weights missing",
        ),
    ]
    shape = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
    lies = [
        ("header-huge", b.safetensors_bytes({}, length=2**40), "header claims 1099511627776"),
        ("header-past-end", b.safetensors_bytes({"t": shape}, length=500), "header claims 500"),
        ("header-garbage", b.safetensors_bytes(b"\xff\xfe{{{{"), "header is not json"),
        ("header-list", b.safetensors_bytes([1, 2]), "not a json object"),
        ("tensor-past-end", b.safetensors_bytes({"t": shape}, b"\x00" * 8), "lies at bytes 0-16"),
        (
            "tensor-short",
            b.safetensors_bytes({"t": shape | {"data_offsets": [0, 8]}}, b"\x00" * 8),
            "is [2, 2] f32 (16 bytes) in 8 bytes",
        ),
        ("dtype-unknown", b.safetensors_bytes({"t": shape | {"dtype": "Q9"}}), "malformed"),
        ("shape-negative", b.safetensors_bytes({"t": shape | {"shape": [-2, 2]}}), "malformed"),
        (
            "shape-huge",
            b.safetensors_bytes({"t": shape | {"shape": [2**40, 2**20]}}, b"\x00" * 16),
            "bytes) in 16 bytes",
        ),
        ("four-bytes", b"\x01\x02\x03\x04", "shorter than a header"),
        ("empty", b"", "shorter than a header"),
    ]
    for name, data, needle in lies:
        folder = b.variant(base, tmp / f"st-{name}")
        b.replace_file(folder, "model.safetensors", "bytes", data)
        cases.append(Case(f"safetensors-{name}", _trace(folder), needle=needle.lower()))
    return cases


def _gguf_cases(tmp: Path) -> list[Case]:
    """GGUF files whose header or metadata lies."""
    good = b.gguf_file(tmp / "good.gguf")
    made = {
        "blocks-million": (b.gguf_file(tmp / "g1.gguf", blocks=1_000_000), "claims 1000000 layers"),
        "blocks-zero": (b.gguf_file(tmp / "g2.gguf", blocks=0), "claims 0 layers"),
        "context-zero": (b.gguf_file(tmp / "g3.gguf", context=0), "context length"),
        "vocab-past-rows": (b.gguf_file(tmp / "g4.gguf", vocab=20), "token_embd.weight is [8, 16]"),
        "tensor-count": (b.patched(good, 8, (2**60).to_bytes(8, "little"), tmp / "g5.gguf"), ""),
        "kv-count": (b.patched(good, 16, (2**60).to_bytes(8, "little"), tmp / "g6.gguf"), ""),
        "magic": (b.patched(good, 0, b"GGUX", tmp / "g7.gguf"), "no gguf header"),
        "version": (b.patched(good, 4, (99).to_bytes(4, "little"), tmp / "g8.gguf"), "version 99"),
    }
    truncated = tmp / "g9.gguf"
    truncated.write_bytes(good.read_bytes()[:-64])
    made["truncated-data"] = (truncated, "")
    header_only = tmp / "g10.gguf"
    header_only.write_bytes(good.read_bytes()[:24])
    made["header-only"] = (header_only, "")
    (tmp / "g11.gguf").write_bytes(os.urandom(4096))
    made["random-bytes"] = (tmp / "g11.gguf", "no gguf header")
    (tmp / "g12.gguf").write_bytes(b"")
    made["empty"] = (tmp / "g12.gguf", "no gguf header")
    env = {"LLM_LENS_CACHE": str(tmp / "gguf-cache")}
    return [
        Case(f"gguf-{name}", _trace(path), needle=needle.lower(), env=env)
        for name, (path, needle) in made.items()
    ]


TEMPLATES = {
    "nested-loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        "a loop too long|longer than 3 s",  # whichever limit a slow machine meets first
    ),
    "string-bomb-namespace": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s }}",
        "longer than",
    ),
    "string-bomb-set": ("{% set s = 'xx' %}" + "{% set s = s ~ s %}" * 64 + "{{ s }}", "longer"),
    "string-multiply": ("{{ 'x' * 10000000000 }}", "longer than"),
    "string-multiply-dead-branch": ("{% if false %}{{ 'ab' * 10**10 }}{% endif %}hi", "longer"),
    "list-doubling": (
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
        "{% endfor %}",
        "longer than",
    ),
    "replace-bomb": (
        "{% set ns = namespace(s='xxxxxxxxxx') %}{% for i in range(20) %}"
        "{% set ns.s = ns.s.replace('x', 'xxxxxxxxxx') %}{% endfor %}",
        "longer than",
    ),
    "format-width": ("{{ '{:>9999999999}'.format('x') }}", "formats a field wider"),
    "percent-width": ("{{ '%*s' % (10000000000, 'x') }}", "formats a field wider"),
    "power": ("{{ 2 ** 100000000 }}", "raised a number to the power"),
    "raises": ("{{ raise_exception('only user and assistant roles') }}", "only user and assistant"),
    "recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recursion"),
    "syntax-error": ("{% for x in %}", "syntax error at line 1"),
    "deep-parentheses": ("{{" + "(" * 5000 + "1" + ")" * 5000 + "}}", "recursed too deeply"),
    "sandbox-class": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "leave jinja's sandbox"),
    "sandbox-globals": ("{{ cycler.__init__.__globals__.os }}", "leave jinja's sandbox"),
    "sandbox-hidden-attribute": ("{{ raise_exception.__globals__['os'] }}", "sandbox"),
    "sandbox-namespace-dunder": (
        "{% set ns = namespace() %}{% set ns.__class__ = 1 %}",
        "leave jinja's sandbox",
    ),
    "undefined-call": ("{{ nothing_here() }}", "it raised an error"),
}


def _template_cases(base: Path, tmp: Path) -> list[Case]:
    cases = []
    for name, (source, needle) in TEMPLATES.items():
        folder = b.variant(base, tmp / f"tpl-{name}")
        (folder / "chat_template.jinja").write_text(source)
        cases.append(Case(f"template-{name}", _trace(folder), needle=needle.lower()))
    return cases


def _regex_cases(base: Path, tmp: Path) -> list[Case]:
    """Pre-tokenizer regexes: one that exhausts Oniguruma (a Rust panic), one not a regex."""
    cases = []
    for name, pattern, prompt, needle in (
        ("backtracking", "((a+)+)+b", "a" * 3000, "exhausted the regex engine"),
        ("unbalanced", "(", "hi", "not a loadable causal lm"),
        ("repeat-range", "a{100000}{100000}", "hi", "not a loadable causal lm"),
    ):
        folder = b.variant(base, tmp / f"regex-{name}")
        data = json.loads((folder / "tokenizer.json").read_text())
        data["pre_tokenizer"] = {
            "type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False
        }  # fmt: skip
        (folder / "tokenizer.json").write_text(json.dumps(data))
        cases.append(Case(f"regex-{name}", _trace(folder, "--raw", prompt=prompt), needle=needle))
    return cases


TEXTS = {"control": "a\x01\x07\x1b[31m\x7f", "bidi": "abc\u202edcba\u2066x\u2069"}
TEXTS["zero-width"] = "\u200b\ufeff\u200d"


def _prompt_cases(base: Path, tmp: Path) -> list[Case]:
    out = tmp / "prompt-stop.json"
    texts = [
        Case(f"prompt-{k}", _trace(base, prompt=v, out=tmp / f"prompt-{k}.json"), 0, lines=0)
        for k, v in TEXTS.items()
    ]
    return texts + [
        Case("prompt-1mb", _trace(base, prompt="hello " * 175_000), needle="longer than the"),
        Case("prompt-past-context", _trace(base, prompt="hi " * 300), needle="longer than the"),
        Case(
            "prompt-raw-past-context", _trace(base, "--raw", prompt="a b " * 200), needle="longer"
        ),
        Case("prompt-stop-1mb", _trace(base, "--stop", "x" * 2**20, out=out), 0, lines=0),
    ]


SAMPLER_PAST = [
    ("temperature-negative", ["--temperature", "-1"], "temperature must be"),
    ("temperature-tiny", ["--temperature", "1e-9"], "temperature must be 0 or"),
    ("top-p-zero", ["--top-p", "0"], "top-p must be in (0, 1]"),
    ("top-p-1.5", ["--top-p", "1.5"], "top-p must be in (0, 1]"),
    ("min-p-1", ["--min-p", "1"], "min-p must be in [0, 1)"),
    ("min-p-negative", ["--min-p", "-0.1"], "min-p must be in [0, 1)"),
    ("min-p-2", ["--min-p", "2"], "min-p must be in [0, 1)"),
    ("top-k-negative", ["--top-k", "-1"], "top-k must be"),
    ("top-k-2^31", ["--top-k", str(2**31)], "top-k must be"),
    ("penalty-zero", ["--repetition-penalty", "0"], "repetition penalty must be"),
    ("penalty-huge", ["--repetition-penalty", "1e7"], "repetition penalty must be"),
    ("seed-negative", ["--seed", "-1"], "--seed"),
    ("seed-2^64", ["--seed", str(2**64)], "must be from 0 to 2**64 - 1"),
    ("max-new-zero", ["--max-new-tokens", "0"], "must be at least 1"),
    ("max-new-negative", ["--max-new-tokens", "-1"], "must be at least 1"),
    ("max-new-nan", ["--max-new-tokens", "nan"], "must be a whole number"),
    ("max-new-fraction", ["--max-new-tokens", "1.5"], "must be a whole number"),
]
SAMPLER_AT = [
    ("seed-2^64-1", ["--seed", str(2**64 - 1), "--temperature", "0.7"]),
    ("temperature-1e-6", ["--temperature", "1e-6"]),
    ("top-p-1", ["--top-p", "1"]),
    ("min-p-0.999", ["--min-p", "0.999"]),
    ("top-k-2^31-1", ["--top-k", str(2**31 - 1)]),
    ("penalty-1e6", ["--repetition-penalty", "1e6"]),
    ("penalty-1e-6", ["--repetition-penalty", "1e-6"]),
]


def _sampler_cases(base: Path, tmp: Path) -> list[Case]:
    out = tmp / "sampler.json"
    cases = []
    for name, flags, needle in SAMPLER_PAST:  # sampled, and the same beside --greedy
        sampled = _trace(base, *flags)
        sampled.remove("--greedy")
        cases.append(Case(f"sampler-{name}", sampled, needle=needle))
        if name in ("top-p-1.5", "min-p-2", "temperature-negative", "top-k-negative"):
            cases.append(Case(f"sampler-greedy-{name}", _trace(base, *flags), needle=needle))
    for name, flags in SAMPLER_AT:
        argv = _trace(base, *flags, out=out)
        argv.remove("--greedy")
        cases.append(Case(f"sampler-at-{name}", argv, code=0, lines=0))
    capped = "is past the model's context of 256 tokens"
    for value in ("1e30", "1000000000"):
        argv = _trace(base, out=out)
        argv[argv.index("--max-new-tokens") + 1] = value
        cases.append(Case(f"max-new-tokens-{value}", argv, code=0, needle=capped))
    return cases


def _output_cases(base: Path, tmp: Path) -> list[Case]:
    same = tmp / "same.llmlens"
    same.write_bytes(b"previous session")
    long_name = tmp / ("n" * 250 + ".json")
    too_long = tmp / ("n" * 252 + ".json")
    return [
        Case("out-equals-session", _trace(base, "--session", str(same), out=same), needle="same"),
        Case("out-255-bytes", _trace(base, out=long_name), code=0, lines=0),
        Case("out-256-bytes", _trace(base, out=too_long), needle="cannot write"),
    ]


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory, tokenizer):
    tmp = tmp_path_factory.mktemp("hostile")
    base = b.tiny_folder(tmp / "tiny", tokenizer)
    cases = (
        _folder_cases(base, tmp) + _config_cases(base, tmp) + _weights_cases(base, tmp)
        + _gguf_cases(tmp) + _template_cases(base, tmp) + _regex_cases(base, tmp)
        + _prompt_cases(base, tmp) + _sampler_cases(base, tmp) + _output_cases(base, tmp)
    )  # fmt: skip
    spec, results = tmp / "cases.json", tmp / "results.json"
    spec.write_text(json.dumps([c.__dict__ for c in cases]))
    logs = tmp / "logs"
    env = dict(os.environ, LLM_LENS_LOG_DIR=str(logs), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("PYTHONWARNINGS", None)

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    done = subprocess.run(
        [sys.executable, "-m", "tests.core.guards.driver", str(spec), str(results)],
        capture_output=True, env=env, timeout=WALL_SECONDS, preexec_fn=bounded,
        cwd=Path(__file__).resolve().parents[3], stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return {
        "cases": {c.id: c for c in cases},
        "results": json.loads(results.read_text()),
        "stderr": done.stderr.decode("utf-8", "replace"),
        "logs": logs,
        "tmp": tmp,
    }


def test_the_catalogue_is_large(catalogue):
    assert len(catalogue["cases"]) >= 80 + 35  # 80 new cases at least, beside those issue 38 named


def test_every_case_is_one_clear_line(catalogue):
    """Exit status, the expected line (or none), no traceback, no case hung or escaped."""
    failures = []
    for case_id, case in catalogue["cases"].items():
        result = catalogue["results"][case_id]
        lines = result["err"].strip().splitlines()
        problems = []
        if result["code"] != case.code:
            problems.append(f"exit {result['code']!r}, expected {case.code}")
        if len(lines) != case.lines and not (case.code == 0 and case.needle and len(lines) == 1):
            problems.append(f"{len(lines)} lines")
        needles = case.needle.lower().split("|")
        if case.needle and not any(n in line.lower() for n in needles for line in lines):
            problems.append(f"no {case.needle!r}")
        if "Traceback" in result["err"] or "unexpected error" in result["err"]:
            problems.append("a traceback or the bug guard")
        if result["seconds"] > 25:
            problems.append(f"took {result['seconds']:.0f} s")
        if problems:
            failures.append(f"{case_id}: {'; '.join(problems)}: {result['err'].strip()[:300]}")
    assert not failures, "\n".join(failures)


def test_bounded_and_quiet(catalogue):
    """Memory stayed far below the limit, nothing escaped to the process's own stderr (a Rust
    panic's lines, a warning), and no crash log was written (no case was a bug)."""
    assert catalogue["results"]["__maxrss_mb__"]["code"] < 3000
    noise = [line for line in catalogue["stderr"].splitlines() if line.strip()]
    assert noise == [], noise[:10]
    logs = catalogue["logs"]
    assert not logs.exists() or not any(logs.iterdir())


def test_no_file_lost(catalogue):
    tmp = catalogue["tmp"]
    assert (tmp / "same.llmlens").read_bytes() == b"previous session"
    assert (tmp / ("n" * 250 + ".json")).is_file()  # a legal 255-byte name was written
    assert ("n" * 252 + ".json") not in os.listdir(tmp)
    assert not list(tmp.glob(".n*"))  # no temporary file left beside them


def test_a_partly_random_model_is_marked_in_its_trace_and_session(catalogue):
    from llm_lens.core.sessions.read import read_session

    data = json.loads((catalogue["tmp"] / "renamed.json").read_text())
    mark = data["model"]["partly_random"]
    assert mark.startswith("partly random: 1 weights missing") and "model.norm.weight" in mark
    session = read_session(catalogue["tmp"] / "renamed.llmlens")
    assert session.model["partly_random"] == mark


def test_control_and_bidi_text_round_trips(catalogue):
    """Control, bidirectional and zero-width characters are text: run, and kept exactly."""
    for name, text in TEXTS.items():
        data = json.loads((catalogue["tmp"] / f"prompt-{name}.json").read_text())
        assert data["prompt"]["text"] == text
