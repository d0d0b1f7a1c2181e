#!/usr/bin/env bash
# The data path, side by side: read and tokenize a generated Parquet file and a generated
# .jsonl.gz (C4-like text: the bundled c4 samples repeated to SIZE_MB, not committed) with
#   titan tokenize --threads T   (reader + tokenizer + token file writer, wall time minus the
#                                 tokenizer's load time on a one-line file)
#   datasets + tokenizers        (load_dataset(streaming=True) + encode_batch, RAYON_NUM_THREADS=T)
# in tokens/s per core, T = 1 and all cores; then the token rate a streamed training run's reader
# sustains against what its steps consume (the data share of the step line).
#   usage: bench/data/run.sh [TITAN_BINARY=build/titan] [SIZE_MB=1000]
#   BASELINE_MAX_SECONDS=S: the Python side reads each file for about S seconds only (its rate over
#   the file's first part); titan always reads the whole file.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
titan="${1:-$root/build/titan}"
size_mb="${2:-1000}"
py="${PYTHON:-/work/venv/bin/python}"
tok="$root/assets/qwen3-tokenizer"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
nproc=$(nproc)
now() { date +%s.%N; }

"$py" - "$root/data/c4_sample" "$work" "$size_mb" << 'PY'
import gzip, json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
src, work, size_mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
texts = [json.loads(l)["text"] for f in ("c4_en_train_first1000.jsonl", "c4_demo_300.jsonl") for l in open(f"{src}/{f}")]
want, out, n, i = size_mb * 1e6, [], 0, 0
while n < want:
    t = texts[i % len(texts)] + (f" ({i // len(texts)})" if i >= len(texts) else "")
    out.append(t); n += len(t.encode()); i += 1
with gzip.open(f"{work}/c4.jsonl.gz", "wt", compresslevel=6) as f:
    for t in out: f.write(json.dumps({"text": t, "timestamp": "2019-04-25T12:57:54Z", "url": "https://example.com"}) + "\n")
pq.write_table(pa.table({"text": out}), f"{work}/c4.parquet", compression="snappy", row_group_size=20000)
print(f"corpus: {len(out)} documents, {n / 1e6:.1f} MB of text; c4.jsonl.gz {os.path.getsize(f'{work}/c4.jsonl.gz') / 1e6:.1f} MB, "
      f"c4.parquet {os.path.getsize(f'{work}/c4.parquet') / 1e6:.1f} MB")
PY
echo '{"text": "x"}' > "$work/one.jsonl"
titan_time() {  # titan_time THREADS FILE: seconds of read + tokenize + write, tokenizer load excluded
  local t0 t1 t2 t3
  t0=$(now); "$titan" tokenize --tokenizer "$tok" --input "$work/one.jsonl" --output "$work/one.bin" --threads "$1" --quiet 2> /dev/null; t1=$(now)
  t2=$(now); "$titan" tokenize --tokenizer "$tok" --input "$2" --output "$work/out.bin" --threads "$1" --quiet 2> "$work/tok.log"; t3=$(now)
  awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN{printf "%.3f", (d-c)-(b-a)}'
}
printf "%-34s %-12s %7s %14s %14s %7s\n" "reader" "file" "threads" "tokens/s" "per core" "ratio"
for file in c4.parquet c4.jsonl.gz; do
  kind=json; [ "$file" = c4.parquet ] && kind=parquet
  for threads in 1 "$nproc"; do
    read -r docs hf_tokens hf_time capped < <(RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=true "$py" "$root/bench/data/python_baseline.py" "$tok/tokenizer.json" "$kind" "$work/$file")
    t=$(titan_time "$threads" "$work/$file")
    tokens=$(sed -nE 's/.*, ([0-9]+) tokens incl. separators.*/\1/p' "$work/tok.log")
    if [ "$capped" = 1 ]; then
      echo "(Python: the first $docs documents, $hf_tokens tokens in ${hf_time%.*} s, BASELINE_MAX_SECONDS=$BASELINE_MAX_SECONDS; titan: the whole file, $tokens tokens in ${t%.*} s)"
    else
      [ "$tokens" = "$hf_tokens" ] || echo "WARNING: token counts differ (titan $tokens, Python $hf_tokens)"
    fi
    h=$(awk -v n="$hf_tokens" -v t="$hf_time" 'BEGIN{printf "%.0f", n/t}')
    r=$(awk -v n="$tokens" -v t="$t" 'BEGIN{printf "%.0f", n/t}')
    printf "%-34s %-12s %7s %14s %14s %7s\n" "datasets + tokenizers" "$file" "$threads" "$h" "$((h / threads))" "1.00"
    printf "%-34s %-12s %7s %14s %14s %7s\n" "titan tokenize" "$file" "$threads" "$r" "$((r / threads))" \
      "$(awk -v a="$r" -v b="$h" 'BEGIN{printf "%.2f", a/b}')"
  done
done

# A streamed training run on the Parquet file: the data share of its steps (the reader runs
# ahead on its own threads; the step waits only when the queue is empty).
"$titan" train --config "$root/recipes/debug.toml" --training.dataset_path "$work/c4.parquet" --training.dataset_streaming on \
  --training.steps 20 --checkpoint.enable false --checkpoint.last_save_in_hf false --metrics.enable_tensorboard false \
  --metrics.log_freq 5 --job.dump_folder "$work/run" > "$work/train.log" 2>&1
grep -E "^step:|summary" "$work/train.log" | tail -4
share() {  # share NAME METRICS: the data share of a run's steady steps
"$py" - "$1" "$2" << 'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if '"tps"' in l]
steady = [r for r in rows if not r.get("warmup")]
print(f"{sys.argv[1]}: {len(rows)} logged steps, data share of the steady steps: "
      f"max {max(r['data_pct'] for r in steady):.2f}%, consumption {sum(r['tps'] for r in steady) / len(steady):.0f} tokens/s")
PY
}
share "streamed training (text, Parquet)" "$work/run/metrics.jsonl"

# The SFT recipe with its chat data streamed (the template and the tokenizer run on the reader's
# threads while the small debug-chat model's short steps consume rows quickly).
"$titan" data make-arithmetic --output "$work/arith" > /dev/null
"$titan" train --config "$root/recipes/sft_arithmetic.toml" --training.dataset_path "$work/arith/train.jsonl" \
  --training.dataset_streaming on --validation.enable false --training.steps 100 --checkpoint.enable false \
  --checkpoint.last_save_in_hf false --metrics.enable_tensorboard false --metrics.log_freq 10 \
  --job.dump_folder "$work/sft" > "$work/sft.log" 2>&1
grep -E "chat data" "$work/sft.log" | head -1
share "streamed training (chat, SFT recipe)" "$work/sft/metrics.jsonl"
