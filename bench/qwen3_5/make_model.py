#!/usr/bin/env python3
"""Random weights for the bench/qwen3_5 model (model/config.json): transformers' initialization of
Qwen3_5ForCausalLM from a fixed seed, saved as an HF folder (f32 safetensors) for the decode
benchmark. Generated at bench time, never committed.
usage: make_model.py OUT_DIR [CONFIG_JSON]"""
import os
import shutil
import sys

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1]
cfg = Qwen3_5TextConfig.from_json_file(sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "model", "config.json"))
torch.manual_seed(0)
model = Qwen3_5ForCausalLM(cfg).float().eval()
model.generation_config.eos_token_id = None
model.generation_config.pad_token_id = None
model.save_pretrained(out, safe_serialization=True, max_shard_size="20GB")
