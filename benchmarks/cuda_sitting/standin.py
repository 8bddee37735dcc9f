"""Build a model of a config folder's own config with random weights, saved beside its tokenizer.

``standin.py CONFIG_FOLDER OUT_FOLDER`` (the kit's ``model/``): the bundled model's shapes and
kernels, so its time a step, for a machine the GGUF cannot travel to. ``--gil-bound`` cuts it
to hidden size 96 (3 query heads, 1 key/value head, head size 32) keeping its 30 layers: a model
that is all operator overhead, whose thread wants the GIL almost all the time, as a GPU's does
(docs/performance-history.md, "Eleventh pass"). Weights are seeded, so two builds are the same
model.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--gil-bound", action="store_true", help="hidden size 96, 30 layers")
    args = parser.parse_args()
    config = AutoConfig.from_pretrained(args.config)
    if args.gil_bound:
        config.hidden_size, config.intermediate_size, config.head_dim = 96, 192, 32
        config.num_attention_heads, config.num_key_value_heads = 3, 1
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(args.out)
    for path in args.config.iterdir():
        if path.name != "config.json" and not (args.out / path.name).exists():
            shutil.copy2(path, args.out / path.name)
    layers, hidden = config.num_hidden_layers, config.hidden_size
    print(f"{args.out}: {layers} layers, hidden {hidden}, random weights (seed 0)")


if __name__ == "__main__":
    main()
