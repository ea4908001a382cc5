#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Regenerates test_tensor_normal.hdf5: a small tensor written by rabbit's own TensorWriter with systematic_type="normal".

rabbit records the systematic type only in the `meta` pickle (rabbit-likelihood-and-format.md §1.7); fitlib's tests read
this file to check that read_rabbit takes it from there. One channel of 6 bins, two processes, three systematics: a
normalisation (lumi), a symmetric shape variation and an asymmetric one (so the tensor is [Bf, P, 2, S], and the meta's
symmetric_tensor is False). rabbit-fit 0.2.5 writes numeric datasets with gzip, so only `meta/pickle_data` needs a
filter plugin (Blosc v1, 32001).

Usage (in a throwaway virtual environment; TensorWriter imports rabbit.h5pyutils, which imports tensorflow for its
readers only, so a stand-in module is used when tensorflow is not installed):
    python3 -m venv /tmp/venv-meta
    /tmp/venv-meta/bin/pip install h5py hdf5plugin numpy hist lz4
    /tmp/venv-meta/bin/pip install --no-deps rabbit-fit==0.2.5 wums==0.2.0
    /tmp/venv-meta/bin/python tests/data/rabbit/make_normal_tensor.py
"""

import os
import sys
import types

try:
    import tensorflow  # noqa: F401
except ImportError:
    sys.modules["tensorflow"] = types.ModuleType("tensorflow")

import hist
import numpy as np

from rabbit import tensorwriter

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "test_tensor_normal"


def histogram(values):
    h = hist.Hist(hist.axis.Regular(len(values), 0.0, 1.0, name="x"), storage=hist.storage.Weight())
    h.values()[...] = values
    h.variances()[...] = values  # unweighted templates: variance = content
    return h


def main():
    sig = np.array([40.0, 80.0, 120.0, 110.0, 70.0, 30.0])
    bkg = np.array([200.0, 180.0, 150.0, 130.0, 110.0, 90.0])
    data = np.array([255.0, 270.0, 280.0, 236.0, 186.0, 128.0])

    writer = tensorwriter.TensorWriter(systematic_type="normal")
    writer.add_channel(histogram(sig).axes, "ch0")
    writer.add_data(histogram(data), "ch0")
    writer.add_process(histogram(sig), "sig", "ch0", signal=True)
    writer.add_process(histogram(bkg), "bkg", "ch0")
    # one uncertainty per process: rabbit-fit 0.2.5 zips processes with uncertainties, so a lone 1.05 would reach "sig" only
    writer.add_norm_systematic("lumi", ["sig", "bkg"], "ch0", [1.05, 1.05])
    slope = np.linspace(-1.0, 1.0, len(bkg))
    writer.add_systematic(histogram(bkg * (1 + 0.10 * slope)), "bkg_shape", "bkg", "ch0")
    writer.add_systematic(
        [histogram(sig * (1 + 0.08 + 0.04 * slope)), histogram(sig * (1 - 0.03 + 0.02 * slope))],
        "sig_asym",
        "sig",
        "ch0",
        mirror=False,
        symmetrize=None,
    )
    writer.write(outfolder=HERE, outfilename=NAME)
    print(f"wrote {os.path.join(HERE, NAME)}.hdf5", file=sys.stderr)


if __name__ == "__main__":
    main()
