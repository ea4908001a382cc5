# SPDX-License-Identifier: MIT
"""A channel's bins as a hist.Hist with the channel's own axes (UHI), e.g. for mplhep.histplot.

    from fitlib import hist as fhist
    hists = fitlib.histograms(model, result, process_variances=True)
    h = fhist.channel_hists(model, hists, "ch0")["postfit"]

The model, channels and axes are duck-typed: a fitlib.Model (channels, process_names) with its fitlib.Channel and
fitlib.Axis objects, or anything with the same attributes, such as a results file's model read by
fitlib.results.read_results (fitlib.results.ModelInfo, Channel, Axis). A channel has name, nbins, masked, flow and
axes; an axis kind, name, label, edges, categories, transform, underflow, overflow, circular, growth and size.

Needs the `hist` package (pip install fitlib[hist]).
"""

from __future__ import annotations

import re

import hist
import numpy as np

from ._channels import find as _find_channel

__all__ = ["axis", "axes", "channel", "channel_hist", "channel_hists"]

_POW = re.compile(r"pow\((.+)\)")


def _transform(name: str):
    """hist's transform of a Regular axis from fitlib's name for it ('', 'log', 'sqrt', 'pow(p)')."""
    if not name:
        return None
    if name == "log":
        return hist.axis.transform.log
    if name == "sqrt":
        return hist.axis.transform.sqrt
    m = _POW.fullmatch(name)
    if m:
        return hist.axis.transform.Pow(float(m.group(1)))
    raise ValueError(f"unknown axis transform {name!r}; fitlib reads '', 'log', 'sqrt' and 'pow(p)'")


def axis(a):
    """The hist axis that a fitlib.Axis (or an object with its attributes) describes, with its name, label, flow bins
    and traits.

    A transformed Regular axis is rebuilt from its first and last edges, so hist recomputes the edges between them
    (to rounding: the power of a 'pow(p)' transform is kept to 6 digits).
    """
    common = {"name": a.name, "label": a.label}
    flow = {"underflow": a.underflow, "overflow": a.overflow, "growth": a.growth}
    if a.circular:  # only then: hist before 2.8 has no circular Variable or Integer axes
        flow["circular"] = True
    if a.kind == "Regular":
        return hist.axis.Regular(a.size, a.edges[0], a.edges[-1], transform=_transform(a.transform), **flow, **common)
    if a.kind == "Variable":
        return hist.axis.Variable(a.edges, **flow, **common)
    if a.kind == "Integer":
        return hist.axis.Integer(int(a.edges[0]), int(a.edges[-1]), **flow, **common)
    if a.kind == "Boolean":
        return hist.axis.Boolean(**common)
    if a.kind == "StrCategory":
        return hist.axis.StrCategory(list(a.categories), growth=a.growth, overflow=a.overflow, **common)
    if a.kind == "IntCategory":
        return hist.axis.IntCategory([int(c) for c in a.categories], growth=a.growth, overflow=a.overflow, **common)
    raise ValueError(f"axis {a.name!r} is of kind {a.kind!r}, which fitlib.hist does not know")


def axes(c) -> list:
    """The hist axes of a channel (fitlib.Channel or alike); a channel without axes gets one Integer axis over its
    bins."""
    if not c.axes:
        return [hist.axis.Integer(0, c.nbins, name="bin", flow=False)]
    return [axis(a) for a in c.axes]


def channel(model, which):
    """The channel `which` (a name or an index) of the model (anything with `channels`) and its first bin, as
    (channel, start)."""
    _, c, start = _find_channel(model.channels, which)
    return c, start


def channel_hist(model, which, values, variances=None) -> hist.Hist:
    """One channel's bins of `values` as a hist.Hist with the channel's axes.

    `values` runs over the model's bins (its first axis: every bin, as histograms' arrays, or the unmasked ones, as
    the data) and may have a second axis over the model's processes (`process_names`), which becomes a last
    StrCategory axis "process". With `variances` (the same shape) the histogram has Weight storage, else Double. The
    channel's flow bins, where its bins include them, fill the histogram's.
    """
    c, start = channel(model, which)
    values = np.asarray(values, dtype=float)
    if values.ndim == 0 or values.shape[0] < start + c.nbins:
        raise ValueError(
            f"values cover {values.shape[0] if values.ndim else 0} bins; channel {c.name!r} has bins [{start}, {start + c.nbins})"
            " (the data have no masked bins)"
        )
    ax = axes(c)
    processes = list(getattr(model, "process_names", ()))
    if values.ndim == 2 and values.shape[1] == len(processes):
        ax.append(hist.axis.StrCategory(processes, name="process", overflow=False))
    elif values.ndim != 1:
        raise ValueError(f"values have shape {values.shape}; expected [bins] or [bins, {len(processes)} processes]")
    h = hist.Hist(*ax, storage=hist.storage.Double() if variances is None else hist.storage.Weight())
    view = h.view(flow=c.flow)
    rows = values[start : start + c.nbins].reshape(view.shape)
    if variances is None:
        view[...] = rows
    else:
        view.value = rows
        view.variance = np.asarray(variances, dtype=float)[start : start + c.nbins].reshape(view.shape)
    return h


def channel_hists(model, hists: dict, which) -> dict:
    """The histograms of one channel from fitlib.histograms' arrays (or a results file's,
    fitlib.results.Histograms.as_dict()), as hist.Hist objects with variances.

    Keys: "prefit" and "postfit" (the sums over processes), "prefit_processes" and "postfit_processes" (a last
    "process" axis; with variances where histograms computed them, process_variances=True) and, for an unmasked
    channel, "data". The postfit ones only where `hists` has them (a blinded fit's results have none).
    """
    c, _ = channel(model, which)
    out = {}
    for stage in ("prefit", "postfit"):
        if hists.get(stage) is None:
            continue
        out[stage] = channel_hist(model, which, hists[f"{stage}_total"], hists[f"{stage}_variance"])
        out[f"{stage}_processes"] = channel_hist(model, which, hists[stage], hists.get(f"{stage}_process_variance"))
    if not c.masked:
        out["data"] = channel_hist(model, which, hists["data"], hists["data_variance"])
    return out
