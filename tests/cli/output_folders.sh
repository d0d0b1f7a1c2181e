#!/usr/bin/env bash
# No command leaves a folder that loads as a silent mix of two models, and none overwrites its own
# input or a user's file:
#  - import / export into a folder that holds another model are refused; with --replace nothing of
#    the old folder survives (shards, index, chat_template.jinja, generation_config.json);
#  - export --from X --output X --replace rewrites X in place (the new folder swapped in whole);
#  - temporaries of a dead export, marked as titan's, are removed by the next export; unmarked
#    folders of the same name pattern are kept;
#  - tokenize --output equal to an input, and data make-arithmetic over a user's train.jsonl, are
#    refused (an identical rerun of make-arithmetic is fine).
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
# refused PATTERN COMMAND...: fails with one line matching PATTERN
refused() { local pat=$1; shift; local out; out=$("$@" 2>&1) && fail "accepted: $*"
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "not one line: $out"
  printf '%s' "$out" | grep -q -- "$pat" || fail "no '$pat' in: $out"; echo "ok: $out"; }

# A folder holding another (sharded) model with its own template and generation config.
old="$w/model"
"$titan" export --from "$src/tests/fixtures/io/untied_sharded" --output "$old" --dtype f32 --max-shard-bytes 4000 \
  --tokenizer "$src/assets/qwen3-tokenizer" >/dev/null 2>&1 || fail "setup export"
ls "$old" | grep -q 'model-00001-of' || fail "setup is not sharded: $(ls "$old")"
echo '{{ "old template" }}' > "$old/chat_template.jinja"
echo '{"eos_token_id": 7}' > "$old/generation_config.json"

refused "$old: is not empty; pass --replace" "$titan" import gguf "$src/tests/fixtures/gguf/tiny_qwen2.gguf" --output "$old"
"$titan" import gguf "$src/tests/fixtures/gguf/tiny_qwen2.gguf" --output "$old" --replace >/dev/null || fail "import --replace"
left=$(ls -A "$old" | tr '\n' ' ')
[ "$left" = "config.json model.safetensors tokenizer.json tokenizer_config.json " ] || fail "import left: $left"
[ -z "$(ls -A "$w" | grep titan-partial)" ] || fail "temporaries left: $(ls -A "$w")"

# Export in place over its own input, then into a non-empty folder.
"$titan" export --from "$old" --output "$old" --dtype bf16 --replace >/dev/null || fail "export in place"
grep -q '"torch_dtype": "bfloat16"' "$old/config.json" || fail "in-place export did not write bf16: $(cat "$old/config.json")"
"$titan" export --from "$old" --output "$w/again" --dtype f32 >/dev/null || fail "the in-place export does not load"
refused "$w/again: is not empty; pass --replace" "$titan" export --from "$old" --output "$w/again"

# A dead export's temporary (marked, this host, a pid that has ended) and an unmarked look-alike.
sh -c 'exit 0' & dead=$!; wait $dead
mkdir -p "$w/.again.titan-partial-x" "$w/.again.titan-partial-y"
printf 'titan output folder being written\nhost %s\npid %s\n' "$(hostname)" "$dead" > "$w/.again.titan-partial-x/.titan-partial"
head -c 100000 /dev/zero > "$w/.again.titan-partial-x/model-00001-of-00009.safetensors"
"$titan" export --from "$old" --output "$w/again" --replace >/dev/null || fail "export --replace"
[ -e "$w/.again.titan-partial-x" ] && fail "the dead export's temporary was not removed"
[ -d "$w/.again.titan-partial-y" ] || fail "an unmarked folder was removed"

# tokenize over its own input
printf '{"text": "hello"}\n' > "$w/a.jsonl"
refused "a.jsonl: is also an input" "$titan" tokenize --input "$w/a.jsonl" --output "$w/a.jsonl" --quiet
grep -q hello "$w/a.jsonl" || fail "the input was changed"

# make-arithmetic over a user's file; an identical rerun is fine
mkdir -p "$w/data"; echo '{"mine": 1}' > "$w/data/train.jsonl"
refused "train.jsonl: exists and is not this dataset" "$titan" data make-arithmetic --output "$w/data" --max-operand 9 --valid 10
grep -q mine "$w/data/train.jsonl" || fail "the user's file was overwritten"
"$titan" data make-arithmetic --output "$w/gen" --max-operand 9 --valid 10 >/dev/null || fail "make-arithmetic"
"$titan" data make-arithmetic --output "$w/gen" --max-operand 9 --valid 10 >/dev/null || fail "identical rerun refused"
refused "exists and is not this dataset" "$titan" data make-arithmetic --output "$w/gen" --max-operand 9 --valid 20
"$titan" data make-arithmetic --output "$w/gen" --max-operand 9 --valid 20 --replace >/dev/null || fail "--replace"
echo PASS
