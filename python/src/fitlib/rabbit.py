# SPDX-License-Identifier: MIT
"""fitlib's results in rabbit's fitresults layout (rabbit 0.2.5's rabbit_fit output), so that rabbit's own scripts
(rabbit_plot_pulls_and_impacts, rabbit_plot_hists, rabbit_plot_hists_cov, rabbit_plot_likelihood_scan,
rabbit_print_impacts, rabbit_print_pulls_and_constraints) and code built on rabbit.io_tools read fitlib's fits.

    from fitlib.rabbit import write_fitresults
    write_fitresults("results.hdf5", "fitresults.hdf5")   # fitlib-fit's results file, or a fitlib.results.Results

The file holds, as wums.ioutils.pickle_dump_h5py pickles, the entry `meta` and one entry per fit: `results` (the data
fit), `results_asimov`, `results_toy1`, …, `results_<name>` (pseudo-data `name`), each the dict of hist.Hist objects
(wrapped in wums.ioutils.H5PickleProxy) and numbers that rabbit's Workspace writes, with rabbit's names, axes and
storage types. Writing needs wums (pip install wums[pickling], or fitlib[rabbit]); fitresults() and meta() build the
same dicts of plain hist objects without it.

What fitlib's results do not have, and so the file lacks: contour scans (`contour_scan`, asymmetric impacts),
non-profiled impacts, global impacts on histogram bins (`hist_*_global_impacts*`, --computeHistImpacts), per-process
bin-by-bin-statistics groups of global impacts in full mode (`binByBinStat<process>`), per-process histograms of
mappings, and the covariance of the bins of different channels (fitlib writes each channel's block:
`hist_*_inclusive_cov` has NaN between channels). The input tensor's own `meta_info` (its writer's command, time and
arguments) is not in the results either: pass tensor= to copy the tensor's `meta` in as rabbit does; without it,
`meta_info_input` has the channels as the results describe them and the tensor's path and SHA-256.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import pathlib

import h5py
import hist
import numpy as np

from . import hist as _hist
from .results import Histograms, Mapping, Results, StoredFit, read_results

__all__ = ["RABBIT_VERSION", "fitresults", "group_name", "meta", "write_fitresults"]

RABBIT_VERSION = "0.2.5"
"""The rabbit release whose fitresults layout this module writes."""

_DOWN_UP = hist.axis.Regular(2, -2.0, 2.0, underflow=False, overflow=False, name="downUpVar")


def write_fitresults(results, path, *, tensor=None) -> pathlib.Path:
    """Writes `results` (a fitlib.results.Results, or the path of fitlib-fit's results file) as rabbit's fitresults
    file `path`, every fit in it, and returns the path.

    tensor: the input tensor the results were fitted on (checked by its SHA-256), whose `meta` (its writer's
    meta_info and channel_info) then becomes `meta_info_input`, as rabbit_fit copies it. Nothing else needs it. The
    meta is a pickle, unpickled as rabbit does: give only tensors you trust.

    The file is written whole or not at all (a temporary file beside it, renamed into place).
    """
    ioutils = _ioutils()
    res = results if isinstance(results, Results) else read_results(results)
    out = pathlib.Path(path)
    if out.is_dir():
        raise IsADirectoryError(f"{out} is a directory; give the file to write, e.g. {out / 'fitresults.hdf5'} "
                                "(rabbit_fit's -o is a directory, write_fitresults' path is the file)")
    if out.exists() and res.path and os.path.exists(res.path) and os.path.samefile(out, res.path):
        raise ValueError(f"{out} is the fitlib results file being converted; write rabbit's layout to another file")
    header = meta(res, tensor=tensor)
    groups = {group_name(name): fitresults(res, name) for name in res.fits}
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with h5py.File(tmp, "w") as f:
            ioutils.pickle_dump_h5py("meta", header, f)
            for name, d in groups.items():
                ioutils.pickle_dump_h5py(name, _proxied(d, ioutils), f)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def group_name(fit: str) -> str:
    """rabbit's name of a fit's entry: 'results' for the data fit, 'results_asimov', 'results_toy<i>', and
    'results_<name>' for fitlib's 'pseudodata_<name>'."""
    if fit == "data":
        return "results"
    return "results_" + (fit[len("pseudodata_") :] if fit.startswith("pseudodata_") else fit)


def meta(results: Results, *, tensor=None) -> dict:
    """The `meta` entry: meta_info (fitlib-fit's command line and options, as rabbit_fit's own), meta_info_input
    (the tensor's meta with tensor=, else its channels from the results), and the names of the signals (POIs),
    processes and NOIs as rabbit stores them (numpy object arrays of bytes)."""
    run, model = results.run, results.model
    info = {
        "time": str(datetime.datetime.now()),  # of the conversion: fitlib's results do not record when they ran
        "command": run.command_line,
        "args": run.options,
        "fitlib_version": run.fitlib_version,
        "converted_from": results.path,
    }
    return {
        "meta_info": info,
        "meta_info_input": _meta_info_input(results, tensor),
        "signals": _names(model.pois),
        "procs": _names(model.process_names),
        "nois": _names(model.nois),
    }


def fitresults(results: Results, fit: str | StoredFit) -> dict:
    """The dict rabbit's Workspace writes for one fit (plain hist.Hist objects, not yet wrapped for pickling):
    parms_prefit; physics_models (the histograms: 'Basemodel' and one per mapping, by rabbit's key); impacts,
    impacts_grouped, global_impacts, global_impacts_grouped; nllvalreduced, ndfsat, edmval, postfit_profile,
    nllvalfull; parms, cov; nll_scan_<p> and nll_scan2D_<a>_<b>: what the fit has of these."""
    f = fit if isinstance(fit, StoredFit) else results[fit]
    model = results.model
    names = list(f.names)
    hessian = f.covariance_status != "not computed"  # as rabbit's --noHessian: no variances, covariance, EDM
    out = {}
    if f.x0 is not None:
        out["parms_prefit"] = _parms("parms_prefit", names, f.x0, _prefit_variances(model, names))

    data_fit = results.fits.get("data")
    physics = {}
    if f.histograms is not None:
        observed = data_fit.histograms if data_fit is not None and data_fit.histograms is not None else None
        physics["Basemodel"] = _basemodel(model, names, f.histograms, observed)
    for m in f.mappings:
        observed = None
        if data_fit is not None:
            observed = next((d for d in data_fit.mappings if d.key == m.key), None)
        physics[m.key] = _mapping(m, observed)
    if physics:
        out["physics_models"] = physics

    for kind, impacts in (("impacts", f.impacts), ("global_impacts", f.global_impacts)):
        if impacts is None:
            continue
        sources = names if kind == "impacts" else names[model.npoi :]  # global: the systematics, as rabbit
        rows = _cat(impacts.targets, "parms")
        values = np.zeros((len(impacts.targets), len(sources)))
        for j, s in enumerate(sources):
            if s in impacts.sources:
                values[:, j] = impacts.values[:, impacts.sources.index(s)]
        out[kind] = _filled(kind, [rows, _cat(sources, "impacts")], values)
        out[f"{kind}_grouped"] = _filled(f"{kind}_grouped", [rows, _cat(impacts.groups, "impacts")], impacts.grouped)

    out["nllvalreduced"] = np.float64(f.nll)
    out["ndfsat"] = np.int32(f.saturated_gof.ndf if f.saturated_gof is not None else _ndfsat(model))
    out["edmval"] = np.float64(f.edm) if hessian else None
    out["postfit_profile"] = True  # fitlib's postfit is always its own fit (rabbit: False only with --externalPostfit)
    out["nllvalfull"] = np.float64(f.nll_full)
    if f.x is not None:
        variances = np.square(f.uncertainties) if hessian and f.uncertainties is not None else None
        out["parms"] = _parms("parms", names, f.x, variances)
    if hessian and f.covariance is not None:
        out["cov"] = _filled("cov", [_cat(names, "parms_x"), _cat(names, "parms_y")], f.covariance)

    for p, scan in f.scans.items():
        dnll = np.where(scan.converged, scan.dnll, np.nan)  # rabbit: NaN where a point's fit failed
        out[f"nll_scan_{p}"] = _filled(f"nll_scan_{p}", [_cat(_labels(scan.values), "scan")], dnll,
                                       label=f"Likelihood scan for parameter {p}")
    for scan in f.scans2D:
        a, b = scan.parameters
        dnll = np.where(scan.converged, scan.dnll, np.nan)
        out[f"nll_scan2D_{a}_{b}"] = _filled(f"nll_scan2D_{a}_{b}", [_cat(_labels(scan.values_x), "scan_x"),
                                                                      _cat(_labels(scan.values_y), "scan_y")],
                                             dnll, label=f"Likelihood 2D scan for parameters {a} and {b}")
    return out


# ---------------------------------------------------------------------------------------------------------------------


def _ioutils():
    try:
        from wums import ioutils
    except ImportError as e:
        raise ImportError(f"fitlib.rabbit writes rabbit's pickled layout with wums.ioutils, which did not import ({e}): "
                          "pip install wums[pickling] (or pip install fitlib[rabbit])") from e
    return ioutils


def _proxied(d: dict, ioutils) -> dict:
    """The dict with every histogram wrapped in an H5PickleProxy, as rabbit's Workspace stores them."""
    return {k: (_proxied(v, ioutils) if isinstance(v, dict) else ioutils.H5PickleProxy(v) if isinstance(v, hist.Hist) else v)
            for k, v in d.items()}


def _cat(labels, name: str):
    """rabbit's string axes: a StrCategory with its default overflow bin."""
    return hist.axis.StrCategory(list(labels), name=name)


def _names(names) -> np.ndarray:
    return np.array([n.encode() for n in names], dtype=object)


def _labels(values) -> list:
    """Scan values as rabbit's category labels (numpy's str of each double)."""
    return np.asarray(values, dtype=float).astype(str).tolist()


def _prefit_variances(model, names) -> np.ndarray:
    """rabbit's prefit covariance's diagonal: 1/w of a constrained nuisance, 0 for the rest (fitlib's and rabbit's
    default --prefitUnconstrainedNuisanceUncertainty)."""
    unc = dict(zip(model.parameter_names, model.prefit_uncertainty))
    return np.square([unc.get(n, 0.0) for n in names])


def _ndfsat(model) -> int:
    """rabbit's saturated ndf: data bins − POIs − unconstrained nuisances (when the fit has no saturated_gof)."""
    free = sum(1 for k, c in zip(model.parameter_kind, model.constrained) if k == "poi" or not c)
    return model.nbins - free


def _parms(name, names, values, variances) -> hist.Hist:
    return _filled(name, [_cat(names, "parms")], values, variances)


def _filled(name, axes, values, variances=None, label=None, flow_axes=0) -> hist.Hist:
    """A hist with rabbit's name and label, Weight storage with variances else Double, whose bins inside every axis's
    range (and the flow bins of the first `flow_axes` axes: a channel whose bins include them) hold `values`."""
    storage = hist.storage.Weight() if variances is not None else hist.storage.Double()
    h = hist.Hist(*axes, storage=storage, name=name, label=label, metadata=None)  # metadata set: wums pickles it
    index = []
    for i, a in enumerate(h.axes):
        under = 1 if a.traits.underflow else 0
        index.append(slice(None) if i < flow_axes else slice(under, under + a.size))
    index = tuple(index)
    view = h.view(flow=True)
    shape = view[index].shape
    if variances is None:
        view[index] = np.reshape(values, shape)
    else:
        view.value[index] = np.reshape(values, shape)
        view.variance[index] = np.reshape(variances, shape)
    return h


def _channel_axes(c) -> list:
    """The hist axes of a channel; rabbit's 'yield' axis for one without axes."""
    if not c.axes:
        return [hist.axis.Integer(0, c.nbins, underflow=False, overflow=False, name="yield")]
    return _hist.axes(c)


def _expected_label(stage: str, inclusive: bool, variations: bool = False) -> str:
    label = f"{stage} expected number of events, "
    if inclusive:
        label += "for all processes combined, "
    if variations:
        label += "with variations, "
    return label


def _channel_hist(name, c, axes, values, variances=None, label=None, extra=()) -> hist.Hist:
    """Channel c's bins of the model-wide `values` (first axis over bins, then the `extra` axes)."""
    rows = slice(c.start, c.start + c.nbins)
    variances = None if variances is None else np.asarray(variances)[rows]
    return _filled(name, [*axes, *extra], np.asarray(values)[rows], variances, label=label,
                   flow_axes=len(axes) if c.flow else 0)


def _covariance(name, blocks, channels, label) -> hist.Hist:
    """rabbit's flat covariance over every bin of every channel, from fitlib's per-channel blocks (NaN between
    channels: fitlib does not write those correlations)."""
    n = sum(c.nbins for c in channels)
    full = np.full((n, n), np.nan)
    for c, block in zip(channels, blocks):
        full[c.start : c.start + c.nbins, c.start : c.start + c.nbins] = block
    return _flat_covariance(name, full, label)


def _flat_covariance(name, matrix, label) -> hist.Hist:
    axes = [hist.axis.Integer(0, matrix.shape[0], underflow=False, overflow=False, name=x) for x in ("x", "y")]
    return _filled(name, axes, matrix, label=f"{label} covariance")


def _observed(channel: dict, c, axes, data, data_variance, observed_data, observed_variance) -> None:
    """hist_data_obs (the observed data: the data fit's) and hist_nobs (what this fit fitted) of an unmasked channel."""
    if observed_data is not None:
        channel["hist_data_obs"] = _channel_hist("hist_data_obs", c, axes, observed_data, observed_variance,
                                                 label="observed number of events in data")
    channel["hist_nobs"] = _channel_hist("hist_nobs", c, axes, data, data_variance,
                                         label="observed number of events for fit")


def _basemodel(model, names, h: Histograms, observed: Histograms | None) -> dict:
    """rabbit's physics_models['Basemodel']: per channel the observed and expected histograms, then the bins'
    covariances and the linear chi2."""
    channels = {c.name: {} for c in model.channels}
    processes = _cat(model.process_names, "processes")
    variations = (_cat(names, "vars"), _DOWN_UP)
    for c in model.channels:
        d, axes = channels[c.name], _channel_axes(c)
        if not c.masked and h.data is not None:
            _observed(d, c, axes, h.data, h.data_variance, None if observed is None else observed.data,
                      None if observed is None else observed.data_variance)
        for stage in ("prefit", "postfit"):
            if getattr(h, stage) is None:
                continue
            d[f"hist_{stage}_inclusive"] = _channel_hist(f"hist_{stage}_inclusive", c, axes, getattr(h, f"{stage}_total"),
                                                         getattr(h, f"{stage}_variance"), _expected_label(stage, True))
            d[f"hist_{stage}"] = _channel_hist(f"hist_{stage}", c, axes, getattr(h, stage),
                                               getattr(h, f"{stage}_process_variance"), _expected_label(stage, False),
                                               extra=(processes,))
            if getattr(h, f"{stage}_variations") is not None:
                name = f"hist_{stage}_inclusive_variations"
                d[name] = _channel_hist(name, c, axes, getattr(h, f"{stage}_variations"), None,
                                        _expected_label(stage, True, True), extra=variations)
    out = {"channels": channels}
    for stage, suffix in (("prefit", "_prefit"), ("postfit", "")):
        blocks, chi2 = getattr(h, f"{stage}_covariance"), getattr(h, f"{stage}_chi2")
        if blocks is not None:
            out[f"hist_{stage}_inclusive_cov"] = _covariance(f"hist_{stage}_inclusive_cov", blocks, model.channels,
                                                             _expected_label(stage, True))
        if chi2 is not None:
            out[f"ndf{suffix}"] = np.int32(chi2.total_ndf)
            out[f"chi2{suffix}"] = np.float64(chi2.total_chi2)
    return out


def _mapping(m: Mapping, observed: Mapping | None) -> dict:
    """rabbit's physics_models[key] of a mapping: its output channels' histograms, covariance and chi2."""
    channels = {c.name: {} for c in m.channels}
    for c in m.channels:
        d, axes = channels[c.name], _channel_axes(c)
        if m.data is not None:
            _observed(d, c, axes, m.data, m.data_variance, None if observed is None else observed.data,
                      None if observed is None else observed.data_variance)
        for stage in ("prefit", "postfit"):
            if getattr(m, stage) is not None:
                d[f"hist_{stage}_inclusive"] = _channel_hist(f"hist_{stage}_inclusive", c, axes, getattr(m, stage),
                                                             getattr(m, f"{stage}_variance"), _expected_label(stage, True))
    out = {"channels": channels}
    for stage, suffix in (("prefit", "_prefit"), ("postfit", "")):
        cov = getattr(m, f"{stage}_covariance")
        if cov is not None:
            name = f"hist_{stage}_inclusive_cov"
            out[name] = _flat_covariance(name, cov, _expected_label(stage, True))
        if getattr(m, f"{stage}_chi2") is not None:
            out[f"ndf{suffix}"] = np.int32(getattr(m, f"{stage}_ndf"))
            out[f"chi2{suffix}"] = np.float64(getattr(m, f"{stage}_chi2"))
    return out


def _channel_info(model) -> dict:
    """rabbit's channel_info (as rabbit_fit leaves it, with each channel's first bin and end) from the results."""
    return {c.name: {"axes": _channel_axes(c), "masked": c.masked, "flow": c.flow, "start": c.start,
                     "stop": c.start + c.nbins} for c in model.channels}


def _sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _meta_info_input(results: Results, tensor) -> dict:
    run, model = results.run, results.model
    if tensor is None:
        out = {
            "meta_info": {
                "input_path": run.input_path,
                "input_sha256": run.input_sha256,
                "note": "the tensor's own meta_info is not in fitlib's results: fitlib.rabbit.write_fitresults(..., "
                        "tensor=PATH) copies it",
            },
            "channel_info": _channel_info(model),
        }
        if "systematicType" in run.options:
            out["systematic_type"] = run.options["systematicType"]
        return out
    digest = _sha256(tensor)
    if run.input_sha256 and digest != run.input_sha256:
        raise ValueError(f"tensor {os.fspath(tensor)!r} is not the one these results were fitted on: its SHA-256 is "
                         f"{digest}, the results' input ({run.input_path!r}) had {run.input_sha256}")
    with h5py.File(tensor, "r") as f:
        if "meta" not in f:  # a tensor without meta (rabbit's reader then makes ch0 and ch1_masked, as fitlib did)
            return _meta_info_input(results, None)
        out = _ioutils().pickle_load_h5py(f["meta"])
    for name, info in out.get("channel_info", {}).items():
        for c in model.channels:
            if c.name == name and isinstance(info, dict):
                info.setdefault("start", c.start)
                info.setdefault("stop", c.start + c.nbins)
    return out


def main(argv=None) -> int:
    """`python -m fitlib.rabbit RESULTS OUTPUT [--tensor TENSOR]`: fitlib-fit's results file in rabbit's layout
    (what fitlib-fit --rabbitOutput runs). Exit status 0 when written, 1 when wums is missing, 2 for bad input."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m fitlib.rabbit", description=main.__doc__.split("\n")[0])
    parser.add_argument("results", help="fitlib-fit's results file (HDF5)")
    parser.add_argument("output", help="rabbit's fitresults file to write")
    parser.add_argument("--tensor", help="the input tensor, whose meta becomes meta_info_input (as rabbit_fit copies it)")
    args = parser.parse_args(argv)
    try:
        _ioutils()
    except ImportError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 1
    try:
        write_fitresults(args.results, args.output, tensor=args.tensor)
    except (OSError, ValueError) as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
