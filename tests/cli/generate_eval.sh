#!/usr/bin/env bash
# titan generate / chat / eval end to end on the tiny model fixture (tests/fixtures/infer, written
# by tools/oracle/generate_goldens.py): greedy ids equal transformers' generate, eval's loss equals
# transformers' sliding-window perplexity loop (1e-5 relative), the checkpoint-step path equals the
# HF-folder path, --json output shapes, stop strings, streaming, and one-line errors.
set -u
titan="$1" src="$2"
fail() { echo "FAIL: $*"; exit 1; }
M="$src/tests/fixtures/infer/tiny_chat"
expect="$src/tests/fixtures/infer/cli_expect.txt"
docs="$src/tests/fixtures/infer/eval_docs.jsonl"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TITAN_CACHE_DIR="$work/cache" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

want_ids() { grep "^gen $1 " "$expect" | cut -d' ' -f4- | tr ' ' ','; }
want_finish() { grep "^gen $1 " "$expect" | cut -d' ' -f3; }
ids_of() { sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p' <<< "$1"; }
finish_of() { sed -n 's/.*"finish_reason":"\([a-z]*\)".*/\1/p' <<< "$1"; }

# Greedy text continuation, token-identical to transformers.
out=$("$titan" generate --model "$M" --prompt "Hello world, this is" --max-new-tokens 24 --json) || fail "generate exited $?"
[ "$(echo "$out" | wc -l)" = 1 ] || fail "--json printed more than one line: $out"
[ "$(ids_of "$out")" = "$(want_ids text)" ] || fail "text ids: got $(ids_of "$out") want $(want_ids text)"
[ "$(finish_of "$out")" = length ] || fail "text finish: $out"
case "$out" in '{"prompt_ids":[39,301,385,289,269,507,11,419,374],"ids":['*'"text":"'*) ;; *) fail "json shape: $out" ;; esac

# Chat through the template (thinking off), and a repetition penalty.
out=$("$titan" generate --model "$M" --chat --thinking off --prompt "Hi there!" --max-new-tokens 16 --json) || fail "chat generate exited $?"
[ "$(ids_of "$out")" = "$(want_ids chat)" ] || fail "chat ids: got $(ids_of "$out") want $(want_ids chat)"
out=$("$titan" generate --model "$M" --prompt "Hello world, this is" --max-new-tokens 20 --repetition-penalty 1.3 --json) || fail "penalty exited $?"
[ "$(ids_of "$out")" = "$(want_ids repetition_penalty)" ] || fail "penalty ids: $(ids_of "$out")"

# A stop string completed across tokens ends generation with finish_reason "stop".
out=$("$titan" generate --model "$M" --prompt "Hello world, this is" --stop "zzz" --stop "ne{" --json) || fail "stop exited $?"
[ "$(finish_of "$out")" = stop ] || fail "stop finish: $out"
[ "$(ids_of "$out")" = "219,66,834,515" ] || fail "stop ids: $out"

# --prompts: one JSON line per prompt, in order; prompt, prompt_ids and messages inputs.
printf '%s\n' '{"prompt": "Hello world, this is"}' '' \
  '{"messages": [{"role": "user", "content": "Hi there!"}]}' \
  '{"prompt_ids": [39, 301, 385, 289, 269, 507, 11, 419, 374]}' > "$work/prompts.jsonl"
out=$("$titan" generate --model "$M" --prompts "$work/prompts.jsonl" --max-new-tokens 16 --thinking off --batch-size 2 2>&1) \
  && fail "--thinking without --chat accepted"
out=$("$titan" generate --model "$M" --prompts "$work/prompts.jsonl" --max-new-tokens 16 --batch-size 2) || fail "prompts exited $?"
[ "$(echo "$out" | wc -l)" = 3 ] || fail "prompts: want 3 lines, got: $out"
first16=$(want_ids text | cut -d, -f1-16)
[ "$(ids_of "$(sed -n 1p <<< "$out")")" = "$first16" ] || fail "prompts line 1: $out"
[ "$(ids_of "$(sed -n 3p <<< "$out")")" = "$first16" ] || fail "prompts line 3: $out"

# Streaming text equals the --json text; titan chat answers a piped turn the same way.
stream=$("$titan" generate --model "$M" --chat --thinking off --prompt "Hi there!" --max-new-tokens 16 2>"$work/err") \
  || fail "streaming exited $?"
grep -q '^\[length: 19 prompt + 16 generated tokens' "$work/err" || fail "summary line: $(cat "$work/err")"
chat=$(printf 'Hi there!\n/exit\nnot read\n' | "$titan" chat --model "$M" --thinking off --max-new-tokens 16) || fail "chat exited $?"
[ "$chat" = "$stream" ] || fail "chat reply differs from generate --chat: [$chat] vs [$stream]"

# Sampling is reproducible for a seed.
a=$("$titan" generate --model "$M" --prompt "Hello" --temperature 0.8 --top-k 30 --top-p 0.9 --min-p 0.01 --seed 5 --max-new-tokens 8 --json)
b=$("$titan" generate --model "$M" --prompt "Hello" --temperature 0.8 --top-k 30 --top-p 0.9 --min-p 0.01 --seed 5 --max-new-tokens 8 --json)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "seeded sampling not reproducible: [$a] [$b]"

