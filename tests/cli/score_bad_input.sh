#!/usr/bin/env bash
# titan score refuses what would give a wrong number: a token-id line with a NUL byte (once read as
# if the line ended there), a weight that is not finite (named), and a non-finite loss; each is one
# error line and a non-zero exit instead of "loss: nan" and status 0.
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
model="$src/tests/fixtures/io/tied_bf16"  # vocab 32, bf16 weights
printf '1 2 3 4\n5 6 7 8\n' > "$w/ids.txt"
"$titan" score --model "$model" --tokens "$w/ids.txt" > "$w/out" 2>&1 || fail "good input: $(cat "$w/out")"
grep -qE '^loss: [0-9.]+$' "$w/out" || fail "no loss: $(cat "$w/out")"

printf '1 2 3 4\n5 6\0 7 8\n' > "$w/nul.txt"
out=$("$titan" score --model "$model" --tokens "$w/nul.txt" 2>&1) && fail "NUL byte accepted: $out"
echo "$out" | grep -q "nul.txt:2: .*NUL" || fail "NUL error: $out"
echo "ok: $out"

# patch FILE TENSOR ELEMENT HEXBYTES...: overwrite bf16 elements of one tensor in a safetensors file.
patch() {
  local f=$1 name=$2 elem=$3; shift 3
  local n hdr begin
  n=$(od -An -t u8 -N8 "$f" | tr -d ' ')
  hdr=$(dd if="$f" bs=1 skip=8 count="$n" 2>/dev/null)
  begin=$(printf '%s' "$hdr" | grep -o "\"$name\":{[^}]*}" | sed 's/.*"data_offsets":\[\([0-9]*\),.*/\1/')
  [ -n "$begin" ] || fail "no tensor $name in $f"
  printf "$*" | dd of="$f" bs=1 seek=$((8 + n + begin + 2 * elem)) conv=notrunc 2>/dev/null
}

cp -r "$model" "$w/nan"
patch "$w/nan/model.safetensors" model.layers.1.mlp.up_proj.weight 5 '\xc0\x7f'  # bf16 NaN
out=$("$titan" score --model "$w/nan" --tokens "$w/ids.txt" 2>&1) && fail "NaN weight accepted: $out"
echo "$out" | grep -q "model.layers.1.mlp.up_proj.weight" || fail "NaN tensor not named: $out"
echo "$out" | grep -q "not finite" || fail "NaN error: $out"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "not one line: $out"
echo "ok: $out"

# Finite weights whose logits overflow: embedding entries 1e18, final norm weights at the bf16 maximum.
cp -r "$model" "$w/big"
patch "$w/big/model.safetensors" model.embed_tokens.weight 0 "$(printf '\\x5e\\x5d%.0s' $(seq 512))"
patch "$w/big/model.safetensors" model.norm.weight 0 "$(printf '\\x7f\\x7f%.0s' $(seq 16))"
out=$("$titan" score --model "$w/big" --tokens "$w/ids.txt" 2>&1) && fail "non-finite loss exited 0: $out"
echo "$out" | grep -qiE "loss is (nan|inf|-inf)" || fail "non-finite loss error: $out"
echo "ok: $out"
out=$("$titan" score --model "$w/big" --tokens "$w/ids.txt" --json 2>/dev/null) && fail "non-finite loss exited 0 with --json"
echo PASS
