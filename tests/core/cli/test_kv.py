"""``llm-lens kv`` through the installed entry point: dispatched without loading Qt."""

from __future__ import annotations

import json
import subprocess
import sys


def test_entry_point_dispatches_kv_without_qt(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 30,
                "num_attention_heads": 9,
                "num_key_value_heads": 3,
                "hidden_size": 576,
                "max_position_embeddings": 8192,
            }
        )
    )
    code = (
        "import sys; from llm_lens.desktop.cli import main; "
        "rc = main(['kv', '--config', sys.argv[1], "
        "'--tokens', '10', '--dtype', 'float32', '--json']); "
        "assert 'PySide6' not in sys.modules; sys.exit(rc)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(config)], capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout)
    assert data["bytes_per_token"] == 46080 and data["total_bytes"] == 460800
    assert data["mha_bytes_per_token"] == 138240
