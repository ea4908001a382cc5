#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Makes or updates the virtual environment $BUILD_DIR/venv-python, installs fitlib's Python package (python/) into it
# and runs its tests; arguments go to pytest.
#
#   scripts/python-venv.sh [pytest options]          e.g. scripts/python-venv.sh -k hist
#
# The build tools and test packages come from PyPI, pinned below (nanobind is not in Debian 12). The extension is built
# without build isolation into $BUILD_DIR/python-module, kept between runs, so that a rerun recompiles only what
# changed. The tests compare with fitlib-fit when the build has one ($BUILD_DIR/apps/fitlib-fit/fitlib-fit, or
# FITLIB_FIT), and skip those comparisons otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR=${BUILD_DIR:-build}
# Debian's Python by default, for which install-deps.sh installs python3-dev and python3-venv.
PYTHON=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
venv="$PWD/$BUILD_DIR/venv-python"
requirements=(
  nanobind==3.1.0
  scikit-build-core==1.1.2
  numpy==2.4.6
  pytest==9.2.0
  h5py==3.16.0
  hist==2.12.1 boost-histogram==1.8.1 histoprint==2.7.1 click==8.5.1
  wums[pickling]==0.2.0 hdf5plugin==7.1.0 lz4==4.4.5  # fitlib.rabbit (rabbit's fitresults layout)
  # fitlib.plot
  matplotlib==3.11.2 contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0 kiwisolver==1.5.1 pillow==13.0.0 pyparsing==3.3.3
  python-dateutil==4.0.0 tzdata==2026.6 packaging==26.4 mplhep==1.3.3 mplhep-data==0.1.0 uhi==1.2.1
)

./scripts/install-deps.sh  # python3-venv and python3-dev among them

if [[ ! -x "$venv/bin/python" ]]; then
  echo "fitlib: creating the virtual environment $venv"
  mkdir -p "$(dirname "$venv")"
  "$PYTHON" -m venv "$venv"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
"$venv/bin/python" -m pip install --quiet "${requirements[@]}"

echo "fitlib: building and installing fitlib's Python package into $venv (the first build takes minutes)"
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)}
"$venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps \
  --config-settings=build-dir="$PWD/$BUILD_DIR/python-module" ./python

if [[ -z "${FITLIB_FIT:-}" && -x "$BUILD_DIR/apps/fitlib-fit/fitlib-fit" ]]; then
  export FITLIB_FIT="$PWD/$BUILD_DIR/apps/fitlib-fit/fitlib-fit"
fi
"$venv/bin/python" -m pytest -p no:cacheprovider python/tests -ra "$@"  # no .pytest_cache in the work tree
