#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian packages fitlib needs to build, test and benchmark, skipping those present,
# and the HDF5 Blosc2 filter plugin (PyPI's hdf5plugin) into .deps/. `--fuzz` adds clang and libFuzzer.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(
  build-essential   # g++ and make
  cmake             # >= 3.20
  libeigen3-dev     # Eigen 3.4: the CPU backend
  catch2            # Catch2 v2: the test framework
  libbenchmark-dev  # Google Benchmark: speed targets
  nlohmann-json3-dev  # JSON: reference data in tests, results files
  libhdf5-dev       # HDF5 C library: rabbit input tensors and results files
  pkg-config        # finds HDF5 (Debian's ships hdf5.pc, no CMake package) for fitlib and find_package(fitlib)
  libcli11-dev      # CLI11: the fitlib-fit command line
  hdf5-filter-plugin-blosc-serial  # Blosc v1 filter (32001) of rabbit's meta pickle
  python3-pip       # installs the Blosc2 HDF5 filter plugin below
  python3-dev       # Python.h: fitlib's Python extension (python/, scripts/python-venv.sh)
  python3-venv      # the venv the Python package is built and tested in
  libopenmpi-dev    # Open MPI: mpi::Ranks, the bins split over MPI ranks
  openmpi-bin       # mpirun, for the MPI tests and `mpirun -n K fitlib-fit`
)
if [[ "${1:-}" == "--fuzz" ]]; then
  packages+=(clang-14 libclang-rt-14-dev)  # the libFuzzer target of the rabbit reader (make fuzz)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

install_missing() {
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  local SUDO=
  if [[ $(id -u) -ne 0 ]]; then
    SUDO=sudo
  fi
  echo "fitlib: installing missing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
install_missing

# Real rabbit tensors compress with Blosc2 (HDF5 filter 32026), for which Debian has no plugin. PyPI's
# hdf5plugin ships one that loads into Debian's libhdf5 1.10 (it links no libhdf5 of its own); the tests
# point HDF5 at .deps/hdf5plugin/hdf5plugin/plugins. Only the plugin files are needed, hence --no-deps.
plugin_dir=.deps/hdf5plugin/hdf5plugin/plugins
if [[ ! -f "$plugin_dir/libh5blosc2.so" ]]; then
  echo "fitlib: installing the HDF5 filter plugins of PyPI's hdf5plugin into .deps/hdf5plugin"
  # 7.1.0: checked to load into Debian 12's libhdf5 1.10.8.
  if ! PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --no-deps --target .deps/hdf5plugin hdf5plugin==7.1.0; then
    echo "fitlib: warning: could not install hdf5plugin with pip; the Blosc2 reading test will be skipped" >&2
  fi
fi
