#!/usr/bin/env bash
# Does a bare Debian machine of this host's release build and train titan.cpp with nothing but what
# scripts/install-deps.sh installs? Builds a minimal root with debootstrap, clones the committed HEAD
# into it, and in a chroot runs: scripts/install-deps.sh, `make build`, a 3-step `titan train` of
# recipes/debug.toml and `titan verify kernels --op rope` (with --test also `make test`).
#
#   usage: sudo scripts/fresh-machine-check.sh [--test] [--keep] [--root DIR] [--jobs N]
#              [--no-ccache] [--no-cache | --refresh-cache] [--variant minbase] [--mirror URL]
#
#   --test           also run `make test` in the root (slow: the whole suite)
#   --keep           keep the root afterwards (chroot into it to inspect); default: delete it
#   --root DIR       build the root at DIR (must not exist or be empty); default: a new
#                    /var/tmp/titan-fresh.XXXXXX/root
#   --jobs N         build parallelism inside the root (default 2)
#   --no-ccache      compile cold; by default, when this shell sets CMAKE_CXX_COMPILER_LAUNCHER=ccache,
#                    the host's ccache directory is shared into the root (ccache itself is installed
#                    there by the harness). Configure, headers, link and runs stay real either way:
#                    a header missing in the root still fails the compile.
#   --no-cache       run debootstrap against the mirror instead of the cached tarball
#   --refresh-cache  rebuild the cached tarball first
#   --variant V      debootstrap variant (default minbase: what a container image starts from)
#   --mirror URL     Debian mirror (default: the host's, from /etc/apt/sources.list{,.d})
#
# The cache (/var/cache/titan-fresh) holds only debootstrap's --make-tarball of its base packages;
# every run still installs them into an empty directory, so each root is bare.
# Mounts (/proc, /sys, /dev, the ccache dir) exist only inside a private mount namespace per chroot
# command (unshare), so they vanish with it even if this script is killed; the script deletes only
# the directories it created. Needs root. Stdout gets exactly one line, the last:
#   fresh machine: ok (N s)      or      fresh machine: FAILED at <stage>: <reason> (log: FILE)
# Progress goes to stderr, everything else to the log (/var/tmp/titan-fresh.XXXXXX.log, kept).
set -uo pipefail

run_tests=0; keep=0; root=""; jobs=2; use_ccache=auto; use_cache=1; refresh_cache=0; variant=minbase; mirror=""
cache_dir=/var/cache/titan-fresh
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --test) run_tests=1 ;;
    --keep) keep=1 ;;
    --root) root=${2:?--root needs a directory}; shift ;;
    --root=*) root=${1#*=} ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift ;;
    --jobs=*) jobs=${1#*=} ;;
    --no-ccache) use_ccache=0 ;;
    --no-cache) use_cache=0 ;;
    --refresh-cache) refresh_cache=1 ;;
    --variant) variant=${2:?--variant needs a name}; shift ;;
    --variant=*) variant=${1#*=} ;;
    --mirror) mirror=${2:?--mirror needs a URL}; shift ;;
    --mirror=*) mirror=${1#*=} ;;
    -h|--help) usage ;;
    *) echo "fresh-machine-check: unknown option $1" >&2; usage ;;
  esac
  shift
done

t0=$(date +%s)
log=$(mktemp --suffix=.log /var/tmp/titan-fresh.XXXXXX) || { echo "fresh machine: FAILED at setup: cannot create a log in /var/tmp"; exit 1; }
stage=setup
result=""
work=""          # temp directory this script created (holds the root unless --root)
root_made=0      # 1 once this script created (or filled) the root, so it may delete it
root_preexisted=0  # --root named an existing empty directory: empty it, keep the directory
mk_stage=""      # temp directory of a --make-tarball run

note() { echo "fresh-machine-check: $*" >&2; echo "== $*" >> "$log"; }
fail() { result="fresh machine: FAILED at $stage: $1 (log: $log)"; exit 1; }

# Paths mounted in THIS namespace below $1 (there should be none: mounts are made in unshare'd children).
mounts_below() { awk -v p="$1" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo; }

# Deletes a directory this script created, never crossing into another file system or a mount.
remove_tree() {
  local d=$1
  [ -n "$d" ] && [ -d "$d" ] || return 0
  case "$d" in /|/bin|/boot|/dev|/etc|/home|/lib*|/proc|/root|/run|/sbin|/sys|/tmp|/usr|/var|/var/tmp|/work) echo "refusing to delete $d" >> "$log"; return 1 ;; esac
  if [ -n "$(mounts_below "$d")" ]; then
    echo "not deleting $d: mounts below it: $(mounts_below "$d" | tr '\n' ' ')" >> "$log"; return 1
  fi
  rm -rf --one-file-system -- "$d" >> "$log" 2>&1
}

