#!/usr/bin/env bash
# A multi-machine data-parallel run on one machine: two network namespaces stand for two hosts
# (own loopback, own eth0 with 10.77.0.1 / 10.77.0.2 on a /24, veth pairs into a Linux bridge in
# the root namespace, own hostname through a UTS namespace). mpirun runs on host a, as a user
# would on the first machine, with a hostfile naming both hosts by IP, TCP between hosts, and
# tests/cli/distributed/netns_rsh.sh as the remote-shell agent in place of ssh. Checks:
#  - smoke: 4 ranks (2 slots per host) report the expected namespace and hostname;
#  - the debug model (1 layer, seq 32, global batch 4, 4 steps) on 2 ranks, one per host, gives the
#    1-process loss curve within 1e-5 relative; each rank ran in its host's namespace; rank 0
#    alone logged and wrote metrics.jsonl;
#  - the gradient/parameter exchange crossed host b's veth: in each direction at least half the
#    parameter bytes per step (what a rank must receive to update its half of a sharded state);
#  - every connection accepted across the hosts used a port of the pinned ranges
#    (oob 46000-46009, btl 46100-46199): the firewall rules of docs/distributed.md suffice.
# TITAN_DIST_FULL=1 adds 4 ranks, 2 per host (shared memory within a host, TCP across).
# Skips (77) when not root, when ip/mpirun/unshare/ss are missing, when network namespaces,
# veth or bridges are not permitted (a container without CAP_SYS_ADMIN / CAP_NET_ADMIN), or when
# the namespaces cannot reach each other over the bridge (a bridge firewall).
set -uo pipefail
titan=$(realpath "$1") src=$(realpath "$2")  # absolute: the test works in its own folder
source "$src/tests/cli/distributed/env.sh"  # curve / compare (its MPIRUN_ARGS are for one host: not used here)
PATH=$PATH:/usr/sbin:/sbin
export LC_ALL=C  # untranslated error texts (reach) and byte-order sort
skip() { echo "skipping: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
for c in ip mpirun unshare ss timeout; do command -v "$c" > /dev/null || skip "$c not found"; done

# Unique names (parallel ctest runs); the /24 lives only inside this run's namespaces and bridge,
# so it cannot collide with the machine's networks or with another run.
nsa=titan-mh$$-a nsb=titan-mh$$-b br=tmh$$br vetha=tmh$$a vethb=tmh$$b
ipa=10.77.0.1 ipb=10.77.0.2 net=10.77.0.0/24
work=$(mktemp -d)
sampler='' child=''
cleanup() {
  local ns pids
  [ -n "$sampler" ] && kill "$sampler" 2> /dev/null && wait "$sampler"
  [ -n "$child" ] && kill "$child" 2> /dev/null
  for ns in "$nsa" "$nsb"; do  # daemons or ranks left by a failed run: ours, by pid
    pids=$(ip netns pids "$ns" 2> /dev/null) && [ -n "$pids" ] && kill -9 $pids 2> /dev/null
  done
  ip link del "$vetha" 2> /dev/null; ip link del "$vethb" 2> /dev/null; ip link del "$br" 2> /dev/null
  ip netns del "$nsa" 2> /dev/null; ip netns del "$nsb" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# --- the two hosts --------------------------------------------------------------------------
err=$(ip netns add "$nsa" 2>&1) || skip "ip netns add not permitted here: $err"
err=$(ip netns add "$nsb" 2>&1) || skip "ip netns add not permitted here: $err"
err=$(ip link add "$br" type bridge 2>&1 && ip link set "$br" up 2>&1) || skip "cannot create a bridge: $err"
for h in a b; do
  ns=ns$h veth=veth$h addr=ip$h
  err=$(ip link add "${!veth}" type veth peer name eth0 netns "${!ns}" 2>&1 &&
        ip link set "${!veth}" master "$br" 2>&1 && ip link set "${!veth}" up 2>&1 &&
        ip -n "${!ns}" link set lo up 2>&1 && ip -n "${!ns}" addr add "${!addr}/24" dev eth0 2>&1 &&
        ip -n "${!ns}" link set eth0 up 2>&1) || skip "cannot wire namespace ${!ns} to the bridge: $err"
done
err=$(ip netns exec "$nsa" unshare --uts true 2>&1) || skip "unshare --uts not permitted: $err"
# A TCP connect to a closed port is refused at once when the peer is reachable; a firewall that
# drops bridged packets makes it time out instead.
reach() { local out; out=$(ip netns exec "$1" timeout 2 bash -c "exec 3<> /dev/tcp/$2/9" 2>&1); [[ $out == *refused* ]]; }
for _ in 1 2 3; do reach "$nsa" "$ipb" && reach "$nsb" "$ipa" && break; sleep 1; done
reach "$nsa" "$ipb" && reach "$nsb" "$ipa" ||
  skip "the namespaces cannot reach each other over bridge $br (bridge firewall: br_netfilter with iptables/nftables?)"

printf '%s slots=2\n%s slots=2\n' "$ipa" "$ipb" > "$work/hosts"
printf '%s %s\n%s %s\n' "$ipa" "$nsa" "$ipb" "$nsb" > "$work/netns.map"
# OpenMPI splits the agent value at spaces: give it a path without any.
cp "$src/tests/cli/distributed/netns_rsh.sh" "$work/netns_rsh" && chmod +x "$work/netns_rsh"
export TITAN_NETNS_MAP=$work/netns.map TITAN_NETNS_LOG=$work/rsh.log
export OMP_NUM_THREADS=1
# The multi-machine options of docs/distributed.md, plus --bind-to none and yielding for this
# 2-core machine (every "host" would otherwise bind its first rank to core 0). No tree spawn:
# the launch node calls the agent for every host, as it would call ssh.
mpi=(--allow-run-as-root --hostfile "$work/hosts" --bind-to none --mca mpi_yield_when_idle 1
     --mca plm_rsh_agent "$work/netns_rsh" --mca plm_rsh_no_tree_spawn 1
     --mca btl self,vader,tcp --mca btl_vader_single_copy_mechanism none
     --mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net"
     --mca oob_tcp_dynamic_ipv4_ports 46000-46009 --mca btl_tcp_port_min_v4 46100 --mca btl_tcp_port_range_v4 100
     -x OMP_NUM_THREADS)
[ -n "${OPENBLAS_CORETYPE:-}" ] && mpi+=(-x OPENBLAS_CORETYPE)
# Long commands run in the background and are waited for, so that a signal to this script runs the
# cleanup at once (bash defers traps until a foreground child ends).
bg() { "$@" & child=$!; wait $child; local rc=$?; child=; return $rc; }
on_host_a() { ip netns exec "$nsa" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$nsa" "$@"; }
cd "$work" || fail "cd $work"
SECONDS=0

# --- smoke: where do the ranks run? ------------------------------------------------------------
bg on_host_a timeout 60 mpirun "${mpi[@]}" -np 4 sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname) $(ip netns identify $$)"' \
  > smoke.log 2>&1 || { cat smoke.log; fail "mpirun across the namespaces failed (hostname smoke run)"; }
expect=$(printf '0 %s %s\n1 %s %s\n2 %s %s\n3 %s %s\n' "$nsa" "$nsa" "$nsa" "$nsa" "$nsb" "$nsb" "$nsb" "$nsb")
[ "$(sort smoke.log)" = "$expect" ] || { cat smoke.log; fail "ranks are not in the expected namespaces"; }
[ "$(cat rsh.log)" = "$ipb $nsb" ] || { cat rsh.log; fail "the agent should have started one daemon, in $nsb"; }
echo "smoke: ranks 0,1 in $nsa, 2,3 in $nsb; agent launched 1 daemon ($(cat rsh.log)) (${SECONDS}s)"

# --- training -----------------------------------------------------------------------------------
steps=4
common=(--config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --training.local_batch_size 1
        --training.global_batch_size 4 --training.steps "$steps" --metrics.log_freq 1 --metrics.enable_tensorboard false
        --checkpoint.enable false --checkpoint.last_save_in_hf false --lr_scheduler.warmup_steps 2 --compute.threads 1
        --parallelism.data_parallel_shard_degree -1)
# Each rank notes its hostname and namespace, then becomes titan.
where='echo "$(hostname) $(ip netns identify $$)" > "$0.$OMPI_COMM_WORLD_RANK" && exec "$@"'
bytes() { cat "/sys/class/net/$vethb/statistics/$1_bytes"; }
# Sockets of both hosts, sampled until FILE exists (or this script is gone): "NS STATE RECVQ SENDQ
# LOCAL PEER".
sample() { while [ ! -e "$1" ] && kill -0 $$ 2> /dev/null; do for ns in "$nsa" "$nsb"; do ip netns exec "$ns" ss -tanH | sed "s/^/$ns /"; done; sleep 0.2; done; }
multi() {  # multi NAME NP MPIRUN-OPTIONS...: train on NP ranks across the hosts
  local name=$1 np=$2; shift 2
  bg on_host_a timeout 180 mpirun "${mpi[@]}" -np "$np" "$@" sh -c "$where" "$work/$name.where" \
    "$titan" train "${common[@]}" --job.dump_folder "$work/$name" > "$name.log" 2>&1 ||
    { tail -20 "$name.log"; fail "$name: $np ranks across 2 hosts exited non-zero"; }
  [ "$(grep -c "step: *$steps " "$name.log")" = 1 ] || fail "$name: not exactly one rank logged step $steps"
  grep -q "\"world\":$np" "$name/metrics.jsonl" || fail "$name: metrics.jsonl lacks \"world\":$np"
  echo "$name: $np ranks on 2 hosts, done at ${SECONDS}s"
}
bg "$titan" train "${common[@]}" --job.dump_folder "$work/one" > one.log 2>&1 || { tail -20 one.log; fail "1-process run exited non-zero"; }
echo "one: 1 process, done at ${SECONDS}s"

rx0=$(bytes rx) tx0=$(bytes tx)
sample "$work/two.done" > ss.log & sampler=$!
multi two 2 --map-by node
touch "$work/two.done"; wait $sampler; sampler=
rx=$(( $(bytes rx) - rx0 )) tx=$(( $(bytes tx) - tx0 ))
for r in 0 1; do
  h=$([ $r = 0 ] && echo "$nsa" || echo "$nsb")
  [ "$(cat "two.where.$r" 2> /dev/null)" = "$h $h" ] || fail "rank $r ran in '$(cat "two.where.$r" 2> /dev/null)', not $h"
done
echo "two: rank 0 in $(cat two.where.0), rank 1 in $(cat two.where.1)"

[ "$(curve one/metrics.jsonl | wc -l)" -eq $steps ] || fail "1-process run logged $(wc -l < one/metrics.jsonl) steps"
[ "$(curve two/metrics.jsonl | wc -l)" -eq $steps ] || fail "2-rank run logged $(wc -l < two/metrics.jsonl) steps"
echo -n "2 ranks on 2 hosts vs 1 process: "; compare one/metrics.jsonl two/metrics.jsonl || fail "2-host curve differs"

# Traffic through host b's veth (tx: into host b, rx: out of it).
pbytes=$("$titan" info --model debugmodel --n-layers 1 --seq-len 32 --json | sed -nE 's/.*"param_bytes": ([0-9]+).*/\1/p')
[ -n "$pbytes" ] || fail "titan info --json gave no param_bytes"
need=$(( steps * pbytes / 2 ))
awk -v rx="$rx" -v tx="$tx" -v p="$pbytes" -v s=$steps 'BEGIN {
  printf "host b veth: %.1f MB in, %.1f MB out over %d steps (%.2f / %.2f x parameter bytes per step)\n",
         tx / 1e6, rx / 1e6, s, tx / p / s, rx / p / s }'
[ "$tx" -ge "$need" ] && [ "$rx" -ge "$need" ] || fail "less than $need bytes each way crossed host b's veth"

# Connections accepted across the hosts (local port is one the namespace listens on) use the
# pinned ranges.
ports=$(awk -v a="$ipa" -v b="$ipb" '
  { split($5, l, ":"); split($6, p, ":") }
  $2 == "LISTEN" { listen[$1 " " l[2]] = 1; next }
  $2 == "ESTAB" && ((l[1] == a && p[1] == b) || (l[1] == b && p[1] == a)) { conn[$1 " " l[2]] = 1 }
  END { for (c in conn) if (c in listen) print c }' ss.log | sort -u)
echo "accepted across hosts (namespace port): ${ports//$'\n'/, }"
# The daemon on b connects to mpirun's oob port on a; the btl connection between the ranks goes
# either way (whichever rank connects first).
echo "$ports" | awk 'NF == 0 { next } { p = $2 } p >= 46000 && p <= 46009 { oob = 1; next } p >= 46100 && p <= 46199 { btl = 1; next }
                     { bad = 1; print "port " p " on " $1 " is outside the pinned ranges" }
                     END { if (!oob || !btl) print "no accepted " (oob ? "btl" : "oob") " connection seen"; exit bad || !oob || !btl }' ||
  fail "connections across hosts do not match the pinned port ranges"

if [ "${TITAN_DIST_FULL:-0}" = 1 ]; then
  multi four 4
  for r in 0 1 2 3; do
    h=$([ $r -lt 2 ] && echo "$nsa" || echo "$nsb")
    [ "$(cat "four.where.$r" 2> /dev/null)" = "$h $h" ] || fail "4 ranks: rank $r ran in '$(cat "four.where.$r" 2> /dev/null)', not $h"
  done
  echo -n "4 ranks on 2 hosts vs 1 process: "; compare one/metrics.jsonl four/metrics.jsonl || fail "4-rank curve differs"
fi
echo "ok (${SECONDS}s)"
