#!/usr/bin/env bash
# Before/after benchmark of generation: two titan binaries run alternately (A B A B ...) on one
# model folder, f32 and bf16 weights, a random prompt, greedy; prints each round's prefill and
# decode tokens/s (titan generate's own line), then the medians and the ratios new/old. Load that
# drifts during the run hits both alike.
#   usage: bench/generate/compare.sh OLD_TITAN NEW_TITAN MODEL_DIR [ROUNDS=3] [PROMPT=512] [NEW=128]
#   (MODEL_DIR: e.g. bench/generate/make_model.py's folder; THREADS=N, default 2)
set -euo pipefail
old=${1:?usage: compare.sh OLD_TITAN NEW_TITAN MODEL_DIR [ROUNDS] [PROMPT] [NEW]}
new=${2:?usage: compare.sh OLD_TITAN NEW_TITAN MODEL_DIR [ROUNDS] [PROMPT] [NEW]}
model=${3:?usage: compare.sh OLD_TITAN NEW_TITAN MODEL_DIR [ROUNDS] [PROMPT] [NEW]}
rounds=${4:-3}
plen=${5:-512}
ntok=${6:-128}
threads=${THREADS:-2}
for b in "$old" "$new"; do [ -x "$b" ] || { echo "compare.sh: $b: not an executable" >&2; exit 2; }; done
[ -f "$model/config.json" ] || { echo "compare.sh: $model: no config.json (not a model folder)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$model/config.json" | head -1)
prompt=$(awk -v n="$plen" -v v="$vocab" 'BEGIN { srand(1); for (i = 0; i < n; ++i) printf "%d ", int(rand() * v) }')

run() {  # $1 binary, $2 dtype -> "prefill decode"
  TITAN_NUM_THREADS=$threads "$1" generate --model "$model" --prompt-ids "$prompt" --max-new-tokens "$ntok" \
    --temperature 0 --dtype "$2" --json > "$out/gen.json" 2> "$out/gen.err" || { cat "$out/gen.err" >&2; exit 1; }
  sed -n 's/.*prefill \([0-9.]*\) tokens\/s, decode \([0-9.]*\) tokens\/s.*/\1 \2/p' "$out/gen.err"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for dt in f32 bf16; do
  : > "$out/old.$dt"; : > "$out/new.$dt"
  for r in $(seq "$rounds"); do
    read -r po do_ < <(run "$old" "$dt")
    read -r pn dn < <(run "$new" "$dt")
    echo "$po $do_" >> "$out/old.$dt"; echo "$pn $dn" >> "$out/new.$dt"
    printf '%-4s round %d: old prefill %7.1f decode %6.2f | new prefill %7.1f decode %6.2f tok/s\n' "$dt" "$r" "$po" "$do_" "$pn" "$dn"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
printf '%-5s %13s %13s %7s %12s %12s %7s\n' dtype "old prefill" "new prefill" ratio "old decode" "new decode" ratio
for dt in f32 bf16; do
  po=$(cut -d' ' -f1 "$out/old.$dt" | median); pn=$(cut -d' ' -f1 "$out/new.$dt" | median)
  do_=$(cut -d' ' -f2 "$out/old.$dt" | median); dn=$(cut -d' ' -f2 "$out/new.$dt" | median)
  printf '%-5s %13.1f %13.1f %6.3fx %12.2f %12.2f %6.3fx\n' "$dt" "$po" "$pn" "$(awk -v a="$pn" -v b="$po" 'BEGIN{print a/b}')" \
    "$do_" "$dn" "$(awk -v a="$dn" -v b="$do_" 'BEGIN{print a/b}')"
done
