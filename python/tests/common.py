# SPDX-License-Identifier: MIT
"""What the Python tests share: the repository's tensors, and fitlib-fit run on one (FITLIB_FIT, which
scripts/python-venv.sh sets to the build's; the tests that need it are skipped without it)."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "data" / "demo_analysis.hdf5"
RABBIT_DATA = ROOT / "tests" / "data" / "rabbit"
SPARSE = RABBIT_DATA / "test_tensor_sparse.hdf5"
AXES = RABBIT_DATA / "test_tensor_axes.hdf5"
# `make demo`'s command line (fitlib-fit's results of the demo), and every histogram option
DEMO_OPTIONS = ("-t", "0", "--unblind", "--doImpacts", "--globalImpacts", "--scan", "signal", "--scanPoints", "7")
HIST_OPTIONS = ("--saveHists", "--computeHistCov", "--computeHistErrorsPerProcess", "--computeVariations")


def fitlib_fit(tmp_path_factory, tensor, *options: str) -> pathlib.Path:
    """fitlib-fit's results file (with --json, the JSON summary beside it) of `tensor` with `options`, -q, in a fresh
    directory."""
    exe = os.environ.get("FITLIB_FIT")
    if not exe:
        pytest.skip("FITLIB_FIT (the path of fitlib-fit) is not set: no fitlib-fit to compare with or to make results")
    out = tmp_path_factory.mktemp("fitlib_fit") / "results.hdf5"
    run = subprocess.run([exe, str(tensor), *options, "-q", "-o", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, f"fitlib-fit exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
    return out
