#!/usr/bin/env bash
# Training step of the guide's reduced Qwen3-30B-A3B recipe (4 layers, top-4 routing; experts cut
# from 64 to $EXPERTS so that titan and PyTorch each fit this 24 GiB machine), titan vs PyTorch
# eager running transformers' Qwen3MoeForCausalLM with the same shapes, optimizer and threads, one
# after the other in one run. Steady-state median tokens/s; MFU counts active parameters only.
#   usage: bench/moe_step/run.sh [TITAN_BIN=build/titan] [STEPS=5] ; EXPERTS=16 SEQ=512 BATCH=1
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
titan=${1:-$src/build/titan}
steps=${2:-5}
experts=${EXPERTS:-16} seq=${SEQ:-512} batch=${BATCH:-1}
py=${TITAN_ORACLE_PYTHON:-$src/.venv-oracle/bin/python}
[ -x "$py" ] || py=/work/venv-oracle/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
jemalloc=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); experts $experts, seq $seq, batch $batch"
over=(--model.num_experts "$experts" --training.seq_len "$seq" --training.local_batch_size "$batch"
      --training.steps "$steps" --metrics.perf_warmup_steps 2 --job.dump_folder "$out/titan")
run_titan() {  # $1 precision
  rm -rf "$out/titan"
  /usr/bin/time -f "%M" -o "$out/rss" "$titan" train --config recipes/qwen3_30b_a3b_4layer_moe.toml "${over[@]}" \
    --training.mixed_precision_param "$1" > "$out/titan-$1.log" 2>&1 || { tail -5 "$out/titan-$1.log"; exit 1; }
  "$py" -c "import json; s=json.load(open('$out/titan/summary.json')); print(s['median_tps'], int(open('$out/rss').read().split()[-1]) / 2**20)"
}
read t32 m32 < <(run_titan float32)
read tbf mbf < <(run_titan bfloat16)
read p32 pm32 < <(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${jemalloc:+LD_PRELOAD=$jemalloc} "$py" \
  bench/train_step/torch_baseline.py --hidden 2048 --layers 4 --heads 32 --kv-heads 4 --head-dim 128 --ffn 6144 \
  --seq "$seq" --batch "$batch" --steps "$((steps - 2))" --warmup 2 --threads 2 --untied \
  --moe-experts "$experts" --moe-topk 4 --moe-ffn 768 | tail -1 |
  "$py" -c "import json,sys; s=json.loads(sys.stdin.read()); print(s['tokens_per_s'], s['max_rss_gib'])")
flops=$("$titan" info --config recipes/qwen3_30b_a3b_4layer_moe.toml "${over[@]}" --json | "$py" -c "import json,sys; print(json.load(sys.stdin)['flops_per_token'])")
# This machine's f32 / bf16 peaks on 2 threads (titan's MFU peaks: cached, or measured now).
read pk32 pkbf < <("$titan" info --peak --threads 2 --json | "$py" -c "import json,sys; p=json.load(sys.stdin); print(p['f32_tflops'], p['bf16_tflops'])")
"$py" - "$t32" "$tbf" "$p32" "$flops" "$m32" "$mbf" "$pm32" "$pk32" "$pkbf" <<'PY'
import sys
t32, tbf, p32, flops, m32, mbf, pm32, pk32, pkbf = map(float, sys.argv[1:])
rows = [("pytorch eager f32", p32, pk32, pm32), ("titan f32", t32, pk32, m32), ("titan bf16 matmuls", tbf, pkbf, mbf)]
print(f"{'run':22} {'tokens/s':>9} {'vs torch':>9} {'TFLOP/s':>8} {'MFU':>7} {'max RSS GiB':>12}")
for name, tps, peak, mem in rows:
    tf = tps * flops / 1e12
    print(f"{name:22} {tps:9.1f} {tps / p32:8.2f}x {tf:8.3f} {100 * tf / peak:6.1f}% {mem:12.2f}")
print(f"active-parameter FLOPs/token {flops:.4g}; peaks: f32 {pk32:.3f}, bf16 {pkbf:.3f} TFLOP/s (2 threads, titan info --peak)")
PY
