#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Regenerates test_tensor_axes.hdf5 and test_tensor_axes.json: a tensor written by rabbit's own TensorWriter whose
channels use every kind of hist axis, and what hist itself says about those axes.

fitlib reads a tensor's channels from its `meta` pickle (rabbit-likelihood-and-format.md §1.7): per channel, the hist
axes pickled as boost-histogram stores them. The JSON is the reference its tests compare against, taken from the axis
objects themselves (names, labels, kinds, flow and traits, sizes, extents, edges or categories), in channel_info order,
with each channel's first bin. Channels:
  * "pt_eta": Regular(4, 20, 60) with a label × Variable, no flow (4 × 4 bins)
  * "cats": StrCategory × IntCategory × Boolean (2 × 3 × 2 bins)
  * "transformed": Regular with log, sqrt and Pow(0.5) transforms (3 × 2 × 2 bins)
  * "counts": Integer, Regular without underflow, growing StrCategory (3 × 2 × 2 bins)
  * "unfolded": masked, with flow: Regular(3, 0, 3) with both flow bins × Integer(-2, 1) with both (5 × 5 bins)
  * "circle": masked, without flow: Regular circular × Variable circular × Integer without flow bins (4 × 3 × 2 bins)

Usage (the comparison venv has rabbit-fit 0.2.5, hist and TensorFlow; any venv as make_normal_tensor.py describes
works too):
    .venv-rabbit/bin/python tests/data/rabbit/make_axes_tensor.py
"""

import json
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
NAME = "test_tensor_axes"
A = hist.axis
T = hist.axis.transform

CHANNELS = [
    ("pt_eta", [A.Regular(4, 20, 60, name="pt", label="p_T [GeV]"), A.Variable([-2.4, -1.0, 0.0, 1.0, 2.4], name="eta")], False, False),
    ("cats", [A.StrCategory(["ee", "mumu"], name="flavour"), A.IntCategory([11, -13, 211], name="pdg"), A.Boolean(name="tight")], False, False),
    ("transformed", [A.Regular(3, 1, 1000, transform=T.log, name="m"), A.Regular(2, 1, 100, transform=T.sqrt, name="s"),
                     A.Regular(2, 1, 16, transform=T.Pow(0.5), name="p")], False, False),
    ("counts", [A.Integer(-1, 2, name="charge"), A.Regular(2, 0, 1, underflow=False, name="r"), A.StrCategory(["a", "b"], growth=True, name="g")], False, False),
    ("unfolded", [A.Regular(3, 0, 3, name="x"), A.Integer(-2, 1, name="n")], True, True),
    ("circle", [A.Regular(4, 0, 360, circular=True, name="phi"), A.Variable([0, 1, 3, 7], circular=True, name="v"),
                A.Integer(0, 2, underflow=False, overflow=False, name="k")], True, False),
]


def filled(axes, flow, scale, seed):
    h = hist.Hist(*axes, storage=hist.storage.Weight())
    shape = h.values(flow=flow).shape
    rng = np.random.default_rng(seed)
    v = scale * (1.0 + rng.random(shape))
    h.values(flow=flow)[...] = v
    h.variances(flow=flow)[...] = v
    return h


def axis_record(ax):
    kind = type(ax).__name__
    rec = {"class": kind, "core": type(ax._ax).__name__, "name": ax.name, "label": ax.__dict__.get("label", ""),  # as stored (hist shows the name for an empty label)
            "size": ax.size, "extent": ax.extent,
           "underflow": ax.traits.underflow, "overflow": ax.traits.overflow, "circular": ax.traits.circular, "growth": ax.traits.growth}
    if kind in ("StrCategory", "IntCategory"):
        rec["categories"] = [str(c) for c in ax]
    elif kind == "Variable" and ax.traits.circular:
        # boost-histogram 1.8.1 reports a circular Variable axis's edges wrongly past the first bin (edges
        # [0, 1, 2, 7] for [0, 1, 3, 7]) while it bins by the edges given (index(2.5) is bin 1): the edges given
        rec["edges"] = [float(e) for e in ax._ax.__getstate__()[1]]
    else:
        rec["edges"] = [float(e) for e in ax.edges]
    if kind == "Regular":
        tr = ax.transform
        rec["transform"] = "" if tr is None else (f"pow({tr.power!r})" if isinstance(tr, T.Pow) else tr._name if hasattr(tr, "_name") else repr(tr))
    return rec


def main():
    writer = tensorwriter.TensorWriter()
    for name, axes, masked, flow in CHANNELS:
        writer.add_channel(axes, name, masked=masked, flow=flow)
    for i, (name, axes, masked, flow) in enumerate(CHANNELS):
        # rabbit-fit 0.2.5 compares a histogram's axes with the channel's by their edges (np.allclose), which
        # categorical axes do not have: their contents go in as arrays (TensorWriter then checks the shape)
        plain = any(isinstance(a, (A.StrCategory, A.IntCategory)) for a in axes)

        def payload(h):
            return {"h": h.values(), "variances": h.variances()} if plain else {"h": h}

        if not masked:
            writer.add_data(**payload(filled(axes, flow, 60.0, 100 + i)), channel=name)
        writer.add_process(**payload(filled(axes, flow, 10.0, 2 * i)), name="sig", channel=name, signal=True)
        writer.add_process(**payload(filled(axes, flow, 50.0, 2 * i + 1)), name="bkg", channel=name)
        writer.add_norm_systematic("lumi", ["sig", "bkg"], name, [1.02, 1.02])
    writer.write(outfolder=HERE, outfilename=NAME)

    # channel_info as TensorWriter keeps it: unmasked channels in reverse order of add_channel, then the masked ones
    start, channels = 0, []
    for name, info in writer.channels.items():
        bins = int(np.prod([a.extent if info["flow"] else a.size for a in info["axes"]]))
        channels.append({"name": name, "masked": info["masked"], "flow": info["flow"], "start": start, "bins": bins,
                         "axes": [axis_record(a) for a in info["axes"]]})
        start += bins
    with open(os.path.join(HERE, NAME + ".json"), "w") as f:
        json.dump({"written_by": f"rabbit TensorWriter, hist {hist.__version__}", "channels": channels}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
