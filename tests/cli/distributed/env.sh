# Sourced by tests/cli/dist_*.sh and lora_dist.sh: fail, run, the loss-curve helpers below, and mpirun
# options for this sandbox — root, more ranks than cores, shared-memory transport only, and ranks
# that yield the core while they wait in a collective (busy polling starves the computing rank
# when ranks outnumber cores).
MPIRUN_ARGS=(--allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none
             --mca mpi_yield_when_idle 1 --bind-to none)
export OMPI_MCA_rmaps_base_oversubscribe=1

# "step loss" per line of a metrics.jsonl
curve() { sed -E 's/.*"loss":([^,]*).*"step":([0-9]+).*/\2 \1/' "$1"; }
# compare A B [TOL]: every step of B's metrics.jsonl is in A's with a loss within TOL relative (1e-5)
compare() {
  awk -v tol="${3:-1e-5}" 'NR==FNR { a[$1] = $2; next }
       { if (!($1 in a)) { print "step " $1 " missing"; bad = 1; next }
         d = a[$1] - $2; if (d < 0) d = -d; r = d / (a[$1] < 0 ? -a[$1] : a[$1]); if (r > worst) worst = r
         if (r > tol) { print "step " $1 ": " a[$1] " vs " $2; bad = 1 } n++ }
       END { printf "%d steps, worst relative difference %.2e\n", n, worst; exit bad || n == 0 }' <(curve "$1") <(curve "$2")
}

fail() { echo "FAIL: $*"; exit 1; }
# run NAME NP ARGS...: `titan train` with the caller's $titan, "${common[@]}" and ARGS into
# $work/NAME (log: $work/NAME.log), on NP ranks under mpirun (NP 1: one plain process).
run() {
  local name=$1 np=$2; shift 2
  if [ "$np" = 1 ]; then "$titan" train "${common[@]}" --job.dump_folder "$work/$name" "$@" > "$work/$name.log" 2>&1
  else mpirun "${MPIRUN_ARGS[@]}" -np "$np" "$titan" train "${common[@]}" --job.dump_folder "$work/$name" "$@" \
         > "$work/$name.log" 2>&1; fi || { tail -20 "$work/$name.log"; fail "$name ($np ranks) exited non-zero"; }
  echo "$name: $np rank(s), done at ${SECONDS}s"
}
