#!/usr/bin/env bash
# LoRA vs full fine-tuning, titan and PEFT on PyTorch eager, Qwen3-0.6B flavor, seq 2048, batch 1,
# rank 16 on attention + MLP, the same threads (2), one run: tokens/s (median after warm-up), the
# allocator's peak (titan) against `titan info`'s prediction, and max RSS for both.
#   usage: bench/lora/run.sh [TITAN_BIN=build/titan] [STEPS=3] [LAYERS=28]
# LAYERS < 28 runs a shallower model of the same widths (for a machine with less memory). PEFT=0
# skips the PEFT row (at 28 layers PyTorch eager needs more than 18 GB: killed on a 24 GB machine).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
titan=${1:-$src/build/titan}
steps=${2:-3}
layers=${3:-28}
py=${TITAN_ORACLE_PYTHON:-$src/.venv-oracle/bin/python}
[ -x "$py" ] || py=/work/venv-oracle/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
jemalloc=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)

run_titan() {  # $1 label, then extra flags
  local label=$1; shift
  /usr/bin/time -f "%M" -o "$out/$label.rss" "$titan" train --config bench/lora/bench.toml --job.dump_folder "$out/$label" \
    --training.steps "$steps" --model.n_layers "$layers" "$@" > "$out/$label.log" 2>&1 || { cat "$out/$label.log"; exit 1; }
  local pred
  pred=$("$titan" info --config bench/lora/bench.toml --model.n_layers "$layers" "$@" --json |
         "$py" -c "import json,sys; print(json.load(sys.stdin)['step_peak_bytes'] / 2**30)")
  "$py" - "$out/$label" "$out/$label.rss" "$pred" <<'PY'
import json, sys
run, rss, pred = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = json.load(open(run + "/summary.json"))
peak = max(json.loads(l).get("memory_peak_gib", 0) for l in open(run + "/metrics.jsonl"))
print(s["median_tps"], peak, pred, int(open(rss).read().split()[-1]) / 2**20)
PY
}
run_peft() {  # $1 rank (0: full fine-tuning)
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${jemalloc:+LD_PRELOAD=$jemalloc} "$py" bench/lora/peft_baseline.py \
    --rank "$1" --layers "$layers" --steps "$((steps - 1))" --warmup 1 --threads 2 | tail -1 |
    "$py" -c "import json,sys; s=json.loads(sys.stdin.read()); print(s['tokens_per_s'], s['max_rss_gib'])"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); layers $layers, seq 2048, batch 1, 2 threads"
read tl ml pl rl < <(run_titan lora --lora.enable true)
if [ "${PEFT:-1}" = 0 ]; then pt=nan pr=nan; else read pt pr < <(run_peft 16); fi
read tf mf pf rf < <(run_titan full)
"$py" - "$tl" "$ml" "$pl" "$rl" "$pt" "$pr" "$tf" "$mf" "$pf" "$rf" <<'PY'
import sys
tl, ml, pl, rl, pt, pr, tf, mf, pf, rf = map(float, sys.argv[1:])
print(f"{'run':30} {'tokens/s':>9} {'peak GiB':>9} {'predicted':>10} {'pred/peak':>9} {'max RSS GiB':>12}")
print(f"{'titan full fine-tuning':30} {tf:9.1f} {mf:9.2f} {pf:10.2f} {pf / mf:9.3f} {rf:12.2f}")
print(f"{'titan LoRA r16':30} {tl:9.1f} {ml:9.2f} {pl:10.2f} {pl / ml:9.3f} {rl:12.2f}")
print(f"{'PEFT LoRA r16 (PyTorch eager)':30} {pt:9.1f} {'':>9} {'':>10} {'':>9} {pr:12.2f}")
print(f"titan LoRA vs full: {tl / tf:.2f}x tokens/s, {ml / mf:.2f}x peak memory; titan LoRA vs PEFT: {tl / pt:.2f}x tokens/s")
PY
