#!/usr/bin/env bash
# Before/after benchmark of the training step: two titan binaries, run alternately (A B A B ...)
# on the bench model in f32 and with bf16 matmuls, so load that drifts during the run hits both
# alike. Prints per-round tokens/s and peak memory, then median tokens/s and the ratio new/old.
#   usage: bench/train_step/compare.sh OLD_TITAN NEW_TITAN [ROUNDS=3] [STEPS=8]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
old=${1:?usage: compare.sh OLD_TITAN NEW_TITAN [ROUNDS] [STEPS]}
new=${2:?usage: compare.sh OLD_TITAN NEW_TITAN [ROUNDS] [STEPS]}
rounds=${3:-3}
steps=${4:-8}
for b in "$old" "$new"; do [ -x "$b" ] || { echo "compare.sh: $b: not an executable" >&2; exit 2; }; done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"

run() {  # $1 binary, $2 precision, $3 label -> "tokens/s peak_GiB"
  /usr/bin/time -f "%M" -o "$out/$3.rss" "$1" train --config bench/train_step/bench.toml --job.dump_folder "$out/$3" \
    --training.steps "$steps" --training.mixed_precision_param "$2" > "$out/$3.log" 2>&1 || { cat "$out/$3.log" >&2; exit 1; }
  local tps
  tps=$(grep -o '"median_tps": *[0-9.e+-]*' "$out/$3/summary.json" | grep -o '[0-9.e+-]*$')
  echo "$tps $(awk '{printf "%.3f", $1 / 1048576}' "$out/$3.rss")"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for prec in float32 bfloat16; do
  : > "$out/old.$prec"; : > "$out/new.$prec"
  for r in $(seq "$rounds"); do
    read -r to mo < <(run "$old" "$prec" "old-$prec-$r")
    read -r tn mn < <(run "$new" "$prec" "new-$prec-$r")
    echo "$to $mo" >> "$out/old.$prec"; echo "$tn $mn" >> "$out/new.$prec"
    printf '%-9s round %d: old %8.1f tok/s %6.3f GiB | new %8.1f tok/s %6.3f GiB\n' "$prec" "$r" "$to" "$mo" "$tn" "$mn"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
printf '%-9s %12s %12s %7s %14s %14s\n' precision "old tok/s" "new tok/s" ratio "old peak GiB" "new peak GiB"
for prec in float32 bfloat16; do
  to=$(cut -d' ' -f1 "$out/old.$prec" | median); tn=$(cut -d' ' -f1 "$out/new.$prec" | median)
  mo=$(cut -d' ' -f2 "$out/old.$prec" | median); mn=$(cut -d' ' -f2 "$out/new.$prec" | median)
  printf '%-9s %12.1f %12.1f %6.3fx %14.3f %14.3f\n' "$prec" "$to" "$tn" "$(awk -v a="$tn" -v b="$to" 'BEGIN{print a/b}')" "$mo" "$mn"
done
