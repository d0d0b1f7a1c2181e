#!/usr/bin/env bash
# Training-step benchmark, titan vs PyTorch (transformers' Qwen3ForCausalLM), same shapes, same
# threads, in one run: full steps (forward + backward + clipping + AdamW), steady-state median
# tokens/s after warm-up. PyTorch runs eager and torch.compile'd, each in f32 and with bf16
# autocast (f32 master weights), as issue 29's table; titan in f32 and with bf16 matmuls. Prints
# one table with achieved TFLOP/s and % of titan's measured peaks, then titan's ratios to each.
#   usage: bench/train_step/run.sh [TITAN_BIN=build/titan] [STEPS=8]
#   COMPILE=0 skips the two torch.compile runs (each compiles for about a minute first).
# PyTorch gets its best settings: OPENBLAS_CORETYPE unset, jemalloc preloaded where installed, 2 threads.
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
read pbf pmbf < <(run_torch "--bf16")
if [ "${COMPILE:-1}" != 0 ]; then
  read c32 cm32 < <(run_torch "--compile")
  read cbf cmbf < <(run_torch "--bf16 --compile")
else
  c32=0 cm32=0 cbf=0 cmbf=0
fi
flops=$("$titan" info --model bench/train_step/model --seq-len 512 --json | "$py" -c "import json,sys; print(json.load(sys.stdin)['flops_per_token'])")
# This machine's f32 / bf16 peaks on 2 threads (titan's MFU peaks: cached, or measured now).
read pk32 pkbf < <("$titan" info --peak --threads 2 --json | "$py" -c "import json,sys; p=json.load(sys.stdin); print(p['f32_tflops'], p['bf16_tflops'])")
"$py" - "$flops" "$pk32" "$pkbf" "$t32" "$m32" "$tbf" "$mbf" "$p32" "$pm32" "$pbf" "$pmbf" "$c32" "$cm32" "$cbf" "$cmbf" <<'PY'
import sys
flops, pk32, pkbf, t32, m32, tbf, mbf, p32, pm32, pbf, pmbf, c32, cm32, cbf, cmbf = map(float, sys.argv[1:])
rows = [("pytorch eager f32", p32, pk32, pm32), ("pytorch compile f32", c32, pk32, cm32),
        ("pytorch eager bf16", pbf, pkbf, pmbf), ("pytorch compile bf16", cbf, pkbf, cmbf),
        ("titan f32", t32, pk32, m32), ("titan bf16 matmuls", tbf, pkbf, mbf)]
print(f"{'run':22} {'tokens/s':>9} {'TFLOP/s':>8} {'% peak':>7} {'max RSS GiB':>12}")
for name, tps, peak, mem in rows:
    if tps <= 0:
        continue
    tf = tps * flops / 1e12
    print(f"{name:22} {tps:9.1f} {tf:8.3f} {100 * tf / peak:6.1f}% {mem:12.2f}")
for name, tps, base, what in [("titan f32", t32, p32, "eager f32"), ("titan f32", t32, c32, "compile f32"),
                              ("titan bf16", tbf, pbf, "eager bf16"), ("titan bf16", tbf, cbf, "compile bf16")]:
    if base > 0:
        print(f"{name} / pytorch {what}: {tps / base:.2f}x")
print(f"model FLOPs/token {flops:.4g}; peaks: f32 {pk32:.3f}, bf16 {pkbf:.3f} TFLOP/s (2 threads, titan info --peak)")
PY
