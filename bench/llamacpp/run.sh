#!/usr/bin/env bash
# titan vs llama.cpp, side by side in one run, on the same random Qwen3 weights (issue 29):
#   table 1: full fine-tuning f32 with AdamW, 1 x 512 tokens per step: llama-finetune vs titan train,
#            on the bench/train_step model (hidden 512, 8 layers, vocab 151,936 tied);
#   table 2: the Qwen3-0.6B-shaped model of bench/generate (config.json there), prefill 512 and
#            decode 128 at f32 and bf16 weights: llama-bench pp512 / tg128 vs titan generate
#            (its own prefill / decode lines), with the decode bound: the read bandwidth of
#            bench/generate/stream_probe.cpp in the same run over the weight bytes one token reads.
# llama.cpp is built from the `llama-cpp-python` sdist on PyPI (its vendor/llama.cpp), in a
# scratch folder, nothing of it committed: only the targets llama-finetune, llama-bench and
# llama-perplexity (about 10 minutes at -j2 on an idle 2-core machine). The models (HF folders
# from bench/generate/make_model.py + the repo's Qwen3 tokenizer, and f32 / bf16 GGUF through the
# tree's convert_hf_to_gguf.py) are made once and reused by later runs.
#
#   usage: bench/llamacpp/run.sh [TITAN=build/titan]
#   env:   SCRATCH (/work/scratch/llamacpp)  PY (/work/venv/bin/python: torch, transformers, the
#          converter's needs)  THREADS (2)  JOBS (2, the build)  STEPS (12, fine-tuning steps each)
#          REPS (2, llama-bench repetitions)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
titan=$(realpath "${1:-$src/build/titan}")
scratch=${SCRATCH:-/work/scratch/llamacpp}
py=${PY:-/work/venv/bin/python}
threads=${THREADS:-2}
jobs=${JOBS:-2}
steps=${STEPS:-12}
reps=${REPS:-2}
[ -x "$titan" ] || { echo "run.sh: $titan: not an executable" >&2; exit 2; }
[ -x "$py" ] && "$py" -c "import torch, transformers, sentencepiece" 2>/dev/null ||
  { echo "run.sh: $py: needs torch, transformers and sentencepiece (the converter imports it); set PY" >&2; exit 2; }
mkdir -p "$scratch"
scratch=$(realpath "$scratch")
bin=$scratch/llama-build/bin
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# 1. llama.cpp (once). `--no-binary llama-cpp-python` fetches that package's sdist only; with
# `:all:` pip would also build the sdist's build dependencies (cmake, ...) from source.
if [ ! -x "$bin/llama-bench" ] || [ ! -x "$bin/llama-finetune" ] || [ ! -x "$bin/llama-perplexity" ]; then
  sdist=$(ls "$scratch"/llama_cpp_python-*.tar.gz 2>/dev/null | tail -1 || true)
  if [ -z "$sdist" ]; then
    "$py" -m pip download --no-binary llama-cpp-python --no-deps llama-cpp-python -d "$scratch" >&2
    sdist=$(ls "$scratch"/llama_cpp_python-*.tar.gz | tail -1)
  fi
  tree=${sdist%.tar.gz}
  [ -d "$tree/vendor/llama.cpp" ] || tar -xzf "$sdist" -C "$scratch"
  launcher=$(command -v ccache >/dev/null && echo "-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" || true)
  # shellcheck disable=SC2086
  cmake -S "$tree/vendor/llama.cpp" -B "$scratch/llama-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF $launcher >&2
  ninja -C "$scratch/llama-build" -j"$jobs" llama-finetune llama-bench llama-perplexity >&2
fi
tree=$(ls -d "$scratch"/llama_cpp_python-*/vendor/llama.cpp | tail -1)
version=$(basename "$(dirname "$(dirname "$tree")")")

