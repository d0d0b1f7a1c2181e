#!/usr/bin/env bash
# Installs the Debian packages titan.cpp needs to build, test and fuzz; skips what is present.
set -euo pipefail
# iproute2 (ip, ss): the network namespaces of tests/cli/dist_multihost.sh.
# zlib1g-dev, libzstd-dev, libsnappy-dev: compressed JSON lines and Parquet pages (src/data).
# ocl-icd-opencl-dev: dnnl-config.cmake requires OpenCL headers and libOpenCL.so, but libdnnl-dev
# only recommends the package, and recommends are not installed here.
pkgs=(build-essential cmake pkg-config libgtest-dev libdnnl-dev ocl-icd-opencl-dev libpcre2-dev libutf8proc-dev
      nlohmann-json3-dev libtomlplusplus-dev zlib1g-dev libzstd-dev libsnappy-dev libopenmpi-dev openmpi-bin libomp-dev time iproute2)
[ "${TITAN_FUZZ_DEPS:-0}" = 1 ] && pkgs+=(clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
