#!/usr/bin/env bash
# GEMM candidates side by side on the model's shapes, 2 threads (see RESULTS.md).
#   bash bench/gemm/run.sh [BUILD_DIR] [--quick]
# Builds gemm_bench (-DTITAN_BENCH=ON), measures the machine's FMA / bf16-dot peak before and
# after, runs each backend in its own process, and prints one markdown table of GFLOP/s.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build-bench}
quick=${2:-}
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTITAN_BENCH=ON -DTITAN_TESTS=OFF >/dev/null
cmake --build "$build" --target gemm_bench -j2 >/dev/null
bin=$build/bench/gemm/gemm_bench
export OMP_NUM_THREADS=2
# The machine is shared: NICE=-20 (as root) gives the benchmark most of the CPU against nice-0 load.
NICE=${NICE:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) load: $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n "$NICE" "$bin" peak
files=()
run() {  # run NAME [ENV...] BACKENDS
  local name=$1; shift
  nice -n "$NICE" env "$@" $quick >"$tmp/$name.md" 2>>"$tmp/stderr.log"
  grep '^#' "$tmp/$name.md" || true
  files+=("$tmp/$name.md")
}
# The dnnl variants and titan's own cpu kernel share one process and are interleaved call by call.
run dnnl "$bin" dnnl_sgemm,dnnl_matmul_f32,titan_f32,dnnl_matmul_bf16,titan_bf16
run openblas_haswell OPENBLAS_CORETYPE=Haswell "$bin" openblas
run openblas_auto -u OPENBLAS_CORETYPE "$bin" openblas
run blis "$bin" blis
grep -h 'dnnl impl' "$tmp/stderr.log" | sort | uniq -c | sed 's/^/# /'
sed -i 's/| openblas |/| openblas (CORETYPE=Haswell) |/' "$tmp/openblas_haswell.md"
sed -i 's/| openblas |/| openblas (CORETYPE unset) |/' "$tmp/openblas_auto.md"

# Join the per-backend tables on the shape columns (the first five).
awk -F'|' '
  FNR == 1 { f++ }
  /^\| / {
    key = $2 "|" $3 "|" $4 "|" $5 "|" $6
    if (!(key in seen)) { seen[key] = 1; order[++rows] = key }
    for (i = 7; i < NF; i++) val[key] = val[key] $i "|"
  }
  END {
    for (r = 1; r <= rows; r++) {
      line = "|" order[r] "|" val[order[r]]
      print line
      if (r == 1) { sep = line; gsub(/[^|]+/, "---", sep); print sep }
    }
  }' "${files[@]}"
echo "# after: load $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n "$NICE" "$bin" peak
nice -n "$NICE" "$bin" convert $quick
