#!/bin/sh
# OpenMPI remote-shell agent for tests/cli/dist_multihost.sh (`--mca plm_rsh_agent PATH`): stands
# in for ssh, with network namespaces as the machines. OpenMPI 4.1 calls it as
#   netns_rsh.sh HOST ' orted --daemonize -mca ess "env" ... -mca orte_hnp_uri "...;tcp://IP:PORT" ...'
# (the command as words meant for the remote shell, quotes included). Like ssh it joins the words
# and hands them to a shell "on HOST": in HOST's network namespace, in a UTS namespace whose
# hostname is the namespace's name, with a fresh environment (PATH, HOME, LD_LIBRARY_PATH only),
# so that variables reach the ranks only through `mpirun -x`, as across real machines.
#   TITAN_NETNS_MAP  file of "HOST NAMESPACE" lines (required)
#   TITAN_NETNS_LOG  file that gets one "HOST NAMESPACE-AS-SEEN-INSIDE" line per launch (optional)
# Exit status 255 for an unknown host, as ssh for a host it cannot reach.
set -eu
while [ $# -gt 0 ]; do  # ssh-style options before the host (OpenMPI adds none for this agent)
  case $1 in -*) shift ;; *) break ;; esac
done
[ $# -ge 2 ] || { echo "netns_rsh: usage: netns_rsh.sh HOST COMMAND..." >&2; exit 255; }
host=$1; shift
ns=$(awk -v h="$host" '$1 == h { print $2; exit }' "${TITAN_NETNS_MAP:?netns_rsh: TITAN_NETNS_MAP is not set}")
[ -n "$ns" ] || { echo "netns_rsh: no namespace for host $host in $TITAN_NETNS_MAP" >&2; exit 255; }
exec ip netns exec "$ns" unshare --uts env -i PATH="$PATH" HOME="${HOME:-/}" \
  ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} \
  sh -c 'hostname "$1" || exit 255
         [ -z "$2" ] || echo "$0 $(ip netns identify $$)" >> "$2"
         eval "$3"' "$host" "$ns" "${TITAN_NETNS_LOG:-}" "$*"
