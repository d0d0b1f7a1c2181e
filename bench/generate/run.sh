#!/usr/bin/env bash
# Generation benchmark, titan vs transformers generate, in one run: a Qwen3-0.6B-shaped model
# (config.json here; random weights made at bench time by make_model.py, not committed), batch 1,
# a 512-token prompt, 128 new greedy tokens, f32 and bf16 weights, the same thread count (2).
# Prefill and decode tokens/s, titan / transformers, and decode as a fraction of the
# memory-bandwidth bound (weight bytes read per token / copy bandwidth measured now by
# stream_probe.cpp; the rate weights are read at is also given against its read-only bandwidth); also each process's CPU time (user + sys) and peak resident memory.
# transformers gets its best settings: torch.inference_mode, use_cache=True, jemalloc preloaded
# when present, OPENBLAS_CORETYPE unset (as bench/train_step/run.sh).
#   usage: bench/generate/run.sh [TITAN_BIN=build/titan] [MODEL_DIR=a temporary folder]
#   SIZE=full (default) | small (config_small.json: 42M parameters, prompt 128, 64 new tokens; shows
#   the ratios in minutes on a busy machine) | tiny (config_tiny.json, prompt 16, 8 new tokens:
#   checks that the script runs end to end). THREADS (default 2). HF_OMP_WAIT_POLICY=passive gives
#   transformers the wait policy titan generate uses (docs/inference.md): its best setting on a busy
#   machine; unset (default) keeps torch's own, its best on a quiet one.
# A MODEL_DIR that already holds the model of that SIZE is reused (the full one takes a minute to
# write, 2.4 GB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
titan=${1:-$src/build/titan}
py=${TITAN_ORACLE_PYTHON:-$src/.venv-oracle/bin/python}
[ -x "$py" ] || py=/work/venv-oracle/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=${2:-$out/model}
threads=${THREADS:-2}
case ${SIZE:-full} in
  full) config=$here/config.json plen=512 new=128 ;;
  small) config=$here/config_small.json plen=128 new=64 ;;
  tiny) config=$here/config_tiny.json plen=16 new=8 ;;
  *) echo "SIZE must be full, small or tiny" >&2; exit 2 ;;
esac
jemalloc=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)
vocab=$("$py" -c "import json; print(json.load(open('$config'))['vocab_size'])")

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -f "$model/model.safetensors" ]; then
  "$py" -c "import json, sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); k = ('hidden_size', 'num_hidden_layers', 'vocab_size', 'intermediate_size'); sys.exit(any(a[x] != b[x] for x in k))" "$config" "$model/config.json" ||
    { echo "$model holds a model of another size than SIZE=${SIZE:-full}" >&2; exit 2; }
else
  "$py" "$here/make_model.py" "$model" "$config"
fi
g++ -O3 -march=native -pthread -o "$out/stream_probe" "$here/stream_probe.cpp"
read bw rbw < <("$out/stream_probe" $threads)
# The same prompt as hf_generate.py (seed 1), as ids.
prompt=$("$py" -c "import torch; print(' '.join(map(str, torch.randint(0, $vocab, (1, $plen), generator=torch.Generator().manual_seed(1))[0].tolist())))")

# Each run under /usr/bin/time: CPU seconds (user + sys) and peak resident memory (KiB) to $2.
timed() {  # $1 file for "user sys maxrss", then the command
  local f=$1; shift
  /usr/bin/time -f "%U %S %M" -o "$f" "$@"
}
run_titan() {  # $1 dtype -> "prefill_tps decode_tps"
  TITAN_NUM_THREADS=$threads timed "$out/titan_$1.time" "$titan" generate --model "$model" --prompt-ids "$prompt" \
    --max-new-tokens $new --temperature 0 --dtype "$1" --json > "$out/titan_$1.json" 2> "$out/titan_$1.err" ||
    { cat "$out/titan_$1.err"; exit 1; }
  sed -n 's/.*prefill \([0-9.]*\) tokens\/s, decode \([0-9.]*\) tokens\/s.*/\1 \2/p' "$out/titan_$1.err"
}
run_hf() {  # $1 dtype
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${jemalloc:+LD_PRELOAD=$jemalloc} \
    ${HF_OMP_WAIT_POLICY:+OMP_WAIT_POLICY=$HF_OMP_WAIT_POLICY} /usr/bin/time -f "%U %S %M" \
    -o "$out/hf_$1.time" "$py" "$here/hf_generate.py" "$model" --dtype "$1" --prompt-len $plen --new $new \
    --threads $threads | tail -1 > "$out/hf_$1.json"
  "$py" -c "import json; s=json.load(open('$out/hf_$1.json')); print(s['prefill_tps'], s['decode_tps'])"
}

