#!/usr/bin/env bash
# A Qwen3-MoE model trained by titan (every layer sparse), exported to HF safetensors in the
# per-expert layout, reloaded by Hugging Face transformers (Qwen3MoeForCausalLM): no missing or
# unexpected keys and the same logits as titan's. Needs a Python with torch and transformers
# (TITAN_ORACLE_PYTHON, or the project's tools venv); skipped (77) when there is none.
set -euo pipefail
titan=$1 src=$2
py=${TITAN_ORACLE_PYTHON:-}
for cand in "$py" "$src/.venv-oracle/bin/python" "/work/venv-oracle/bin/python"; do
  if [ -n "$cand" ] && [ -x "$cand" ] && "$cand" -c "import torch, transformers" 2>/dev/null; then py=$cand; break; fi
  py=""
done
[ -n "$py" ] || { echo "skip: no python with torch + transformers"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$titan" train --config "$src/recipes/debug.toml" --job.dump_folder "$work/run" --model.name qwen3_moe \
  --model.flavor debug-moe --model.n_layers 2 --training.steps 2 --training.seq_len 32 --training.local_batch_size 2 \
  --checkpoint.interval 1000 --checkpoint.export_dtype float32 --metrics.enable_tensorboard false > "$work/train.log" 2>&1 \
  || { cat "$work/train.log"; exit 1; }
export_dir=$(ls -d "$work"/run/checkpoint/step-2-hf)
grep -q '"model_type": "qwen3_moe"' "$export_dir/config.json"
printf '151643 791 3974 13876 38835 1939 916 279\n9707 11 1879 0 220 16 17 18\n' > "$work/tokens.txt"
"$titan" score --model "$export_dir" --tokens "$work/tokens.txt" --dump-logits "$work/logits.safetensors"
"$titan" verify checkpoint "$export_dir" --quiet
"$py" "$src/tools/oracle/check_hf_export.py" --model "$export_dir" --tokens "$work/tokens.txt" --logits "$work/logits.safetensors"