on_exit() {
  local rc=$?
  trap - EXIT INT TERM HUP
  [ -n "$result" ] || result="fresh machine: FAILED at $stage: stopped unexpectedly (exit $rc) (log: $log)"
  [ -n "$mk_stage" ] && remove_tree "$mk_stage"
  if [ "$keep" = 1 ] && [ "$root_made" = 1 ]; then
    echo "kept the root at $root" >> "$log"; echo "fresh-machine-check: root kept at $root" >&2
  elif [ "$root_made" = 1 ]; then
    if [ -n "$work" ]; then remove_tree "$work"; elif [ "$root_preexisted" = 1 ]; then remove_tree "$root" && mkdir "$root"; else remove_tree "$root"; fi ||
      echo "fresh-machine-check: could not delete $root (see $log)" >&2
  elif [ -n "$work" ]; then
    rmdir "$work" 2>/dev/null
  fi
  echo "$result" >> "$log"
  echo "$result"
  case "$result" in "fresh machine: ok"*) exit 0 ;; *) exit 1 ;; esac
}
trap on_exit EXIT
trap 'fail "interrupted"' INT TERM HUP

# The most telling line a failed stage printed (from log offset $1): the tests ctest saw fail, else
# the first root-cause line (CMake, compiler, linker, apt), else the last error line that is not
# make's echo of it, else the last line.
reason_since() {
  local out line
  out=$(tail -c +"$(( $1 + 1 ))" "$log" | grep -v '^== ' | sed 's/\x1b\[[0-9;]*m//g')
  line=$(printf '%s\n' "$out" | sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+) \((Failed|Timeout|SEGFAULT|Not Run|Exception|Subprocess aborted|Child aborted)\).*/\1 (\2)/p' | paste -sd, - | sed 's/,/, /g')
  [ -z "$line" ] || line="tests failed: $line"
  [ -n "$line" ] || line=$(printf '%s\n' "$out" | grep -E 'Could NOT find|CMake Error|fatal error|: error:|^E: |undefined reference|No such file|Segmentation fault|Aborted|Assertion' |
                           grep -vE '^CMake Error at .*FindPackageHandleStandardArgs' | head -1)
  # A CMake failure inside a package's config file: say whose (e.g. "via dnnl-config.cmake:70").
  if [[ $line == *"Could NOT find"* ]]; then
    local via; via=$(printf '%s\n' "$out" | grep -F -A12 -- "$line" | grep -oE '[^ /]+(-config|Config)\.cmake:[0-9]+|CMakeLists\.txt:[0-9]+' | head -2 | paste -sd, -)
    [ -z "$via" ] || line="$line via ${via//,/, }"
  fi
  [ -n "$line" ] || line=$(printf '%s\n' "$out" | grep -E '[Ee]rror|FAILED|[Ff]atal|not found' | grep -vE '^g?make(\[[0-9]+\])?: \*\*\*' | tail -1)
  [ -n "$line" ] || line=$(printf '%s\n' "$out" | grep -v '^[[:space:]]*$' | tail -1)
  printf '%s' "$line" | tr -s '[:space:]' ' ' | sed 's/^ //' | cut -c1-240
}

# run_stage NAME CMD...: runs CMD with output to the log, times it, fails the check on error.
run_stage() {
  stage=$1; shift
  local s; s=$(date +%s)
  local off; off=$(stat -c %s "$log")
  note "$stage"
  "$@" >> "$log" 2>&1 < /dev/null
  local rc=$?
  local dt=$(( $(date +%s) - s ))
  echo "== $stage: exit $rc after ${dt} s" >> "$log"
  [ $rc = 0 ] || fail "$(reason_since "$off") (exit $rc)"
  echo "fresh-machine-check:   $stage done (${dt} s)" >&2
}

# ---- host side --------------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot, mount)"
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel 2>> "$log") || fail "not inside a git checkout"
head=$(git -C "$repo" rev-parse HEAD 2>> "$log") || fail "no committed HEAD in $repo"
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  note "uncommitted changes in $repo are NOT part of this check (it clones HEAD $head)"
fi
[ -r /etc/os-release ] || fail "no /etc/os-release"
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
os_id=$(. /etc/os-release && echo "${ID:-}")
[ "$os_id" = debian ] && [ -n "$codename" ] || fail "host is not Debian with a VERSION_CODENAME (ID=$os_id)"
arch=$(dpkg --print-architecture)
echo "repo $repo HEAD $head; host $os_id $codename $arch; variant $variant; log $log" >> "$log"

