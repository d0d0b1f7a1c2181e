#!/usr/bin/env bash
# Training-step benchmark, titan vs PyTorch eager (transformers' Qwen3ForCausalLM), same shapes,
# same threads, in one run: full steps (forward + backward + clipping + AdamW), steady-state
# median tokens/s after warm-up. Prints one table with ratios and achieved TFLOP/s.
#   usage: bench/train_step/run.sh [TITAN_BIN=build/titan] [STEPS=8]
# PyTorch gets its best settings: OPENBLAS_CORETYPE unset, jemalloc preloaded, 2 threads.
# Python: $TITAN_ORACLE_PYTHON, else .venv-oracle/bin/python.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
titan=${1:-$src/build/titan}
steps=${2:-8}
py=${TITAN_ORACLE_PYTHON:-$src/.venv-oracle/bin/python}
[ -x "$py" ] || py=/work/venv-oracle/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
jemalloc=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)

run_titan() {  # $1 label, $2 precision
  /usr/bin/time -f "%M" -o "$out/$1.rss" "$titan" train --config bench/train_step/bench.toml --job.dump_folder "$out/$1" \
    --training.steps "$steps" --training.mixed_precision_param "$2" > "$out/$1.log" 2>&1 || { cat "$out/$1.log"; exit 1; }
  "$py" -c "import json,sys; s=json.load(open('$out/$1/summary.json')); print(s['median_tps'], int(open('$out/$1.rss').read().split()[-1]) / 2**20)"
}
run_torch() {  # $1 extra flags
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${jemalloc:+LD_PRELOAD=$jemalloc} "$py" bench/train_step/torch_baseline.py \
    --steps "$((steps - 3))" --warmup 3 --threads 2 $1 | tail -1 |
    "$py" -c "import json,sys; s=json.loads(sys.stdin.read()); print(s['tokens_per_s'], s['max_rss_gib'])"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
read t32 m32 < <(run_titan f32 float32)
read tbf mbf < <(run_titan bf16 bfloat16)
read p32 pm32 < <(run_torch "")
flops=$("$titan" info --model bench/train_step/model --seq-len 512 --json | "$py" -c "import json,sys; print(json.load(sys.stdin)['flops_per_token'])")
# This machine's f32 / bf16 peaks on 2 threads (titan's MFU peaks: cached, or measured now).
read pk32 pkbf < <("$titan" info --peak --threads 2 --json | "$py" -c "import json,sys; p=json.load(sys.stdin); print(p['f32_tflops'], p['bf16_tflops'])")
"$py" - "$t32" "$tbf" "$p32" "$flops" "$m32" "$mbf" "$pm32" "$pk32" "$pkbf" <<'PY'
import sys
t32, tbf, p32, flops, m32, mbf, pm32, pk32, pkbf = map(float, sys.argv[1:])
rows = [("pytorch eager f32", p32, pk32, pm32, "max RSS"), ("titan f32", t32, pk32, m32, "max RSS"),
        ("titan bf16 matmuls", tbf, pkbf, mbf, "max RSS")]
print(f"{'run':22} {'tokens/s':>9} {'vs torch':>9} {'TFLOP/s':>8} {'% peak':>7} {'memory GiB':>11}")
for name, tps, peak, mem, what in rows:
    tf = tps * flops / 1e12
    print(f"{name:22} {tps:9.1f} {tps / p32:8.2f}x {tf:8.3f} {100 * tf / peak:6.1f}% {mem:8.2f} ({what})")
print(f"model FLOPs/token {flops:.4g}; peaks: f32 {pk32:.3f}, bf16 {pkbf:.3f} TFLOP/s (2 threads, titan info --peak)")
PY
