#!/usr/bin/env bash
# Training from real dataset layouts (debugmodel, 1 layer, seq 32, global batch 4):
#  - a C4-style shard set (en/c4-train.NNNNN-of-00003.json.gz, by a glob), streamed: the step-6
#    checkpoint of a 1-rank run resumes on 1 rank bit-exactly and on 2 ranks (mpirun) within the
#    data-parallel tolerance, continuing mid-file with the next token;
#  - streamed and tokenized-first (the token cache) runs of the same data give the same losses;
#  - a Parquet dataset folder in the hub's layout (data/train-0000N-of-00002.parquet), text and
#    chat (messages list<struct<role, content>>), written by pyarrow (skipped without it);
#  - a dataset_mix of the two, with per-dataset token counts in metrics.jsonl;
#  - a .jsonl.zst named as a dataset is read as JSON lines, and an unknown extension is an error;
#  - chat data (JSON lines, gzip) streamed trains on the same rows as when encoded first, and its
#    step-6 checkpoint resumes on 1 rank bit-exactly and on 2 ranks at the same data position;
#  - the data position saved after a 2-rank resume is the uninterrupted run's, byte for byte.
set -uo pipefail
titan=$1 src=$2
source "$src/tests/cli/distributed/env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 TITAN_CACHE_DIR="$work/cache"
common=(--config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --training.local_batch_size 1
        --training.global_batch_size 4 --training.steps 12 --metrics.log_freq 1 --metrics.enable_tensorboard false
        --checkpoint.last_save_in_hf false --lr_scheduler.warmup_steps 2 --compute.threads 1
        --parallelism.data_parallel_shard_degree -1 --checkpoint.keep_latest_k 0)
SECONDS=0

# A C4-style shard set from the bundled sample.
mkdir -p "$work/c4/en"
split -n l/3 -d -a 1 "$src/data/c4_sample/c4_en_train_first1000.jsonl" "$work/c4/part"
for i in 0 1 2; do gzip -c "$work/c4/part$i" > "$work/c4/en/c4-train.0000$i-of-00003.json.gz"; done
c4="$work/c4/en/c4-train.*-of-00003.json.gz"

run stream 1 --training.dataset_path "$c4" --training.dataset_streaming on --checkpoint.enable true --checkpoint.interval 6
grep -q "data: streaming 1 dataset" "$work/stream.log" || fail "the run did not stream: $(head -5 "$work/stream.log")"
run cached 1 --training.dataset_path "$c4" --training.dataset_streaming off --checkpoint.enable false
echo -n "streamed vs tokenized first: "; compare "$work/stream/metrics.jsonl" "$work/cached/metrics.jsonl" 0 ||
  fail "streaming changed the tokens"

resume_from() {  # resume_from NAME NP FROM ARGS...: run FROM's step-6 checkpoint, resumed with ARGS
  local name=$1 np=$2 from=$3; shift 3
  mkdir -p "$work/$name/checkpoint"
  cp -r "$work/$from/checkpoint/step-6" "$work/$name/checkpoint/"
  run "$name" "$np" "$@" --checkpoint.enable true --checkpoint.interval 100
  grep -q "resumed from .*step-6" "$work/$name.log" || fail "$name did not resume"
  [ "$(curve "$work/$name/metrics.jsonl" | head -1 | cut -d' ' -f1)" = 7 ] || fail "$name does not start at step 7"
}
# data_position RUN: the data state of RUN's step-12 checkpoint (the stream position, hex)
data_position() { grep -o '"data_state_hex": *"[0-9a-f]*"' "$work/$1/checkpoint/step-12/state.json"; }
# resumes RUN ARGS...: RUN's step-6 checkpoint resumed on 1 rank (bit-exact losses) and, with
# mpirun, on 2 ranks (losses within the data-parallel tolerance, the same data position after).
resumes() {
  local from=$1; shift
  resume_from "$from-again" 1 "$from" "$@"
  echo -n "$from: resume on 1 rank vs uninterrupted: "
  compare "$work/$from/metrics.jsonl" "$work/$from-again/metrics.jsonl" 0 || fail "$from: 1-rank resume is not bit-exact"
  if command -v mpirun > /dev/null; then
    resume_from "$from-two" 2 "$from" "$@"
    echo -n "$from: resume on 2 ranks vs uninterrupted: "
    compare "$work/$from/metrics.jsonl" "$work/$from-two/metrics.jsonl" || fail "$from: 2-rank resume"
    [ -n "$(data_position "$from")" ] && [ "$(data_position "$from")" = "$(data_position "$from-two")" ] ||
      fail "$from: the 2-rank resume ends at another data position: $(data_position "$from-two") vs $(data_position "$from")"
    echo "$from: the 2-rank resume ends at the uninterrupted run's data position"
  else
    echo "mpirun not found; the 2-rank resume is skipped"
  fi
}
resumes stream --training.dataset_path "$c4" --training.dataset_streaming on

# Chat data streamed: the same rows as encoding it first, resumable at another rank count.
"$titan" data make-arithmetic --output "$work/arith" --max-operand 30 --valid 10 > "$work/arith.log" 2>&1 ||
  fail "make-arithmetic: $(tail -2 "$work/arith.log")"