# 2. The models (once): HF folder, then GGUF f32 and bf16.
make_model() {  # $1 name, $2 config.json
  local dir=$scratch/models/$1
  if [ ! -f "$dir/model.safetensors" ]; then
    "$py" "$src/bench/generate/make_model.py" "$dir" "$2" >&2
    cp "$src"/assets/qwen3-tokenizer/tokenizer.json "$src"/assets/qwen3-tokenizer/tokenizer_config.json "$dir/"
  fi
  for t in f32 bf16; do
    [ -f "$dir.$t.gguf" ] || "$py" "$tree/convert_hf_to_gguf.py" "$dir" --outtype "$t" --outfile "$dir.$t.gguf" >&2
  done
}
make_model train-step "$src/bench/train_step/model/config.json"
make_model qwen3-0.6b "$src/bench/generate/config.json"
small=$scratch/models/train-step
big=$scratch/models/qwen3-0.6b

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) CPUs), llama.cpp from $version, $threads threads"
TITAN_NUM_THREADS=$threads "$titan" info --peak --threads "$threads"

# 3a. Fine-tuning. llama-finetune trains on windows of 512 tokens of a text (stride 256), one
# per step; its progress bar gives the datapoints done and the seconds since the epoch began, so
# the rate is taken from the first step's end to the last (the first step, with its graph
# allocation, is left out). The text: the repo's docs, tokenized by the model's own tokenizer.
cat "$src"/README.md "$src"/docs/*.md > "$out/text.txt"
while [ "$(wc -c < "$out/text.txt")" -lt $(( (steps + 3) * 256 * 5 )) ]; do cat "$out/text.txt" "$out/text.txt" > "$out/t2"; mv "$out/t2" "$out/text.txt"; done
"$py" - "$out/text.txt" "$(( (steps + 2) * 256 * 4 ))" <<'PY'  # keep about steps + 2 windows of text
import sys
p, n = sys.argv[1], int(sys.argv[2])
t = open(p, encoding="utf-8", errors="ignore").read()
open(p, "w").write(t[:n])
PY
OMP_NUM_THREADS=$threads "$bin/llama-finetune" -m "$small.f32.gguf" -f "$out/text.txt" -c 512 -b 512 -ub 512 \
  -t "$threads" --epochs 1 -opt adamw -o "$out/finetuned.gguf" > "$out/ft.log" 2>&1 || { tail -20 "$out/ft.log" >&2; exit 1; }
llama_ft=$("$py" - "$out/ft.log" <<'PY'
import re, sys
segs = re.split(r"[\r\n]", open(sys.argv[1], encoding="utf-8", errors="ignore").read())
pts = []
for s in segs:
    m = re.search(r"train:.*data=(\d+)/(\d+).*t=(\d+):(\d+):(\d+)", s)
    if m:
        pts.append((int(m[1]), 3600 * int(m[3]) + 60 * int(m[4]) + int(m[5])))
(d0, t0), (d1, t1) = pts[0], pts[-1]
print(f"{(d1 - d0) * 512 / max(t1 - t0, 1):.1f} {d1}")
PY
)
read -r llama_ft_tps llama_ft_n <<< "$llama_ft"
TITAN_NUM_THREADS=$threads "$titan" train --config "$src/bench/train_step/bench.toml" --job.dump_folder "$out/titan-ft" \
  --model.hf_assets_path "$small" --training.local_batch_size 1 --training.seq_len 512 --training.steps "$steps" \
  --training.mixed_precision_param float32 --compute.threads "$threads" > "$out/titan-ft.log" 2>&1 ||
  { tail -20 "$out/titan-ft.log" >&2; exit 1; }
titan_ft=$(grep -o '"median_tps": *[0-9.e+-]*' "$out/titan-ft/summary.json" | grep -o '[0-9.e+-]*$')

# 3b. Prefill and decode.
g++ -O3 -march=native -pthread -o "$out/stream_probe" "$src/bench/generate/stream_probe.cpp"
read -r copy_bw read_bw < <("$out/stream_probe" "$threads")
bench() {  # $1 gguf -> "pp_tps tg_tps"
  OMP_NUM_THREADS=$threads "$bin/llama-bench" -m "$1" -p 512 -n 128 -t "$threads" -r "$reps" -o json > "$out/lb.json" 2> "$out/lb.err" ||
    { cat "$out/lb.err" >&2; exit 1; }
  "$py" -c "import json; r = json.load(open('$out/lb.json')); pp = [x['avg_ts'] for x in r if x['n_prompt'] > 0]; tg = [x['avg_ts'] for x in r if x['n_gen'] > 0]; print(pp[0], tg[0])"
}
prompt=$("$py" -c "import random; r = random.Random(1); print(' '.join(str(r.randrange(151936)) for _ in range(512)))")
gen() {  # $1 dtype -> "prefill_tps decode_tps"
  TITAN_NUM_THREADS=$threads "$titan" generate --model "$big" --prompt-ids "$prompt" --max-new-tokens 128 \
    --temperature 0 --dtype "$1" --json > "$out/gen.json" 2> "$out/gen.err" || { cat "$out/gen.err" >&2; exit 1; }
  sed -n 's/.*prefill \([0-9.]*\) tokens\/s, decode \([0-9.]*\) tokens\/s.*/\1 \2/p' "$out/gen.err"
}
read -r lpp32 ltg32 < <(bench "$big.f32.gguf")
read -r tpp32 ttg32 < <(gen f32)
read -r lppbf ltgbf < <(bench "$big.bf16.gguf")
read -r tppbf ttgbf < <(gen bf16)
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$py" - "$big/config.json" "$copy_bw" "$read_bw" "$llama_ft_tps" "$llama_ft_n" "$titan_ft" "$steps" \
  "$lpp32" "$ltg32" "$tpp32" "$ttg32" "$lppbf" "$ltgbf" "$tppbf" "$ttgbf" "$threads" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