# Eval: loss as transformers' sliding-window loop; only the JSON line on stdout.
check_eval() {  # seq_len stride json
  local want_loss want_tokens got_loss got_tokens
  want_loss=$(grep "^eval $1 $2 " "$expect" | cut -d' ' -f4)
  want_tokens=$(grep "^eval $1 $2 " "$expect" | cut -d' ' -f5)
  got_loss=$(sed -n 's/^{"loss": \([-0-9.e+]*\), "perplexity": [-0-9.e+]*, "tokens": [0-9]*}$/\1/p' <<< "$3")
  got_tokens=$(sed -n 's/.*"tokens": \([0-9]*\)}$/\1/p' <<< "$3")
  [ -n "$got_loss" ] || fail "eval json shape: [$3]"
  [ "$got_tokens" = "$want_tokens" ] || fail "eval $1/$2 tokens: got $got_tokens want $want_tokens"
  awk -v a="$got_loss" -v b="$want_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }' \
    || fail "eval $1/$2 loss: got $got_loss want $want_loss"
}
out=$("$titan" eval --model "$M" --data "$docs" --seq-len 64 --stride 32 --json 2>/dev/null) || fail "eval exited $?"
[ "$(echo "$out" | wc -l)" = 1 ] || fail "eval --json printed more than one line: $out"
check_eval 64 32 "$out"
out=$("$titan" eval --model "$M" --data "$docs" --seq-len 100 --stride 37 --json --quiet) || fail "eval exited $?"
check_eval 100 37 "$out"
# The same stream from a token file made by titan tokenize (and the default stride = seq_len).
"$titan" tokenize --tokenizer "$M" --input "$docs" --output "$work/docs.bin" --quiet || fail "tokenize exited $?"
out=$("$titan" eval --model "$M" --data "$work/docs.bin" --seq-len 64 --json --quiet) || fail "eval .bin exited $?"
check_eval 64 64 "$out"
# Several files: one stream.
printf 'one more document\n' > "$work/extra.txt"
out=$("$titan" eval --model "$M" --data "$docs" "$work/extra.txt" --seq-len 64 --quiet) || fail "eval 2 files exited $?"
grep -q '^perplexity: ' <<< "$out" || fail "eval text output: $out"

# A training checkpoint step gives the HF folder's result (lr ~ 0, so the weights are unchanged).
"$titan" train --config "$src/recipes/debug.toml" --job.dump_folder "$work/run" --checkpoint.initial_load_path "$M" \
  --checkpoint.initial_load_in_hf true --model.hf_assets_path "$M" --training.dataset "$docs" --training.steps 1 \
  --training.seq_len 32 --training.local_batch_size 1 --optimizer.lr 1e-30 --optimizer.weight_decay 0 \
  --lr_scheduler.warmup_steps 0 --metrics.enable_tensorboard false > "$work/train.log" 2>&1 \
  || { cat "$work/train.log"; fail "train exited"; }
out=$("$titan" generate --model "$work/run/checkpoint/step-1" --tokenizer "$M" --prompt "Hello world, this is" \
  --max-new-tokens 24 --json) || fail "generate from a checkpoint exited $?"
[ "$(ids_of "$out")" = "$(want_ids text)" ] || fail "checkpoint ids: $(ids_of "$out")"

# Errors: one line naming the option or file.
err() { "$titan" "$@" 2>&1 >/dev/null; }
e=$(err generate --model "$M" --prompt x --temperature -1) && fail "negative temperature accepted"
grep -q "^titan generate: error: --temperature must be >= 0" <<< "$e" || fail "temperature error: $e"
e=$(err generate --model "$M") && fail "no prompt accepted"
grep -q "give exactly one of --prompt" <<< "$e" || fail "no prompt error: $e"
e=$(err generate --model "$M" --prompt x --top-p 0) && fail "top-p 0 accepted"
grep -q -- "--top-p must be in (0, 1]" <<< "$e" || fail "top-p error: $e"
e=$(err generate --model "$M" --prompt x --max-new-tokens 600) && fail "too long accepted"
grep -q "exceeds the model's max_position_embeddings 512" <<< "$e" || fail "length error: $e"
e=$(err generate --model "$M" --prompt-ids "1 x") && fail "bad ids accepted"
grep -q -- "--prompt-ids: 'x' is not a token id" <<< "$e" || fail "ids error: $e"
printf '{"prompt": 3}\n' > "$work/bad.jsonl"
e=$(err generate --model "$M" --prompts "$work/bad.jsonl") && fail "bad prompts accepted"
grep -q "bad.jsonl:1: prompt must be a string" <<< "$e" || fail "prompts error: $e"
e=$(err generate --model "$M" --promt x) && fail "unknown option accepted"
grep -q "did you mean --prompt" <<< "$e" || fail "unknown option error: $e"
e=$(err eval --model "$M" --data "$docs" --seq-len 64 --stride 65) && fail "stride > seq-len accepted"
grep -q -- "--stride must be in \[1, --seq-len 64\]" <<< "$e" || fail "stride error: $e"
e=$(err eval --model "$M") && fail "no data accepted"
grep -q -- "missing required option --data" <<< "$e" || fail "no data error: $e"
e=$(err eval --model "$M" --data "$docs" --tokenizer "$src/assets/qwen3-tokenizer" --quiet) && fail "foreign tokenizer accepted"
grep -q "eval_docs.jsonl: token id [0-9]* at position 0 is not below the model's vocab_size 1040" <<< "$e" \
  || fail "vocab error: $e"
e=$(err eval --model "$work/nope" --data "$docs") && fail "missing model accepted"
grep -q -- "--model $work/nope: not a folder" <<< "$e" || fail "model error: $e"
echo PASS