gzip -c "$work/arith/train.jsonl" > "$work/arith/train.jsonl.gz"
chat=(--training.dataset_format chat --training.dataset_path "$work/arith/train.jsonl.gz" --training.seq_len 64)
run chat_stream 1 "${chat[@]}" --training.dataset_streaming on --checkpoint.enable true --checkpoint.interval 6
grep -q "chat data: streaming chat conversations" "$work/chat_stream.log" || fail "chat data was not streamed: $(grep 'chat data' "$work/chat_stream.log")"
run chat_whole 1 "${chat[@]}" --training.dataset_streaming off --checkpoint.enable false
grep -q "chat data: 951 conversations" "$work/chat_whole.log" || fail "chat data encoded first: $(grep 'chat data' "$work/chat_whole.log")"
echo -n "chat streamed vs encoded first: "
compare "$work/chat_stream/metrics.jsonl" "$work/chat_whole/metrics.jsonl" 0 || fail "chat streaming changed the rows"
resumes chat_stream "${chat[@]}" --training.dataset_streaming on

# Compressed JSON lines by their extension; unknown extensions are errors.
split -n l/2 -d -a 1 "$work/c4/part0" "$work/c4/z"
zstd -q "$work/c4/z0" -o "$work/c4/a.jsonl.zst" 2> /dev/null || python3 -c "import sys; sys.exit(1)" || true
if [ -f "$work/c4/a.jsonl.zst" ]; then
  "$titan" train "${common[@]}" --training.steps 1 --training.dataset_path "$work/c4/a.jsonl.zst" --checkpoint.enable false \
    --job.dump_folder "$work/zst" > "$work/zst.log" 2>&1 || fail "a .jsonl.zst dataset: $(tail -3 "$work/zst.log")"
fi
cp "$work/c4/z1" "$work/c4/b.jsonl.xz"
if "$titan" train "${common[@]}" --training.steps 1 --training.dataset_path "$work/c4/b.jsonl.xz" --checkpoint.enable false \
    --job.dump_folder "$work/xz" > "$work/xz.log" 2>&1; then fail "an .xz file was trained on"; fi
grep -q "b.jsonl.xz: not a dataset format this build reads" "$work/xz.log" || fail "unknown format error: $(tail -2 "$work/xz.log")"

# Parquet dataset folders, written by pyarrow.
py=/work/venv/bin/python
[ -x "$py" ] || py=python3
if ! "$py" -c "import pyarrow" 2> /dev/null; then
  echo "pyarrow not found; the Parquet runs are skipped"
  exit 0
fi
"$py" - "$src/data/c4_sample/c4_en_train_first1000.jsonl" "$work" << 'PY' || fail "pyarrow could not write the fixtures"
import json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
src, work = sys.argv[1], sys.argv[2]
texts = [json.loads(l)["text"] for l in open(src)]
os.makedirs(f"{work}/pq/data", exist_ok=True)
half = len(texts) // 2
for i, part in enumerate([texts[:half], texts[half:]]):
    pq.write_table(pa.table({"id": list(range(len(part))), "text": part}), f"{work}/pq/data/train-0000{i}-of-00002.parquet",
                   compression=["snappy", "zstd"][i], row_group_size=200)
os.makedirs(f"{work}/chat/data", exist_ok=True)
conv = [[{"role": "user", "content": f"What is {a} + {b}?"}, {"role": "assistant", "content": str(a + b)}]
        for a in range(20) for b in range(10)]
pq.write_table(pa.table({"messages": conv}), f"{work}/chat/data/train-00000-of-00001.parquet", row_group_size=64)
PY
run parquet 1 --training.dataset_path "$work/pq" --training.dataset_streaming on --checkpoint.enable false
run parquet_cached 1 --training.dataset_path "$work/pq" --training.dataset_streaming off --checkpoint.enable false
echo -n "Parquet folder, streamed vs tokenized first: "
compare "$work/parquet/metrics.jsonl" "$work/parquet_cached/metrics.jsonl" 0 || fail "Parquet streaming"
run chat 1 --training.dataset_path "$work/chat" --training.dataset_format chat --training.seq_len 64 --checkpoint.enable false
grep -q "chat data: 200 conversations" "$work/chat.log" || fail "chat Parquet: $(grep 'chat data' "$work/chat.log")"

# A mixture of the two text datasets, 3:1, counted per dataset.
run mix 1 --training.dataset_mix "$c4=3,$work/pq=1" --checkpoint.enable false
last=$(tail -1 "$work/mix/metrics.jsonl")
echo "$last" | grep -q '"dataset_tokens":{' || fail "no dataset_tokens in metrics.jsonl: $last"
"$py" - "$last" "$c4" "$work/pq" << 'PY' || fail "mixture counts"
import json, sys
d = json.loads(sys.argv[1])["dataset_tokens"]
a, b = d[sys.argv[2]], d[sys.argv[3]]
total = 12 * 4 * 33
assert a + b == total, (a, b, total)
assert a > 0 and b > 0, (a, b)
print(f"mixture: {a} tokens from c4, {b} from the Parquet folder")
PY
echo "data_streaming: all checks passed in ${SECONDS}s"
