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
#   4. the debug recipe, 30 steps, on the CPU and on cuda:0 ([compute] device = "cuda": the model,
#      gradients and AdamW state on the GPU), f32: losses within 1e-3 relative; then bf16 mixed
#      precision, within 2%; a 2-layer Qwen3-MoE debug model, moe.grouped_gemm vs moe.cuda
#      ([kernels] replace, host tensors staged per call), f32 within 1e-3
#   5. throughput: the Qwen3-0.6B flavor, bf16, seq 4096, batch 1, 8 steps on cuda:0: titan's
#      median steady-state tokens/s and MFU against 989 TFLOP/s ([metrics] peak_tflops); PyTorch
#      eager and torch.compile on the same shapes (bench/train_step/torch_baseline.py --device
#      cuda) when this machine's python3 has torch with CUDA
#
# --dry-run: the CPU parts on this machine's emulator build (BUILD, default build/): the spill
# gate, verify kernels --device cuda under the emulator, the kernel tests, 2 steps of the recipe
# (seq 32, batch 2) on cuda:0 under the emulator against the CPU within 1e-5, f32 and bf16
# (bf16 within 2%), 2 steps of the MoE model with moe.cuda (its small expert GEMMs run on the
# emulator), and step 5's titan command checked by `titan info` (nothing timed); no nvidia-smi,
# no compute-sanitizer.
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

# The recipe on the CPU and on cuda:0, f32 and bf16 mixed precision.
if [ $dry = 1 ]; then
  steps=2
  base=(--training.seq_len 32 --training.local_batch_size 2)
else
  steps=30
  base=()
fi
train() {  # folder [replace]
  "$BUILD/titan" train --config recipes/debug.toml --training.steps $steps --metrics.log_freq 1 \
    --checkpoint.enable false --job.dump_folder "$1" "${extra[@]}" ${2:+--kernels.replace "$2"}
}
rm -rf "$OUT"/train_cpu* "$OUT"/train_cuda*
bf16=(--training.mixed_precision_param bfloat16)
extra=("${base[@]}")
step train_cpu train "$OUT/train_cpu"
extra=("${base[@]}" --compute.device cuda)
step train_cuda train "$OUT/train_cuda"
extra=("${base[@]}" "${bf16[@]}")
step train_cpu_bf16 train "$OUT/train_cpu_bf16"
extra=("${base[@]}" "${bf16[@]}" --compute.device cuda)
step train_cuda_bf16 train "$OUT/train_cuda_bf16"
# A small Qwen3-MoE model (2 sparse layers, expert-bias balancing on), its MoE blocks on the CPU
# grouped-GEMM variant against moe.cuda (the rest on the CPU kernels).
moe_args=(--model.name qwen3_moe --model.flavor debug-moe --model.n_layers 2 --model.load_balance_coeff 0.01
          --training.seq_len 32 --training.local_batch_size 2 --lr_scheduler.warmup_steps 1)
rm -rf "$OUT/train_moe_cpu" "$OUT/train_moe_cuda"
extra=("${moe_args[@]}")
step train_moe_cpu train "$OUT/train_moe_cpu" 'model.layers.*.mlp=moe.grouped_gemm'
step train_moe_cuda train "$OUT/train_moe_cuda" 'model.layers.*.mlp=moe.cuda'
field() { grep -o '"loss":[-0-9.e+]*' "$1/metrics.jsonl" 2> /dev/null | cut -d: -f2; }
f32_tol=1e-3
[ $dry = 1 ] && f32_tol=1e-5
compare() {  # file label cpu_folder cuda_folder [tol]
  local tol=${5:-$f32_tol}
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
compare loss_curve_bf16 "bf16 loss curve" "$OUT/train_cpu_bf16" "$OUT/train_cuda_bf16" 0.02
compare moe_loss_curve "MoE loss curve" "$OUT/train_moe_cpu" "$OUT/train_moe_cuda"

# 5. Throughput on cuda:0: the Qwen3-0.6B flavor, bf16, seq 4096.
tp_args=(--config recipes/debug.toml --model.flavor 0.6B --training.seq_len 4096 --training.local_batch_size 1
         --training.steps 8 --training.mixed_precision_param bfloat16 --compute.device cuda --metrics.peak_tflops 989
         --metrics.perf_warmup_steps 2 --metrics.log_freq 1 --checkpoint.enable false --metrics.enable_tensorboard false)
if [ $dry = 1 ]; then
  step throughput_config "$BUILD/titan" info "${tp_args[@]}"
  say "skip  throughput (tokens/s, MFU vs 989 TFLOP/s): a GPU measurement; the dry run checked its config only"
else
  rm -rf "$OUT/throughput"
  step throughput "$BUILD/titan" train "${tp_args[@]}" --job.dump_folder "$OUT/throughput"
  if [ -f "$OUT/throughput/summary.json" ]; then
    say "      titan: $(grep -o '"median_tps": *[0-9.e+-]*' "$OUT/throughput/summary.json") tokens/s," \
        "$(grep -o '"median_mfu": *[0-9.e+-]*' "$OUT/throughput/summary.json") % MFU of 989 TFLOP/s," \
        "$(grep -o '"peak_memory_gib": *[0-9.e+-]*' "$OUT/throughput/summary.json") GiB peak"
  fi
  if python3 -c 'import torch, transformers, sys; sys.exit(not torch.cuda.is_available())' 2> /dev/null; then
    shape=(--hidden 1024 --layers 28 --heads 16 --kv-heads 8 --head-dim 128 --ffn 3072 --vocab 151936 --seq 4096
           --batch 1 --steps 6 --warmup 2 --bf16 --device cuda)
    step torch_eager python3 bench/train_step/torch_baseline.py "${shape[@]}"
    step torch_compile python3 bench/train_step/torch_baseline.py "${shape[@]}" --compile
    for f in torch_eager torch_compile; do say "      $f: $(grep -o '"tokens_per_s": *[0-9.e+-]*' "$OUT/$f.log" | tail -1)"; done
  else
    say "skip  PyTorch on the GPU: python3 has no torch with CUDA here"
  fi
fi
say "total $(( $(date +%s) - start )) s, $([ $failed = 0 ] && echo 'all checks passed' || echo 'FAILURES above')"
exit $failed
