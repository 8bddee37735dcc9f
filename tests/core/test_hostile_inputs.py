"""The catalogue of hostile and careless inputs, run against the real CLI in subprocesses.

Every case must end with its exit status (2, or 130 for Ctrl+C), one line on stderr and no
traceback, within a timeout (no hang); where a file was there before, it is intact with its mode;
no code from a model folder runs. Most cases fail before a model is loaded; the few that need
one use a tiny random Llama saved in a temporary folder.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

TIMEOUT = 120  # seconds for one case: a hang fails the case instead of the suite
TINY = "TINY"  # stands for the tiny model folder in a case's arguments
SUR = b"\xed\xa0\x80"  # U+D800 as UTF-8 bytes: a lone surrogate once decoded
CESU = b"\xed\xa0\xbd\xed\xb8\x80"  # U+1F600 as a CESU-8 surrogate pair


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A 2-layer random Llama with the bundled tokenizer, saved as a model folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from llm_lens.core.loading import bundled_gguf, gguf_to_folder

    out = tmp_path_factory.mktemp("tiny-model")
    tok = AutoTokenizer.from_pretrained(str(gguf_to_folder(bundled_gguf(), lambda *_: None)))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=8192,
        eos_token_id=2,
        bos_token_id=1,
        tie_word_embeddings=True,
        architectures=["LlamaForCausalLM"],
    )
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ, LLM_LENS_LOG_DIR=str(tmp_path / "logs"), HF_HUB_OFFLINE="1")
    e.pop("PYTHONWARNINGS", None)
    return e


def llm_lens(args, env, timeout=TIMEOUT, stdin=b"y\ny\n"):
    """Run the real entry point; ``stdin`` answers "y" to any question it should never ask."""
    cmd = [sys.executable, "-m", "llm_lens.desktop", *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, env=env, timeout=timeout)


def one_line(result, code=2, needle=""):
    err = result.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in result.stderr, err
    lines = err.strip().splitlines()
    assert result.returncode == code, err
    assert len(lines) == 1, err
    assert needle.lower() in lines[0].lower(), lines[0]
    return lines[0]


def _fill(args, tmp, model=None):
    out = []
    for a in args:
        if isinstance(a, str):
            a = a.replace("TMP", str(tmp))
            if model is not None:
                a = a.replace(TINY, str(model))
        out.append(a)
    return out


BEFORE_LOAD = [  # (id, arguments, words the one line must hold)
    ("surrogate-prompt", ["trace", b"hi " + SUR, "--quiet"], "not valid Unicode"),
    ("cesu8-prompt", ["trace", CESU + b" x", "--quiet"], "not valid Unicode"),
    ("cesu8-compare", ["compare", CESU, "--config", "greedy", "--config", "wild"], "Unicode"),
    ("surrogate-stop", ["trace", "hi", "--stop", SUR, "--quiet"], "not valid Unicode"),
    ("temperature-1e-300", ["trace", "hi", "--temperature", "1e-300"], "temperature"),
    ("temperature-nan", ["trace", "hi", "--temperature", "nan"], "finite"),
    ("temperature-1e400", ["trace", "hi", "--temperature", "1e400"], "finite"),
    ("penalty-1e-320", ["trace", "hi", "--repetition-penalty", "1e-320"], "repetition penalty"),
    ("seed-1e30", ["trace", "hi", "--seed", "1e30"], "seed"),
    ("seed-10^30", ["trace", "hi", "--seed", "1" + "0" * 30], "seed"),
    ("seed-5000-digits", ["trace", "hi", "--seed", "9" * 5000], "seed"),
    ("top-k-10^30", ["trace", "hi", "--top-k", "1" + "0" * 30], "top-k"),
    (
        "compare-temperature-1e-300",
        ["compare", "hi", "--config", "temperature=1e-300", "--config", "greedy"],
        "temperature",
    ),
    (
        "compare-penalty-1e-320",
        ["compare", "hi", "--config", "repetition_penalty=1e-320", "--config", "greedy"],
        "repetition penalty",
    ),
    (
        "compare-seed-10^30",
        ["compare", "hi", "--config", "seed=" + "1" * 31, "--config", "greedy"],
        "seed",
    ),
    ("compare-seed-1e30", ["compare", "hi", "--config", "seed=1e30", "--config", "greedy"], "seed"),
    (
        "compare-top-p-nan",
        ["compare", "hi", "--config", "top_p=nan", "--config", "greedy"],
        "top-p",
    ),
    ("out-empty", ["trace", "hi", "--out", ""], "empty file name"),
    ("session-empty", ["trace", "hi", "--session", ""], "empty file name"),
    ("session-dev-zero", ["trace", "hi", "--session", "/dev/zero"], "not a regular file"),
    ("out-folder", ["trace", "hi", "--out", "TMP"], "not a regular file"),
    ("out-no-folder", ["trace", "hi", "--out", "TMP/nope/x.json"], "no such folder"),
    ("out-unknown-user", ["trace", "hi", "--out", "~nosuchuser-llmlens/x.json"], "no home folder"),
    ("session-unknown-user", ["trace", "hi", "--session", "~nosuchuser-llmlens/x.llmlens"], "home"),
    ("model-unknown-user", ["trace", "hi", "--model", "~nosuchuser-llmlens/m"], "no such file"),
    ("inspect-unknown-user", ["inspect", "~nosuchuser-llmlens/x.llmlens"], "no home folder"),
    ("kv-unknown-user", ["kv", "--config", "~nosuchuser-llmlens/config.json"], "does not exist"),
    (
        "kv-tokens-10^400",
        ["kv", "--config", "TMP/config.json", "--tokens", "1" + "0" * 400],
        "2**53",
    ),
    ("kv-batch-10^400", ["kv", "--config", "TMP/config.json", "--batch", "1" + "0" * 400], "2**53"),
    ("kv-layers-10^400", ["kv", "--config", "TMP/huge.json"], "2**53"),
    ("kv-5000-digit-field", ["kv", "--config", "TMP/digits.json"], "not valid JSON"),
    ("kv-deep-nesting", ["kv", "--config", "TMP/deep.json"], "not valid JSON"),
    ("kv-300-char-name", ["kv", "--config", "a" * 300], "too long"),
    ("kv-fifo", ["kv", "--config", "TMP/fifo"], "not a regular file"),
    ("kv-dev-zero", ["kv", "--config", "/dev/zero"], "not a regular file"),
    ("gui-window-size-garbage", ["--window-size", "garbage"], "WIDTHxHEIGHT"),
]


def _prepare(tmp):
    os.mkfifo(tmp / "fifo")
    good = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}
    (tmp / "config.json").write_text(json.dumps(good))
    (tmp / "huge.json").write_text('{"num_hidden_layers": 1' + "0" * 400 + ', "n_head": 4}')
    (tmp / "digits.json").write_text('{"num_hidden_layers": ' + "7" * 5000 + "}")
    (tmp / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    previous = tmp / "previous.json"
    previous.write_text("previous")
    previous.chmod(0o640)
    return previous


@pytest.mark.parametrize(
    ("args", "needle"), [c[1:] for c in BEFORE_LOAD], ids=[c[0] for c in BEFORE_LOAD]
)
def test_before_any_model_load_one_line_exit_2(tmp_path, env, args, needle):
    previous = _prepare(tmp_path)
    result = llm_lens(_fill(args, tmp_path), env)
    one_line(result, 2, needle)
    assert previous.read_text() == "previous"
    assert stat.S_IMODE(previous.stat().st_mode) == 0o640
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)  # never replaced
    assert os.stat("/dev/null").st_mode and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not (tmp_path / "logs").exists()  # user mistakes are not crashes


def _evil_folder(tmp, where="config.json"):
    """A model folder whose config asks for code that would leave a marker file."""
    folder = tmp / "evil"
    folder.mkdir()
    marker = tmp / "MARKER"
    code = f"open({str(marker)!r}, 'w').write('ran')\n"
    (folder / "evil.py").write_text(code + "from transformers import LlamaConfig as EvilConfig\n")
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1}
    auto_map = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    if where == "tokenizer_config.json":
        (folder / where).write_text(json.dumps({"auto_map": {"AutoTokenizer": ["evil.T", None]}}))
    else:
        config["auto_map"] = auto_map
    (folder / "config.json").write_text(json.dumps(config))
    return folder, marker


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json", "gguf-beside"])
def test_a_model_folder_asking_for_custom_code_runs_nothing(tmp_path, env, where):
    folder, marker = _evil_folder(tmp_path, "config.json" if where == "gguf-beside" else where)
    spec = folder
    if where == "gguf-beside":
        spec = folder / "model.gguf"
        spec.write_bytes(b"GGUF" + b"\0" * 64)
    env["LLM_LENS_CACHE"] = str(tmp_path / "cache")
    result = llm_lens(["trace", "hi", "--model", str(spec), "--quiet"], env)  # stdin says "y"
    one_line(result, 2, "custom code")
    assert "evil.py" in result.stderr.decode()
    assert not marker.exists()


def test_transformers_itself_is_told_never_to_run_folder_code(tmp_path, monkeypatch):
    """Even past LLM Lens's own check, transformers gets trust_remote_code=False: it refuses
    without asking (``input`` is never called) and the marker never appears."""
    from llm_lens.core import loading
    from llm_lens.core.errors import ModelLoadError

    folder, marker = _evil_folder(tmp_path)
    monkeypatch.setattr(loading, "_refuse_custom_code", lambda *_: None)
    monkeypatch.setattr(loading, "_refuse_custom_code_config", lambda *_: None)
    monkeypatch.setattr("builtins.input", lambda *_: pytest.fail("transformers asked on stdin"))
    with pytest.raises(ModelLoadError):
        loading.load_model(str(folder), device="cpu")
    assert not marker.exists()


CTRL_C_RUNS = {  # each generation loop of the CLI, with an output to leave untouched
    "trace": ["--greedy", "--session", "run.llmlens"],
    "compare": ["--config", "greedy", "--config", "wild"],
}


@pytest.mark.parametrize("command", sorted(CTRL_C_RUNS))
def test_ctrl_c_stops_between_steps_writes_nothing_exit_130(tmp_path, env, tiny_folder, command):
    previous = tmp_path / "out.json"
    previous.write_text("previous")
    previous.chmod(0o604)
    session = tmp_path / "run.llmlens"
    cmd = [sys.executable, "-m", "llm_lens.desktop", command, "Tell me a long story"]
    cmd += ["--model", str(tiny_folder), "--max-new-tokens", "6000", "--out", str(previous)]
    cmd += [str(session) if a == "run.llmlens" else a for a in CTRL_C_RUNS[command]]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = bytearray()

    def read() -> None:
        for chunk in iter(lambda: proc.stderr.read1(256), b""):
            err.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + TIMEOUT
    while b"loaded " not in err and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)  # some steps stream
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        reader.join(10)
        proc.stderr.close()
    text = err.decode("utf-8", "replace")
    assert code == 130, text
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1] == (
        f"llm-lens {command}: interrupted (Ctrl+C); stopped, nothing was written"
    )
    assert previous.read_text() == "previous"
    assert stat.S_IMODE(previous.stat().st_mode) == 0o604
    assert not session.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "logs") == ["out.json"]


def test_a_run_writes_through_links_keeps_modes_and_cleans_stale_temps(tmp_path, env, tiny_folder):
    real, real_session = tmp_path / "real.json", tmp_path / "real.llmlens"
    real.write_text("previous")
    real.chmod(0o640)
    real_session.write_bytes(b"old")
    real_session.chmod(0o604)
    (tmp_path / "out.json").symlink_to(real)
    (tmp_path / "run.llmlens").symlink_to(real_session)
    stale = tmp_path / ".real.llmlens.kill9.tmp"  # left by a write killed with -9
    stale.write_bytes(b"partial")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    args = ["trace", "hi", "--model", str(tiny_folder), "--max-new-tokens", "2", "--quiet"]
    args += ["--out", str(tmp_path / "out.json"), "--session", str(tmp_path / "run.llmlens")]
    result = llm_lens(args, env, stdin=None)
    assert result.returncode == 0, result.stderr.decode()
    assert (tmp_path / "out.json").is_symlink() and (tmp_path / "run.llmlens").is_symlink()
    assert json.loads(real.read_text())["schema"] == "llm-lens-trace/1"
    assert real_session.read_bytes()[:2] == b"PK"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert stat.S_IMODE(real_session.stat().st_mode) == 0o604
    assert not stale.exists()
    out = llm_lens([*args[:-4], "--out", "-"], env, stdin=None)  # "-" is stdout
    assert json.loads(out.stdout)["schema"] == "llm-lens-trace/1"
