#!/usr/bin/env bash
# The kernel path of `titan train`: [kernels] replace swaps module kernels by name pattern, logs one
# line per replaced module, and (the transposed-layout RoPE being bit-exact against the reference
# RoPE in f32) gives the same losses as a run on the reference RoPE. rope.fused, that variant's
# first name, still selects it (and the log names it rope.transposed).
set -uo pipefail
titan=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config "$src/recipes/debug.toml" --model.n_layers 4 --training.seq_len 32 --training.local_batch_size 2
        --training.steps 2 --metrics.enable_tensorboard false --checkpoint.enable false --checkpoint.last_save_in_hf false)
"$titan" train "${common[@]}" --job.dump_folder "$work/base" \
  --kernels.replace '["model.layers.*.self_attn.rope=rope.reference"]' > "$work/base.log" 2>&1 || { cat "$work/base.log"; exit 1; }
"$titan" train "${common[@]}" --job.dump_folder "$work/tr" \
  --kernels.replace '["model.layers.*.self_attn.rope=rope.transposed"]' > "$work/tr.log" 2>&1 || { cat "$work/tr.log"; exit 1; }
n=$(grep -c '^\[kernels\] model.layers.[0-9]*.self_attn.rope: rope.cpu -> rope.transposed$' "$work/tr.log")
[ "$n" -eq 4 ] || { echo "FAIL: expected 4 replacement lines, got $n"; cat "$work/tr.log"; exit 1; }
grep -q '^\[kernels\] 4 module(s) replaced by 1 rule(s)$' "$work/tr.log" || { echo "FAIL: no total line"; exit 1; }
loss() { grep -o '"loss": *[0-9.e+-]*' "$1/metrics.jsonl" | head -2; }
[ "$(loss "$work/base")" = "$(loss "$work/tr")" ] || { echo "FAIL: losses differ"; loss "$work/base"; loss "$work/tr"; exit 1; }
echo "ok: 4 modules replaced, losses identical: $(loss "$work/tr" | tr '\n' ' ')"
# A narrower pattern picks one layer (through the alias rope.fused, logged as rope.transposed); a
# pattern matching nothing is an error naming it.
"$titan" train "${common[@]}" --job.dump_folder "$work/one" --kernels.replace 'model.layers.2.self_attn.rope=rope.fused' \
  > "$work/one.log" 2>&1 || { cat "$work/one.log"; exit 1; }
[ "$(grep -c '^\[kernels\] model.layers' "$work/one.log")" -eq 1 ] || { echo "FAIL: narrow pattern"; exit 1; }
grep -q '^\[kernels\] model.layers.2.self_attn.rope: rope.cpu -> rope.transposed$' "$work/one.log" ||
  { echo "FAIL: the alias rope.fused did not select rope.transposed"; cat "$work/one.log"; exit 1; }
out=$("$titan" train "${common[@]}" --kernels.replace 'model.layers.*.mlp.nothing=rope.transposed' 2>&1) && { echo "FAIL: accepted"; exit 1; }
echo "$out" | grep -q "matches no module" || { echo "FAIL: $out"; exit 1; }
echo "ok: $out"
