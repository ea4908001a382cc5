#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian packages fitlib needs to build, test and benchmark, skipping those present.
set -euo pipefail

packages=(
  build-essential   # g++ and make
  cmake             # >= 3.20
  libeigen3-dev     # Eigen 3.4: the CPU backend
  catch2            # Catch2 v2: the test framework
  libbenchmark-dev  # Google Benchmark: speed targets
  nlohmann-json3-dev  # JSON: reference data in tests, results files
  libhdf5-dev       # HDF5 C library: rabbit input tensors and results files
  libcli11-dev      # CLI11: the fitlib-fit command line
  hdf5-filter-plugin-blosc-serial  # Blosc v1 filter (32001) of rabbit's meta pickle
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  SUDO=sudo
else
  SUDO=
fi
echo "fitlib: installing missing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
