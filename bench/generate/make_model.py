#!/usr/bin/env python3
"""Random weights for the Qwen3-0.6B-shaped bench model (config.json here): transformers'
initialization (normal(0, initializer_range), norms 1) from a fixed seed, saved as an HF folder
(f32 safetensors) at the path given. Generated at bench time, never committed.
usage: make_model.py OUT_DIR [CONFIG_JSON]   (default: config.json here)"""
import os
import shutil
import sys

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1]
cfg = Qwen3Config.from_json_file(sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "config.json"))
torch.manual_seed(0)
model = Qwen3ForCausalLM(cfg).float().eval()
model.generation_config.eos_token_id = None
model.generation_config.pad_token_id = None
model.save_pretrained(out, safe_serialization=True, max_shard_size="20GB")
