# Sourced by the CLI tests that hold `titan info`'s memory prediction to a real run (moe_model.sh,
# qwen3_5_train.sh, qwen3_5_lora.sh); needs $titan and a fail() from the caller.
# peak_check NAME METRICS ARGS...: `titan info ARGS --json`'s predicted step peak against the
# allocator's peak that the run with ARGS logged last (metrics.jsonl's memory_peak_gib), within 10%.
peak_check() {
  local name=$1 metrics=$2 p m; shift 2
  p=$("$titan" info "$@" --json | sed -nE 's/.*"step_peak_bytes": ([0-9]+).*/\1/p')
  m=$(tail -1 "$metrics" | sed -nE 's/.*"memory_peak_gib":([0-9.e-]+).*/\1/p')
  [ -n "$p" ] && [ -n "$m" ] || fail "$name: no predicted step peak ('$p') or measured peak ('$m')"
  awk -v p="$p" -v m="$m" -v n="$name" 'BEGIN { p /= 1048576; m *= 1024
        printf "ok: %s step peak: titan info %.3f MiB, measured %.3f MiB (predicted / measured %.4f)\n", n, p, m, p / m
        exit !(m > 0.9 * p && m < 1.1 * p) }' || fail "$name: titan info's step peak is off by more than 10%"
}