# The host's Debian mirror for $codename main: first from deb822 .sources, then one-line lists.
host_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$codename" '
      function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && (" " comps " ") ~ / main / && enabled != "no" && uris != "") { split(uris, u, " "); print u[1]; found = 1; exit } types = suites = comps = uris = enabled = "" }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); next }
      { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
        if (key == "types") types = $0; else if (key == "uris") uris = $0; else if (key == "suites") suites = $0
        else if (key == "components") comps = $0; else if (key == "enabled") enabled = tolower($0) }
      END { if (!found) flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk -v suite="$codename" '$1 == "deb" && $3 == suite { for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit } }'
  done
}
[ -n "$mirror" ] || mirror=$(host_mirror | head -1)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
# debootstrap downloads with wget, which reads http_proxy; apt's configured proxy, if any, is reused.
eval "$(apt-config shell apt_http_proxy Acquire::http::Proxy apt_https_proxy Acquire::https::Proxy)"
[ -n "${apt_http_proxy:-}" ] && [ "${apt_http_proxy}" != DIRECT ] && export http_proxy="$apt_http_proxy"
[ -n "${apt_https_proxy:-}" ] && [ "${apt_https_proxy}" != DIRECT ] && export https_proxy="$apt_https_proxy"
echo "mirror $mirror; http_proxy ${http_proxy:-none}" >> "$log"

if [ "$use_ccache" = auto ]; then
  use_ccache=0
  [ "$(basename -- "${CMAKE_CXX_COMPILER_LAUNCHER:-}")" = ccache ] && command -v ccache > /dev/null && use_ccache=1
fi
ccache_host_dir=""
if [ "$use_ccache" = 1 ]; then
  ccache_host_dir=$(ccache --get-config cache_dir 2>/dev/null) || ccache_host_dir=""
  [ -n "$ccache_host_dir" ] && mkdir -p "$ccache_host_dir" || fail "ccache has no cache_dir"
fi

if ! command -v debootstrap > /dev/null; then
  run_stage host-debootstrap bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap'
fi

# ---- the root ---------------------------------------------------------------------------------
stage=root
if [ -z "$root" ]; then
  work=$(mktemp -d /var/tmp/titan-fresh.XXXXXX) || fail "cannot create a temp directory in /var/tmp"
  root=$work/root
  mkdir "$root" || fail "cannot create $root"
else
  root=$(realpath -m -- "$root")
  if [ -e "$root" ]; then
    [ -d "$root" ] && [ -z "$(ls -A "$root")" ] || fail "--root $root exists and is not an empty directory"
    root_preexisted=1
  else
    mkdir -p "$root" || fail "cannot create $root"
  fi
fi
root_made=1
avail_kb=$(df -Pk "$root" | awk 'NR == 2 { print $4 }')
[ "${avail_kb:-0}" -ge $(( 8 * 1024 * 1024 )) ] || fail "less than 8 GiB free below $root"

# Sources that mirror the host's: copied only when they are the host's Debian sources; https needs CA certificates.
includes=""
if grep -rqsE '^[^#]*https://' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
   || case "$mirror" in https://*) true ;; *) false ;; esac; then
  includes=ca-certificates
fi
tarball=$cache_dir/$codename-$variant-$arch${includes:+-$includes}.tgz
debootstrap_args=(--variant="$variant" --arch="$arch" ${includes:+--include="$includes"})

if [ "$use_cache" = 1 ]; then
  stage=debootstrap
  mkdir -p "$cache_dir" || fail "cannot create $cache_dir"
  mk_stage=$(mktemp -d /var/tmp/titan-fresh-tarball.XXXXXX) || fail "cannot create a temp directory in /var/tmp"
  off=$(stat -c %s "$log")
  # One run at a time makes the tarball; a concurrent run waits for it.
  (
    flock 9
    [ "$refresh_cache" = 0 ] && [ -s "$tarball" ] && exit 0
    note "debootstrap --make-tarball (cache: $tarball)"
    debootstrap "${debootstrap_args[@]}" --make-tarball="$tarball.part" "$codename" "$mk_stage" "$mirror" >> "$log" 2>&1 &&
      mv -f "$tarball.part" "$tarball"
    rc=$?
    rm -f "$tarball.part"
    exit $rc
  ) 9> "$cache_dir/.lock" || fail "debootstrap --make-tarball: $(reason_since "$off")"
  remove_tree "$mk_stage"; mk_stage=""
  run_stage debootstrap debootstrap "${debootstrap_args[@]}" --unpack-tarball="$tarball" "$codename" "$root" "$mirror"
