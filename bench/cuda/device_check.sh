#!/usr/bin/env bash
# device_check.sh [--dry-run]: the GPU checks of the CUDA path (docs/cuda.md), for one H200 with no
# network, within 8 minutes. Everything it prints is also written under $OUT (default
# /tmp/titan-device-check): summary.txt, and one log per step.
#
#   1. build: TITAN_CUDA=ON, TITAN_CUDA_RUNTIME=ON into build-cuda/ (or BUILD=dir: a build carried
#      with the tree), nvcc for sm_90; the -Xptxas -v table and the register-spill gate
#   2. titan verify kernels --device cuda: every case-table row of every cuda variant, on the GPU
#   3. the kernel tests (test_ops_cuda) on the GPU, then under compute-sanitizer memcheck,
#      racecheck and synccheck (the pointer-level kernel tests)
#   4. the debug recipe, 30 steps, CPU kernels vs the cuda variants ([kernels] replace): f32 losses
#      within 1e-3 relative; likewise a 2-layer Qwen3-MoE debug model, moe.grouped_gemm vs moe.cuda
#   5. throughput: not measured yet (no [compute] device = "cuda" training path; the cuda variants
#      stage host tensors per call) -- printed as such, never estimated
#
# --dry-run: the CPU parts on this machine's emulator build (BUILD, default build/): the spill
# gate, verify kernels --device cuda under the emulator, the kernel tests, and 2 steps of the
# recipe with the cuda variants of the norms, SwiGLU, embedding, RoPE and attention (the GEMMs
# stay on the CPU), 2 steps of the MoE model with
# moe.cuda (its small expert GEMMs run on the emulator); no nvidia-smi, no
# compute-sanitizer.
set -uo pipefail
cd "$(dirname "$0")/../.."
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
OUT=${OUT:-/tmp/titan-device-check}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: > "$summary"
start=$(date +%s)
failed=0
say() { echo "$*" | tee -a "$summary"; }
# step NAME CMD...: runs CMD with its output in $OUT/NAME.log; one summary line with the time.
step() {
  local name=$1
  shift
  local t0=$(date +%s)
  if "$@" > "$OUT/$name.log" 2>&1; then
    say "ok    $name ($(( $(date +%s) - t0 )) s)"
  else
    say "FAIL  $name ($(( $(date +%s) - t0 )) s): $(tail -3 "$OUT/$name.log" | tr '\n' ' ')"
    failed=1
  fi
}

if [ $dry = 1 ]; then
  BUILD=${BUILD:-build}
  say "device_check --dry-run: CPU parts only, kernels under the grid emulator ($BUILD)"
  [ -x "$BUILD/titan" ] || { say "FAIL  no $BUILD/titan: build first (cmake -S . -B $BUILD -G Ninja && ninja -C $BUILD)"; exit 1; }
else
  say "device_check on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'NO GPU FOUND')"
  command -v nvidia-smi > /dev/null || { say "FAIL  no nvidia-smi: not a GPU machine (use --dry-run)"; exit 1; }
  if [ -z "${BUILD:-}" ]; then
    BUILD=build-cuda
    step build bash -c "cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_CUDA=ON -DTITAN_CUDA_RUNTIME=ON \
      -DTITAN_CUDA_ARCHS=90 && ninja -C $BUILD -j$(nproc) titan test_ops_cuda test_core_cuda_emu titan_cuda_kernels"
  fi
fi