read tp32 td32 < <(run_titan f32)
read tpbf tdbf < <(run_titan bf16)
read hp32 hd32 < <(run_hf f32)
read hpbf hdbf < <(run_hf bf16)
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Greedy ids agree in f32 (random weights: a near tie could differ; reported, not asserted).
same=$("$py" -c "import json; t=json.load(open('$out/titan_f32.json'))['ids'][:16]; h=json.load(open('$out/hf_f32.json'))['ids']; print('yes' if t==h else 'no: %s vs %s' % (t, h))")
"$py" - "$model/config.json" "$bw,$rbw" "$tp32" "$td32" "$tpbf" "$tdbf" "$hp32" "$hd32" "$hpbf" "$hdbf" "$same" "$plen" "$threads" \
  "$(cat "$out/titan_f32.time")" "$(cat "$out/titan_bf16.time")" "$(cat "$out/hf_f32.time")" "$(cat "$out/hf_bf16.time")" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
bw, rbw = map(float, sys.argv[2].split(","))
tp32, td32, tpbf, tdbf, hp32, hd32, hpbf, hdbf = map(float, sys.argv[3:11])
plen, threads = int(sys.argv[12]), int(sys.argv[13])
usage = {}  # (who, dtype) -> (cpu seconds, peak RSS in GB)
for (who, dt), t in zip((("titan", "f32"), ("titan", "bf16"), ("transformers", "f32"), ("transformers", "bf16")),
                        sys.argv[14:18]):
    u, s_, rss = t.split()[-3:]
    usage[who, dt] = (float(u) + float(s_), int(rss) * 1024 / 1e9)
H, L, I, V, D = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
q, kv = c["num_attention_heads"] * D, c["num_key_value_heads"] * D
layer = H * (q + 2 * kv) + q * H + 3 * H * I          # matmul weights of one layer
mat = L * layer + V * H                                 # + the (tied) lm_head, read every token
# FLOPs of the prefill: 2 per weight per token, plus causal attention (q.k and p.v) over the prompt.
pflops = 2 * L * layer * plen + 2 * 2 * L * c["num_attention_heads"] * D * plen * (plen + 1) / 2 + 2 * V * H
print(f"stream copy bandwidth: {bw:.2f} GB/s, read bandwidth {rbw:.2f} GB/s ({threads} threads); weights read per token: f32 {4 * mat / 1e9:.3f} GB, "
      f"bf16 {2 * mat / 1e9:.3f} GB (matmul weights incl. lm_head; KV cache <= {2 * L * kv * (plen + 128) * 4 / 1e6:.0f} MB f32)")
print(f"greedy f32 ids identical to transformers (first 16): {sys.argv[11]}")
print()
print("| weights | run | prefill tok/s | prefill GFLOP/s | decode tok/s | decode vs bound | weights read | prefill vs HF | decode vs HF | CPU s | peak RSS GB |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for dt, bpw, rows in (("f32", 4, ((hp32, hd32, "transformers"), (tp32, td32, "titan"))),
                      ("bf16", 2, ((hpbf, hdbf, "transformers"), (tpbf, tdbf, "titan")))):
    bound = bw * 1e9 / (bpw * mat)
    hp, hd = rows[0][0], rows[0][1]
    for p, d, who in rows:
        print(f"| {dt} | {who} | {p:.1f} | {p * pflops / plen / 1e9:.1f} | {d:.2f} | {100 * d / bound:.0f}% of {bound:.2f} | "
              f"{d * bpw * mat / 1e9:.1f} GB/s = {100 * d * bpw * mat / 1e9 / rbw:.0f}% of read | "
              f"{p / hp:.2f}x | {d / hd:.2f}x | {usage[who, dt][0]:.1f} | {usage[who, dt][1]:.2f} |")
PY