else
  run_stage debootstrap debootstrap "${debootstrap_args[@]}" "$codename" "$root" "$mirror"
fi

# apt in the root as on the host: its sources (and their keyrings), its Acquire settings (proxy,
# validity checks, index targets; not its hooks) and its resolver. No daemons start (policy-rc.d).
apt_setup() (
  set -e
  local f k
  if compgen -G '/etc/apt/sources.list.d/*.sources' > /dev/null || compgen -G '/etc/apt/sources.list.d/*.list' > /dev/null || [ -s /etc/apt/sources.list ]; then
    rm -f "$root/etc/apt/sources.list"
    [ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$root/etc/apt/sources.list"
    for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
      [ -f "$f" ] || continue
      cp "$f" "$root/etc/apt/sources.list.d/"
      for k in $(sed -nE -e 's/^Signed-By:[[:space:]]*(\/[^[:space:]]+).*/\1/p' -e 's/.*signed-by=(\/[^] ]+).*/\1/p' "$f"); do
        [ -f "$k" ] && [ ! -e "$root$k" ] && { mkdir -p "$(dirname "$root$k")"; cp "$k" "$root$k"; }
      done
    done
  fi
  for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
    [ -f "$f" ] || continue
    grep -q 'Acquire' "$f" && ! grep -qi 'Invoke' "$f" && cp "$f" "$root/etc/apt/apt.conf.d/90host-$(basename "$f")"
  done
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"; chmod 755 "$root/usr/sbin/policy-rc.d"
  echo "--- sources in the root:"; cat "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/* 2>/dev/null || true
  echo "--- apt settings copied:"; ls "$root/etc/apt/apt.conf.d/" | grep '^90host-' || true
)
run_stage apt-setup apt_setup

# The committed HEAD, cloned on the host (git is not installed in the root), at /work/titan.
clone() (
  set -e
  mkdir -p "$root/work"
  git clone --quiet --no-hardlinks --no-checkout "$repo" "$root/work/titan"
  git -C "$root/work/titan" checkout --quiet --detach "$head"
  git -C "$root/work/titan" log -1 --oneline
)
run_stage clone clone

# in_root CMD: runs a bash command line in the root, in a private mount namespace whose mounts
# vanish with it (the trap unmounts them explicitly as well; nothing propagates to the host).
in_root() {
  local env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb
             DEBIAN_FRONTEND=noninteractive OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-Haswell}")
  [ "$use_ccache" = 1 ] && env+=(CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_DIR=/var/cache/titan-ccache CCACHE_BASEDIR=/work
                                    CCACHE_STATSLOG=/var/tmp/ccache-stats.log)
  unshare --mount --propagation private -- bash -c '
    set -e
    root=$1 cc=$2; shift 2
    trap "umount -R \"\$root\" 2>/dev/null || true" EXIT
    # The root is a mount point, as / is on a machine: `ip netns exec` remounts / (make-rslave).
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
    if [ -n "$cc" ]; then mkdir -p "$root/var/cache/titan-ccache"; mount --bind "$cc" "$root/var/cache/titan-ccache"; fi
    chroot "$root" /usr/bin/env -i "$@"
  ' in_root "$root" "$ccache_host_dir" "${env[@]}" /bin/bash -c "set -euo pipefail; cd /work/titan; $1"
}

# Only harness tools here; every build dependency must come from scripts/install-deps.sh.
[ "$use_ccache" = 1 ] && run_stage harness-ccache in_root 'apt-get update -qq && apt-get install -y -qq --no-install-recommends ccache && ccache --version | head -1'
run_stage install-deps in_root 'bash scripts/install-deps.sh && echo "dpkg: $(dpkg-query -W | wc -l) packages installed"'
ccache_report=""  # the hits this build got from the shared cache, for the log
[ "$use_ccache" = 1 ] && ccache_report='; echo "--- ccache, this build:"; ccache --show-log-stats || true'
run_stage build in_root "make build JOBS=$jobs$ccache_report"
run_stage train in_root 'build/titan train --config recipes/debug.toml --training.steps 3'
run_stage verify in_root 'build/titan verify kernels --op rope'
[ "$run_tests" = 1 ] && run_stage test in_root "make test JOBS=$jobs"

stage=done
result="fresh machine: ok ($(( $(date +%s) - t0 )) s)"
