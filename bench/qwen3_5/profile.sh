#!/usr/bin/env bash
# Where titan's training step spends its CPU time: `perf record` (sampling, 250 Hz, no call graphs)
# of `titan train` on bench.toml, samples grouped by symbol into the gated delta rule
# (src/ops/gated_delta/cpu.cpp), the causal conv, GEMMs (oneDNN's JIT code), optimizer and
# clipping, cross-entropy, the OpenMP runtime, the kernel, and the setup's weight init (which the
# run includes: it is listed apart, and the shares of the step are given without it).
#   usage: bench/qwen3_5/profile.sh [TITAN_BIN=build/titan] [STEPS=3]   (needs perf; PERF_DATA=FILE
#   reuses a recording instead of running)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
titan=${1:-$src/build/titan}
steps=${2:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
data=${PERF_DATA:-$out/perf.data}
cd "$src"
if [ -z "${PERF_DATA:-}" ]; then
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  perf record -F 250 -o "$data" -- "$titan" train --config "$here/bench.toml" --job.dump_folder "$out/run" \
    --training.steps "$steps" --metrics.perf_warmup_steps 1 > "$out/train.log" 2>&1 || { cat "$out/train.log"; exit 1; }
  grep '^summary' "$out/train.log"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
perf report -i "$data" --stdio --sort dso,symbol -F overhead,dso,sym 2>/dev/null | grep -v '^#' | grep -v '^$' > "$out/report.txt"
python3 - "$out/report.txt" <<'PY'
import collections, re, sys
cats = collections.Counter()
for line in open(sys.argv[1]):
    m = re.match(r'\s*([\d.]+)%\s+(\S+(?: tid \d+)?)\s+\[.\]\s+(.*)', line)
    if not m:
        continue
    p, dso, sym = float(m.group(1)), m.group(2), m.group(3).strip()
    if any(s in sym for s in ('trunc_normal', 'log_fma', 'cos_fma', 'log@plt', 'cos@plt', 'Philox')):
        c = 'setup: weight init (not the step)'
    elif dso.startswith('[JIT]') or 'dnnl' in dso:
        c = 'GEMMs (oneDNN JIT kernels)'
    elif any(s in sym for s in ('head_backward', 'chunk_state', 'chunk_forward', 'GatedDeltaOptions')):
        c = 'gated delta rule (chunked, fwd + bwd)'
    elif 'pre_row' in sym or re.search(r'backward\(titan::ExecContext const&, titan::Tensor const&, titan::Tensor const&, long const\*', sym) \
            or re.search(r'forward\(titan::ExecContext const&, titan::Tensor const&, titan::Tensor const&, long const\*', sym):
        c = 'causal conv1d'
    elif 'attention::' in sym:
        c = 'attention (gated full-attention layer)'
    elif 'AdamW' in sym or 'foreach' in sym or 'adamw' in sym:
        c = 'optimizer + clipping'
    elif 'ce_detail' in sym or 'cross_entropy' in sym:
        c = 'cross-entropy'
    elif dso == '[kernel.kallsyms]':
        c = 'kernel (page faults, scheduling)'
    elif 'libgomp' in dso:
        c = 'OpenMP runtime (waits)'
    elif 'memset' in sym or 'memmove' in sym or 'memcpy' in sym:
        c = 'memset / memcpy'
    else:
        c = 'other (elementwise, norms, data, ...)'
    cats[c] += p
setup = cats['setup: weight init (not the step)']
print(f"{'share of samples':>17} {'without setup':>14}  what")
for c, p in cats.most_common():
    rest = '' if c.startswith('setup') else f"{100 * p / (100 - setup):13.1f}%"
    print(f"{p:16.1f}% {rest:>14}  {c}")
PY
