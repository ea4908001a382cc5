#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Regenerates test_tensor_blosc2.hdf5: test_tensor_symmetric.hdf5 with its numeric datasets Blosc2-compressed.

Real rabbit files compress numeric datasets with Blosc2 (HDF5 filter 32026, via hdf5plugin.Blosc2(cname="lz4",
clevel=5, filters=SHUFFLE); rabbit-likelihood-and-format.md §1.8). The example tensors in this directory use gzip
so that stock libhdf5 reads them; this copy lets fitlib's tests exercise the Blosc2 path: a clear error without a
plugin, identical contents with one.

Every dataset and attribute is copied; numeric datasets (float and integer) are rewritten flat with the same
`original_shape` attribute and chunking as rabbit's writer, compressed with Blosc2; string and vlen datasets keep
gzip, as rabbit writes them. The `meta` group (a Python pickle, Blosc v1) is dropped: fitlib does not read it.

Usage (in a throwaway virtual environment):
    python3 -m venv /tmp/h5venv && /tmp/h5venv/bin/pip install h5py hdf5plugin numpy
    /tmp/h5venv/bin/python tests/data/rabbit/make_blosc2_tensor.py
"""

import os
import sys

import h5py
import hdf5plugin
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "test_tensor_symmetric.hdf5")
TARGET = os.path.join(HERE, "test_tensor_blosc2.hdf5")


def copy_attrs(src, dst):
    for key, value in src.attrs.items():
        dst.attrs[key] = value


def copy_dataset(name, src, dst_parent):
    data = src[()]
    numeric = src.dtype.kind in "fiu"
    if numeric and data.size > 0:
        dst = dst_parent.create_dataset(
            name,
            data=data,
            chunks=src.chunks,
            **hdf5plugin.Blosc2(cname="lz4", clevel=5, filters=hdf5plugin.Blosc2.SHUFFLE),
        )
    elif numeric:
        dst = dst_parent.create_dataset(name, data=data)
    else:
        dst = dst_parent.create_dataset(name, data=data, dtype=src.dtype, compression="gzip")
    copy_attrs(src, dst)


def copy_group(src, dst):
    copy_attrs(src, dst)
    for name, obj in src.items():
        if name == "meta" and src.name == "/":
            continue
        if isinstance(obj, h5py.Group):
            copy_group(obj, dst.create_group(name))
        else:
            copy_dataset(name, obj, dst)


def main():
    with h5py.File(SOURCE, "r") as src, h5py.File(TARGET, "w") as dst:
        copy_group(src, dst)
    # Check: same values, and hnorm/hlogk really use filter 32026.
    with h5py.File(SOURCE, "r") as a, h5py.File(TARGET, "r") as b:
        for name in ("hnorm", "hlogk", "hdata_obs", "hsumw2"):
            assert np.array_equal(a[name][()], b[name][()]), name
            filters = b[name].id.get_create_plist().get_filter(0)
            assert filters[0] == 32026, (name, filters)
    print(f"wrote {TARGET}", file=sys.stderr)


if __name__ == "__main__":
    main()