copy_bw, read_bw, lft, lftn, tft = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
steps = int(sys.argv[7])
lpp32, ltg32, tpp32, ttg32, lppbf, ltgbf, tppbf, ttgbf = map(float, sys.argv[8:16])
threads = int(sys.argv[16])
H, L, I, V, D = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
q, kv = c["num_attention_heads"] * D, c["num_key_value_heads"] * D
mat = L * (H * (q + 2 * kv) + q * H + 3 * H * I) + V * H  # matmul weights read per token, tied lm_head once
print(f"read bandwidth {read_bw:.2f} GB/s (copy {copy_bw:.2f}) on {threads} threads; weights per token "
      f"f32 {4 * mat / 1e9:.3f} GB, bf16 {2 * mat / 1e9:.3f} GB: decode bound f32 {read_bw * 1e9 / (4 * mat):.2f}, "
      f"bf16 {read_bw * 1e9 / (2 * mat):.2f} tok/s")
print()
print("| job | llama.cpp | titan | titan / llama.cpp |")
print("|---|---:|---:|---:|")
print(f"| full fine-tuning f32, AdamW, 1 x 512 tokens per step (llama-finetune {lftn} steps, titan {steps}) | "
      f"{lft:.1f} tok/s | {tft:.1f} | {tft / lft:.2f}x |")
print(f"| Qwen3-0.6B shapes, prefill 512 f32 / bf16 (llama-bench pp512) | {lpp32:.1f} / {lppbf:.1f} | "
      f"{tpp32:.1f} / {tppbf:.1f} | {tpp32 / lpp32:.2f}x / {tppbf / lppbf:.2f}x |")
print(f"| Qwen3-0.6B shapes, decode f32 / bf16 (llama-bench tg128) | {ltg32:.2f} / {ltgbf:.2f} | "
      f"{ttg32:.2f} / {ttgbf:.2f} | {ttg32 / ltg32:.2f}x / {ttgbf / ltgbf:.2f}x |")
print()
print("| decode | bound tok/s | llama.cpp | titan |")
print("|---|---:|---:|---:|")
for dt, bpw, l, t in (("f32", 4, ltg32, ttg32), ("bf16", 2, ltgbf, ttgbf)):
    b = read_bw * 1e9 / (bpw * mat)
    print(f"| {dt} | {b:.2f} | {l:.2f} ({100 * l / b:.0f}%) | {t:.2f} ({100 * t / b:.0f}%) |")
PY
