#!/usr/bin/env bash
# A named pipe given where a GGUF, a dataset, a tokenizer or a model folder's file is expected is
# refused before it is opened (open() of a FIFO without a writer blocks for ever): one line
# "<path>: is not a regular file (a named pipe)", a non-zero status, well inside the timeout.
# And the model folder's ids: a pad_token_id outside the vocabulary names its file.
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
check() {  # check COMMAND...: ends in time with one line naming a named pipe
  local out rc
  out=$(timeout 30 "$@" 2>&1 < /dev/null); rc=$?
  [ $rc -ne 124 ] || fail "blocked (timeout): $*"
  [ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "status $rc: $* -> $out"
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "not one line: $out"
  printf '%s' "$out" | grep -qE "$w/[^ ]*: is not a regular file \(a named pipe\)" || fail "no 'named pipe': $out"
  echo "ok: $out"
}
mkfifo "$w/model.gguf" "$w/data.jsonl"
mkdir -p "$w/tok" "$w/model"
mkfifo "$w/tok/tokenizer.json"
cp "$src/tests/fixtures/io/tied_bf16/model.safetensors" "$w/model/"
mkfifo "$w/model/config.json"
check "$titan" import gguf "$w/model.gguf" --output "$w/out"
check "$titan" tokenize --input "$w/data.jsonl" --output "$w/x.bin" --quiet
check "$titan" encode --tokenizer "$w/tok"
check "$titan" export --from "$w/model" --output "$w/out2"
[ -e "$w/out" ] || [ -e "$w/out2" ] && fail "an output folder was written"

# pad_token_id outside the vocabulary (the embedding refused it, naming no file)
mkdir -p "$w/padded"
cp "$src/tests/fixtures/io/tied_bf16/"* "$w/padded/"
cp "$src/assets/qwen3-tokenizer/tokenizer.json" "$w/padded/"
echo '{"pad_token_id": 99999999, "eos_token_id": 1}' > "$w/padded/generation_config.json"
out=$("$titan" generate --model "$w/padded" --prompt "a" --max-new-tokens 2 2>&1) && fail "pad id outside the vocabulary accepted"
printf '%s' "$out" | grep -q "$w/padded/generation_config.json: pad_token_id 99999999 is outside the vocabulary" ||
  fail "pad id error: $out"
echo "ok: $out"
echo PASS
