# Shared by tests/cli/lora_peft.sh and lora_moe_peft.sh (sourced, not a test itself): a trained
# adapter against the model with it merged. `titan score` logits of base + --adapter and of the
# merged export, `titan generate --adapter` equal to the merged model's text, then (with a Python
# that has torch + transformers + peft) peft.PeftModel.from_pretrained on the titan-written folder
# and transformers on the merged export give the same logits; without such a Python the script
# exits 77 (skip) after the titan-only checks.
#   check_adapter_against_merged TITAN SRC WORK BASE ADAPTER MERGED
check_adapter_against_merged() {
  local titan=$1 src=$2 work=$3 base=$4 adapter=$5 merged=$6
  printf '151643 791 3974 13876 38835 1939 916 279\n9707 11 1879 0 220 16 17 18\n' > "$work/tokens.txt"
  "$titan" score --model "$merged" --tokens "$work/tokens.txt" --dump-logits "$work/merged.safetensors" > /dev/null
  "$titan" score --model "$base" --adapter "$adapter" --tokens "$work/tokens.txt" --dump-logits "$work/adapter.safetensors" > /dev/null
  local g1 g2
  g1=$("$titan" generate --model "$base" --adapter "$adapter" --prompt "The capital" --max-new-tokens 6)
  g2=$("$titan" generate --model "$merged" --prompt "The capital" --max-new-tokens 6)
  [ "$g1" = "$g2" ] || { echo "generate --adapter ($g1) differs from the merged model ($g2)"; exit 1; }

  local py=${TITAN_ORACLE_PYTHON:-} cand
  for cand in "$py" "$src/.venv-oracle/bin/python" "/work/venv-oracle/bin/python"; do
    if [ -n "$cand" ] && [ -x "$cand" ] && "$cand" -c "import torch, transformers, peft" 2>/dev/null; then py=$cand; break; fi
    py=""
  done
  [ -n "$py" ] || { echo "skip: no python with torch + transformers + peft (the titan-only checks passed)"; exit 77; }
  "$py" "$src/tools/oracle/check_peft_adapter.py" --base "$base" --adapter "$adapter" --tokens "$work/tokens.txt" \
    --logits "$work/adapter.safetensors"
  "$py" "$src/tools/oracle/check_hf_export.py" --model "$merged" --tokens "$work/tokens.txt" --logits "$work/merged.safetensors"
}
