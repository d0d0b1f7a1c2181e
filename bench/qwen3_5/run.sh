#!/usr/bin/env bash
# Qwen3.5 benchmark, titan vs transformers (torch eager), in one run on the same threads:
#   train:  full training steps (forward + backward + clipping + AdamW) of the model in
#           model/config.json (Qwen3.5-0.8B's text dimensions and vocabulary, 4 layers = one block of
#           its 3 Gated DeltaNet : 1 gated attention pattern), f32, batch 1 x SEQ tokens; median
#           tokens/s over the steps after warm-up (titan: bench.toml + summary.json's median_tps,
#           transformers: bench/train_step/torch_baseline.py --config);
#   decode: greedy generation with cache from a PLEN-token prompt, NEW new tokens, f32, the same
#           random weights on both sides (make_model.py, written to a temporary folder);
#   delta rule alone: the chunked gated delta rule forward+backward of one layer at the same shape
#           (bench_gated_delta vs transformers' torch_chunk_gated_delta_rule, hf_gated_delta.py),
#           to set against the step time: where the step's time goes.
# titan and transformers alternate (titan, torch, titan, torch, ...) for ROUNDS rounds so that load
# drifting on a shared machine hits both; the table gives the median of the rounds and each round.
#   usage: bench/qwen3_5/run.sh [TITAN_BIN=build/titan] [BENCH_GATED_DELTA=build/bench/gated_delta/bench_gated_delta]
#   env: ROUNDS (2), STEPS (4 steps = 2 warm-up + 2 timed, each side), SEQ (512),
#        PLEN (512), NEW (32), THREADS (2), MODEL_DIR (reuse a folder make_model.py wrote),
#        PREC=bf16 (titan: --training.mixed_precision_param bfloat16 and generate --dtype bf16;
#        transformers: torch_baseline.py --bf16 (autocast) and hf_generate.py --dtype bf16); default f32.
# transformers gets bench/train_step's settings: OPENBLAS_CORETYPE unset, jemalloc preloaded when
# present. Python: $TITAN_ORACLE_PYTHON, else .venv-oracle/bin/python, else /work/venv-oracle.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
titan=${1:-$src/build/titan}
gdb=${2:-$src/build/bench/gated_delta/bench_gated_delta}
py=${TITAN_ORACLE_PYTHON:-$src/.venv-oracle/bin/python}
[ -x "$py" ] || py=/work/venv-oracle/bin/python
rounds=${ROUNDS:-2} steps=${STEPS:-4} seq=${SEQ:-512} plen=${PLEN:-512} new=${NEW:-32} threads=${THREADS:-2}
warm=2
prec=${PREC:-f32}
case $prec in f32) tprec=float32 pflag= ;; bf16) tprec=bfloat16 pflag=--bf16 ;; *) echo "PREC: f32 or bf16" >&2; exit 2 ;; esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=${MODEL_DIR:-$out/model}
cd "$src"
jemalloc=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)
torchenv() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${jemalloc:+LD_PRELOAD=$jemalloc} OMP_NUM_THREADS=$threads "$@"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "precision: $prec"; echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores online; threads $threads"
echo "load before: $(load)"
[ -f "$model/model.safetensors" ] || torchenv "$py" "$here/make_model.py" "$model" "$here/model/config.json" 2> "$out/make.err" ||
  { cat "$out/make.err"; exit 1; }
vocab=$("$py" -c "import json; print(json.load(open('$here/model/config.json'))['vocab_size'])")
prompt=$("$py" -c "import torch; print(' '.join(map(str, torch.randint(0, $vocab, (1, $plen), generator=torch.Generator().manual_seed(1))[0].tolist())))")

train_titan() {  # $1 label -> tokens/s
  "$titan" train --config "$here/bench.toml" --job.dump_folder "$out/$1" --training.steps "$steps" \
    --training.seq_len "$seq" --metrics.perf_warmup_steps $warm --compute.threads "$threads" --training.mixed_precision_param $tprec > "$out/$1.log" 2>&1 ||
    { cat "$out/$1.log" >&2; exit 1; }
  "$py" -c "import json; print(json.load(open('$out/$1/summary.json'))['median_tps'])"
}
train_torch() {  # $1 label -> tokens/s
  torchenv "$py" "$src/bench/train_step/torch_baseline.py" --config "$here/model/config.json" --batch 1 --seq "$seq" --steps $((steps - warm)) \
    --warmup $warm --threads "$threads" $pflag > "$out/$1.json" 2> "$out/$1.err" || { cat "$out/$1.err" >&2; exit 1; }
  "$py" -c "import json; print(json.loads(open('$out/$1.json').read().splitlines()[-1])['tokens_per_s'])"
}
decode_titan() {  # $1 label -> "prefill decode" tokens/s
  TITAN_NUM_THREADS=$threads "$titan" generate --model "$model" --prompt-ids "$prompt" --max-new-tokens "$new" \
    --temperature 0 --dtype "$prec" --json > "$out/$1.json" 2> "$out/$1.err" || { cat "$out/$1.err" >&2; exit 1; }
  sed -n 's/.*prefill \([0-9.]*\) tokens\/s, decode \([0-9.]*\) tokens\/s.*/\1 \2/p' "$out/$1.err"
}
decode_torch() {  # $1 label -> "prefill decode" tokens/s
  torchenv "$py" "$src/bench/generate/hf_generate.py" "$model" --dtype "$prec" --prompt-len "$plen" --new "$new" \
    --threads "$threads" 2> "$out/$1.err" | tail -1 > "$out/$1.json" || { cat "$out/$1.err" >&2; exit 1; }
  "$py" -c "import json; s=json.load(open('$out/$1.json')); print(s['prefill_tps'], s['decode_tps'])"
}

