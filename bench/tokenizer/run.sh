#!/usr/bin/env bash
# Tokenizer speed, side by side: `titan encode --jsonl` vs HF `tokenizers` encode_batch on the same
# corpus (the bundled c4 samples, repeated REPEAT times), single thread and all threads.
#   usage: bench/tokenizer/run.sh [TITAN_BINARY=build/titan] [REPEAT=4]
# titan's time is the wall time of the command minus its time on empty input (tokenizer loading),
# so it still includes JSON parsing and writing the ids; HF's time is encode_batch alone, best of 3.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
titan="${1:-$root/build/titan}"
repeat="${2:-4}"
py="${PYTHON:-/work/venv-oracle/bin/python}"
tokdir="$root/assets/qwen3-tokenizer"
corpus="$(mktemp)"; trap 'rm -f "$corpus"' EXIT
for i in $(seq "$repeat"); do cat "$root"/data/c4_sample/c4_en_train_first1000.jsonl "$root"/data/c4_sample/c4_demo_300.jsonl; done > "$corpus"
bytes=$(stat -c %s "$corpus")
nproc=$(nproc)
now() { date +%s.%N; }
# Best of 3 wall times of a titan command reading the corpus.
titan_time() {
  local best=""
  for _ in 1 2 3; do
    local t0=$(now); "$titan" encode --tokenizer "$tokdir" --jsonl --threads "$1" < "$2" > /dev/null; local t1=$(now)
    best=$(echo "$t0 $t1 $best" | awk '{d=$2-$1; if ($3=="" || d<$3) print d; else print $3}')
  done
  echo "$best"
}
tokens=$("$titan" encode --tokenizer "$tokdir" --jsonl --threads "$nproc" < "$corpus" | wc -w)
echo "corpus: $(awk -v b="$bytes" 'BEGIN{printf "%.1f MB", b/1e6}') of JSON lines, $tokens tokens; $nproc hardware threads"
printf "%-28s %8s %12s %8s\n" "tokenizer" "threads" "tokens/s" "ratio"
for threads in 1 "$nproc"; do
  load=$(titan_time "$threads" /dev/null)
  total=$(titan_time "$threads" "$corpus")
  t_rate=$(awk -v n="$tokens" -v t="$total" -v l="$load" 'BEGIN{printf "%.0f", n/(t-l)}')
  read -r hf_tokens hf_time < <(RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=true "$py" "$root/bench/tokenizer/hf_baseline.py" "$tokdir/tokenizer.json" "$corpus")
  [ "$hf_tokens" = "$tokens" ] || echo "WARNING: token counts differ (titan $tokens, HF $hf_tokens)"
  h_rate=$(awk -v n="$hf_tokens" -v t="$hf_time" 'BEGIN{printf "%.0f", n/t}')
  printf "%-28s %8s %12s %8s\n" "HF tokenizers encode_batch" "$threads" "$h_rate" "1.00"
  printf "%-28s %8s %12s %8s\n" "titan encode --jsonl" "$threads" "$t_rate" "$(awk -v a="$t_rate" -v b="$h_rate" 'BEGIN{printf "%.2f", a/b}')"
done
