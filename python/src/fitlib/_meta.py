# SPDX-License-Identifier: MIT
"""fitlib.read_rabbit: fitlib's reader, and where it cannot decode the tensor's `meta` pickle (hist's axes pickled by
an older hist or boost-histogram), the channels from that pickle read by Python's own pickle with `hist` installed."""

from __future__ import annotations

import os
import pickle


def read_rabbit(path, *, allow_negative_yields: bool = False, systematic_type: str | None = None, unpickle_meta: bool = True):
    """Reads a rabbit input tensor (HDF5, dense or sparse, gzip or Blosc2) into a fitlib.Model.

    allow_negative_yields: accept negative nominal yields (rabbit's allow_negative_expectation).
    systematic_type: 'log_normal' or 'normal'; None: as the tensor's meta says.
    unpickle_meta: where fitlib's own reader (which decodes the pickle without running it) cannot decode the channels
    of the tensor's meta, read them with Python's pickle, as rabbit does, when `hist` is installed; the model's
    channels_skipped then is empty. A pickle runs code: pass False for a tensor you do not trust (the bins then form
    rabbit's default channels 'ch0' and 'ch1_masked').
    Raises FileError (an OSError) for a file that is missing or not a valid tensor.
    """
    from . import _core_module

    core = _core_module()
    model = core._read_rabbit(path, allow_negative_yields=allow_negative_yields, systematic_type=systematic_type)
    if model.channels_skipped and unpickle_meta:
        channels = _pickled_channels(os.fspath(path))
        if channels is not None:
            model = core._with_channels(model, channels)
    return model


def _pickled_channels(path: str):
    """The tensor's channel_info as fitlib's channels (dicts of name, masked, flow, axes), in the tensor's bin order
    (unmasked channels first); None where `hist` or h5py is missing or the meta does not unpickle."""
    try:
        import h5py
        import hist  # noqa: F401  (the pickled axes are hist's)
    except ImportError:
        return None
    try:
        import hdf5plugin  # noqa: F401  (h5py then reads rabbit's Blosc-compressed meta)
    except ImportError:
        pass
    try:
        with h5py.File(path, "r") as f:
            if "meta" not in f:
                return None
            try:
                from wums import ioutils

                meta = ioutils.pickle_load_h5py(f["meta"])
            except ImportError:
                meta = pickle.loads(f["meta"]["pickle_data"][...].tobytes())
        info = meta["channel_info"]
    except Exception:  # noqa: BLE001  (any unpicklable meta: fitlib's reader already said why it kept the default)
        return None
    channels = [dict(name=name, masked=bool(c.get("masked", False)), flow=bool(c.get("flow", False)), axes=[_axis(a) for a in c["axes"]])
                for name, c in info.items()]
    return [c for c in channels if not c["masked"]] + [c for c in channels if c["masked"]]


def _axis(a) -> dict:
    """fitlib's description of a hist axis (fitlib.Axis's fields)."""
    kind = type(a).__name__
    traits = a.traits
    label = a.label if a.label != a.name else ""
    d = dict(kind=kind, name=a.name, label=label, edges=[], categories=[], transform="", underflow=bool(traits.underflow),
             overflow=bool(traits.overflow), circular=bool(traits.circular), growth=bool(traits.growth))
    if kind in ("StrCategory", "IntCategory"):
        d["categories"] = [str(c) for c in a]
    elif kind == "Variable" and traits.circular:
        # boost-histogram misreports a circular Variable axis's edges past its first bin: the edges it holds
        d["edges"] = [float(e) for e in a._ax.__getstate__()[1]]
    else:
        d["edges"] = [float(e) for e in a.edges]
    if kind == "Regular" and getattr(a, "transform", None) is not None:
        d["transform"] = repr(a.transform)
    return d