: > "$out/rows"
for r in $(seq "$rounds"); do
  tt=$(train_titan "tt$r"); echo "round $r train  titan        $tt tok/s  (load $(load))"
  pt=$(train_torch "pt$r"); echo "round $r train  transformers $pt tok/s  (load $(load))"
  read -r tpf tdc < <(decode_titan "td$r"); echo "round $r decode titan        prefill $tpf decode $tdc tok/s  (load $(load))"
  read -r ppf pdc < <(decode_torch "pd$r"); echo "round $r decode transformers prefill $ppf decode $pdc tok/s  (load $(load))"
  echo "$tt $pt $tpf $ppf $tdc $pdc" >> "$out/rows"
done
same=$("$py" -c "import json; t=json.load(open('$out/td1.json'))['ids'][:16]; h=json.load(open('$out/pd1.json'))['ids']; print('yes' if t==h else 'no: %s vs %s' % (t, h))")

# The delta rule alone, one layer at the step's shape (min of 3 runs each side).
gd_t=- gd_p=-
if [ -x "$gdb" ]; then
  "$gdb" "$seq" "$threads" > "$out/gd_titan.txt" 2>&1 || cat "$out/gd_titan.txt" >&2
  gd_t=$(grep -o 'chunk=16 .*' "$out/gd_titan.txt" | grep -o 'forward+backward [0-9.]* ms' | grep -o '[0-9.]*' | head -1 || true)
  torchenv "$py" "$src/bench/gated_delta/hf_gated_delta.py" "$seq" "$threads" > "$out/gd_torch.txt" 2>&1 || cat "$out/gd_torch.txt" >&2
  gd_p=$(grep -o 'forward+backward [0-9.]* ms' "$out/gd_torch.txt" | grep -o '[0-9.]*' | head -1 || true)
  echo "delta rule alone (S=$seq, 16 heads of 128, fwd+bwd): titan: $(grep 'chunk=16 ' "$out/gd_titan.txt" | head -1)"
  echo "                                                  transformers: $(tail -1 "$out/gd_torch.txt")"
else
  echo "($gdb not built: configure with -DTITAN_BENCH=ON and build bench_gated_delta for the delta-rule share)"
fi
echo "load after: $(load)"
echo "greedy $prec ids identical (first 16): $same"
"$py" - "$out/rows" "$seq" "$plen" "$new" "${gd_t:--}" "${gd_p:--}" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
seq, plen, new = map(int, sys.argv[2:5])
med = [statistics.median(c) for c in zip(*rows)]
tt, pt, tpf, ppf, tdc, pdc = med
print()
print(f"| what | titan tok/s | transformers tok/s | titan / transformers | rounds (titan / transformers) |")
print("|---|---:|---:|---:|---|")
for name, a, b, i in ((f"train step, batch 1 x {seq}", tt, pt, 0), (f"prefill, {plen} tokens", tpf, ppf, 2),
                      (f"decode, {new} new tokens", tdc, pdc, 4)):
    each = ", ".join(f"{r[i]:.1f} / {r[i + 1]:.1f}" if a > 10 else f"{r[i]:.2f} / {r[i + 1]:.2f}" for r in rows)
    print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x | {each} |")
try:
    gt, gp = float(sys.argv[5]), float(sys.argv[6])
except ValueError:
    sys.exit(0)
print()
lin = 3  # Gated DeltaNet layers in model/config.json
st, sp = seq / tt * 1e3, seq / pt * 1e3  # step times in ms
print(f"step time: titan {st:.0f} ms, transformers {sp:.0f} ms; the delta rule alone (fwd+bwd, one layer): "
      f"titan {gt:.0f} ms, transformers {gp:.0f} ms")
print(f"x {lin} layers = titan {lin * gt:.0f} ms ({100 * lin * gt / st:.0f}% of its step), "
      f"transformers {lin * gp:.0f} ms ({100 * lin * gp / sp:.0f}% of its step); "
      f"the rest (GEMMs, lm_head + loss, optimizer, elementwise): titan {st - lin * gt:.0f} ms, transformers {sp - lin * gp:.0f} ms")
PY
