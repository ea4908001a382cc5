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
  hist==2.12.1
  h5py==3.16.0
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