logs=$(ls "$BUILD"/cuda/*.ptxas.txt 2> /dev/null)
if [ -n "$logs" ]; then
  step ptxas bash tools/cuda/ptxas_report.sh --hot 'rmsnorm|swiglu|adamw|attention|attn|gemm|epilogue|cross_entropy|ce_rows|gd_|conv1d|moe_|foreach_' $logs
  cp "$OUT/ptxas.log" "$OUT/ptxas_table.txt"
else
  say "skip  ptxas: no nvcc logs in $BUILD/cuda (TITAN_CUDA=OFF or no nvcc)"
fi
step verify_kernels_cuda "$BUILD/titan" verify kernels --device cuda
step kernel_tests "$BUILD/test_ops_cuda"
if [ $dry = 0 ]; then
  if command -v compute-sanitizer > /dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck synccheck; do
      step "sanitizer_$tool" "$cs" --tool $tool --error-exitcode 1 "$BUILD/test_ops_cuda" --gtest_filter='CudaKernelsRaw.*'
    done
  else
    say "skip  compute-sanitizer: not installed"
  fi
fi

# The recipe, CPU kernels against the cuda variants.
if [ $dry = 1 ]; then
  steps=2
  replace='["**.norm=rmsnorm.cuda","model.layers.*.mlp=swiglu.cuda","model.embed_tokens=embedding.cuda","**.rope=rope.cuda","**.attention=attention.cuda"]'
  extra=(--training.seq_len 32 --training.local_batch_size 2)
else
  steps=30
  replace='["**.norm=rmsnorm.cuda","model.layers.*.mlp=swiglu.cuda","model.embed_tokens=embedding.cuda","**.rope=rope.cuda","**.attention=attention.cuda","model.layers.*.linear=linear.cuda","lm_head=cross_entropy.cuda"]'
  extra=()
fi
train() {  # folder [replace]
  "$BUILD/titan" train --config recipes/debug.toml --training.steps $steps --metrics.log_freq 1 \
    --checkpoint.enable false --job.dump_folder "$1" "${extra[@]}" ${2:+--kernels.replace "$2"}
}
rm -rf "$OUT/train_cpu" "$OUT/train_cuda"
step train_cpu train "$OUT/train_cpu"
step train_cuda train "$OUT/train_cuda" "$replace"
# A small Qwen3-MoE model (2 sparse layers, expert-bias balancing on), its MoE blocks on the CPU
# grouped-GEMM variant against moe.cuda (the rest on the CPU kernels).
moe_args=(--model.name qwen3_moe --model.flavor debug-moe --model.n_layers 2 --model.load_balance_coeff 0.01
          --training.seq_len 32 --training.local_batch_size 2 --lr_scheduler.warmup_steps 1)
rm -rf "$OUT/train_moe_cpu" "$OUT/train_moe_cuda"
extra=("${moe_args[@]}")
step train_moe_cpu train "$OUT/train_moe_cpu" 'model.layers.*.mlp=moe.grouped_gemm'
step train_moe_cuda train "$OUT/train_moe_cuda" 'model.layers.*.mlp=moe.cuda'
field() { grep -o '"loss":[-0-9.e+]*' "$1/metrics.jsonl" 2> /dev/null | cut -d: -f2; }
tol=1e-3
[ $dry = 1 ] && tol=1e-5
compare() {  # file label cpu_folder cuda_folder
  if paste <(field "$3") <(field "$4") | awk -v tol=$tol -v steps=$steps '
      { n++; d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d; printf "step %d cpu %.6f cuda %.6f rel %.2e\n", n, $1, $2, d }
      END { printf "max rel diff %.3e (tol %g) over %d steps\n", m, tol, n; exit (n != steps || m > tol) }' > "$OUT/$1.txt"; then
    say "ok    $2: $(tail -1 "$OUT/$1.txt")"
  else
    say "FAIL  $2: $(tail -1 "$OUT/$1.txt" 2> /dev/null)"
    failed=1
  fi
}
compare loss_curve "loss curve" "$OUT/train_cpu" "$OUT/train_cuda"
compare moe_loss_curve "MoE loss curve" "$OUT/train_moe_cpu" "$OUT/train_moe_cuda"
say "skip  throughput (tokens/s, MFU vs 989 TFLOP/s): no device training path yet; nothing measured"
say "total $(( $(date +%s) - start )) s, $([ $failed = 0 ] && echo 'all checks passed' || echo 'FAILURES above')"
exit $failed
