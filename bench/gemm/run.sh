#!/usr/bin/env bash
# GEMM candidates side by side on the model's shapes, 2 threads (see RESULTS.md).
#   bash bench/gemm/run.sh [BUILD_DIR] [--quick]
#   env: ROUNDS (default 3), BUDGET seconds per backend and shape per round (default 0.25),
#        NICE (default 0; -20 as root gives the benchmark most of a shared machine).
# Builds gemm_bench (-DTITAN_BENCH=ON), measures the machine's FMA / bf16-dot peak before and
# after, and prints one markdown table of GFLOP/s. The machine this was written on is shared,
# so every backend runs in ROUNDS separate rounds spread over time and each cell is the best of
# its rounds (each round itself takes the best call): background load only ever slows a call.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build-bench}
arg=${2:-${BUDGET:-0.25}}
rounds=${ROUNDS:-3}
NICE=${NICE:-0}
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTITAN_BENCH=ON -DTITAN_TESTS=OFF >/dev/null
cmake --build "$build" --target gemm_bench -j2 >/dev/null
bin=$build/bench/gemm/gemm_bench
export OMP_NUM_THREADS=2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), OMP_NUM_THREADS=2, load $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n "$NICE" "$bin" peak

# Joins one round's per-backend tables on the shape columns (the first five).
join_tables() {
  awk -F'|' '
    /^\| / {
      key = $2 "|" $3 "|" $4 "|" $5 "|" $6
      if (!(key in seen)) { seen[key] = 1; order[++rows] = key }
      for (i = 7; i < NF; i++) val[key] = val[key] $i "|"
    }
    END { for (r = 1; r <= rows; r++) print "|" order[r] "|" val[order[r]] }' "$@"
}

for r in $(seq 1 "$rounds"); do
  files=()
  run() {  # run NAME [ENV...] BIN BACKENDS
    local name=$1; shift
    nice -n "$NICE" env "$@" "$arg" >"$tmp/$name.md" 2>>"$tmp/stderr.log"
    [ "$r" = 1 ] && grep '^#' "$tmp/$name.md" || true
    files+=("$tmp/$name.md")
  }
  # The oneDNN variants and titan's own cpu kernel share one process, interleaved call by call.
  run dnnl "$bin" dnnl_sgemm,dnnl_matmul_f32,titan_f32,dnnl_matmul_bf16,titan_bf16
  run openblas_haswell OPENBLAS_CORETYPE=Haswell "$bin" openblas
  run openblas_auto -u OPENBLAS_CORETYPE "$bin" openblas
  run blis "$bin" blis
  sed -i 's/| openblas |/| openblas f32 (CORETYPE=Haswell) |/' "$tmp/openblas_haswell.md"
  sed -i 's/| openblas |/| openblas f32 (CORETYPE unset) |/' "$tmp/openblas_auto.md"
  sed -i 's/| blis |/| blis f32 |/' "$tmp/blis.md"
  join_tables "${files[@]}" >"$tmp/round$r.md"
done
grep -h 'dnnl impl' "$tmp/stderr.log" | sort | uniq -c | sed 's/^/# /'

# Cell-wise best over the rounds; the header row comes from the first round.
awk -F'|' '
  FNR == 1 { f++ }
  {
    if (f == 1) { row[FNR] = $0; n = FNR }
    if (FNR > 1) for (i = 7; i < NF; i++) if ($i + 0 > best[FNR, i] + 0) best[FNR, i] = $i
    cols = NF
  }
  END {
    print row[1]
    sep = row[1]; gsub(/[^|]+/, "---", sep); print sep
    for (r = 2; r <= n; r++) {
      split(row[r], c, "|")
      line = "|" c[2] "|" c[3] "|" c[4] "|" c[5] "|" c[6] "|"
      for (i = 7; i < cols; i++) line = line " " best[r, i] + 0 " |"
      print line
    }
  }' "$tmp"/round*.md
echo "# after: load $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n "$NICE" "$bin" peak
nice -n "$NICE" "$bin" convert "$arg"
