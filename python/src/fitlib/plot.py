# SPDX-License-Identifier: MIT
"""The standard plots of a fit: pulls and impacts, prefit and postfit histograms, the correlation matrix, likelihood
scans and toy pulls, as matplotlib figures.

    from fitlib import plot
    from fitlib.results import read_results
    results = read_results("results.hdf5")
    plot.pulls_and_impacts(results, path="impacts.pdf")            # the "data" fit (else the first fit)
    plot.histogram(results["data"], "ch0", style="CMS", path=["ch0.png", "ch0.pdf"])

Every function takes what it plots, duck-typed on attribute names: a results file (fitlib.results.Results, then
`fit_name` picks the fit, "data" by default), one of its fits (StoredFit), or the in-memory objects (fitlib.fit's
FitResult with `model=` and `impacts=`, fitlib.histograms' dict with `model=`, fitlib.scan's Scan). Each returns the
matplotlib Figure (a plain matplotlib.figure.Figure, not registered with pyplot); `path` (a .png or .pdf path, or a
list of them) also writes it. `style="CMS"` or `"ATLAS"` draws with mplhep's style and experiment label (`label`, by
default "Internal"); the figures have the same size in pixels in every style (`dpi` scales them).

Coordinates: fitlib fits a POI as x = √μ unless --allowNegativePOI (then x = μ). With `mu=True` (the default) a POI
is shown as the signal strength μ = x² that users quote, also in impacts on it (Δμ = 2x̂·Δx) and in scans
(2ΔNLL is the same at the same point); `mu=False` keeps the fit's coordinates. Whether the fit used
--allowNegativePOI is read from a Results' options; for a StoredFit or FitResult alone pass `allow_negative_poi`
(default False, fitlib-fit's and fitlib.fit's default). Which parameters are POIs comes from the model
(a Results', a StoredFit's histograms', or `model=`); without one no parameter is treated as a POI.

Needs matplotlib (and mplhep for `style`): pip install fitlib[plot].
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import StepPatch

from ._channels import find as _find_channel

__all__ = ["correlation", "histogram", "pulls_and_impacts", "save", "scan", "scan2d", "toy_pulls"]

# figure inches ×, dpi ÷ (the same pixels): mplhep's styles have fonts sized for larger figures
_STYLE_SCALE = {None: 1.0, "ATLAS": 1.25, "CMS": 2.0}
_CL_1SIGMA = math.erf(1 / math.sqrt(2))  # 68.27 %
_LEVELS_2D = (-2 * math.log(1 - _CL_1SIGMA), -2 * math.log(1 - 0.95))  # 2ΔNLL of 68.27 % and 95 % CL, 2 parameters


# ---------------------------------------------------------------------------------------------------------------------
# Shared helpers


def _style_name(style):
    if style is None:
        return None
    name = str(style).upper()
    if name not in ("CMS", "ATLAS"):
        raise ValueError(f"style {style!r}: fitlib.plot knows 'CMS', 'ATLAS' and None")
    return name


@contextlib.contextmanager
def _styled(style):
    """rcParams of mplhep's style (or matplotlib's current ones) while a figure is built and saved."""
    if style is None:
        with matplotlib.rc_context():
            yield
        return
    try:
        import mplhep
    except ImportError as e:
        raise ImportError(f"style={style!r} needs mplhep (pip install fitlib[plot] or mplhep)") from e
    with matplotlib.style.context(getattr(mplhep.style, style)):
        yield


def _figure(width_px: int, height_px: int, style, dpi: float) -> Figure:
    """A constrained-layout figure of width_px × height_px pixels at dpi 100 (× dpi/100 otherwise) in every style:
    a style's larger fonts get a larger figure at a lower resolution."""
    d = dpi / _STYLE_SCALE[style]
    # a hundredth of a pixel more, so that Agg's truncation to whole pixels keeps the size
    return Figure(figsize=((width_px * dpi / 100 + 0.01) / d, (height_px * dpi / 100 + 0.01) / d), dpi=d,
                  layout="constrained")


def _stairs(ax, values, edges, baseline=0.0, **kwargs):
    """Axes.stairs without its per-vertex update of the data limits (slow for hundreds of bins): a StepPatch added
    as it is, the limits updated from its extremes."""
    patch = StepPatch(values, edges, baseline=baseline, **kwargs)
    ax.add_artist(patch)
    finite = np.concatenate([np.ravel(values), np.ravel(np.broadcast_to(baseline, np.shape(values)))])
    finite = finite[np.isfinite(finite)]
    if finite.size:
        ax.update_datalim([(edges[0], finite.min()), (edges[-1], finite.max())])
    return patch


def _experiment_label(ax, style, label, data: bool = True, right: str = ""):
    """mplhep's experiment label ("CMS Internal") with a style; without one `label` as a left title, if given."""
    if style is not None:
        import mplhep

        getattr(mplhep, style.lower()).label(text="Internal" if label is None else label, data=data, ax=ax, loc=0,
                                             rlabel=right)
    else:
        if label:
            ax.set_title(label, loc="left", fontweight="bold")
        if right:
            ax.set_title(right, loc="right", fontsize="medium")


def save(fig: Figure, path) -> list:
    """Writes `fig` to `path` (a .png or .pdf path, or a list of them) at the figure's size; returns the paths."""
    if path is None:
        return []
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    for p in paths:
        suffix = os.path.splitext(os.fspath(p))[1].lower()
        if suffix not in (".png", ".pdf"):
            raise ValueError(f"cannot write {os.fspath(p)!r}: fitlib.plot writes .png and .pdf files")
    with matplotlib.rc_context({"savefig.bbox": "standard"}):  # a user's savefig.bbox 'tight' would change the size
        for p in paths:
            pdf = os.fspath(p).lower().endswith(".pdf")
            fig.savefig(p, dpi=fig.dpi, metadata={"Creator": "fitlib.plot"} if pdf else None)
    return paths


def _finish(fig, path, style):
    with _styled(style):
        save(fig, path)
    return fig


def _default_fit_name(results) -> str:
    names = list(results.fits)
    for n in ("data", "asimov"):
        if n in names:
            return n
    for n in names:
        if not (n.startswith("toy") and n[3:].isdigit()):
            return n
    raise KeyError(f"{results.path} has toys only ({len(names)} fits toy1 …): choose one with fit_name='toy1'"
                   if names else f"{results.path} has no fits")


def _is_results(obj) -> bool:
    return hasattr(obj, "fits") and hasattr(obj, "model") and hasattr(obj, "run")


def _resolve(obj, fit_name=None, model=None, allow_negative_poi=None):
    """(fit, model, allow_negative_poi) from a Results (its fit `fit_name`), a StoredFit or an in-memory fit."""
    if _is_results(obj):
        fit = obj[fit_name if fit_name is not None else _default_fit_name(obj)]
        if model is None:
            model = obj.model
        if allow_negative_poi is None:
            allow_negative_poi = bool(obj.run.options.get("allowNegativePOI", False))
    else:
        fit = obj
        if model is None:
            model = getattr(getattr(obj, "histograms", None), "model", None)
    return fit, model, bool(allow_negative_poi)


def _pois(model) -> list:
    if model is None:
        return []
    if hasattr(model, "pois"):
        return list(model.pois)
    return list(model.parameter_names[: int(getattr(model, "npoi", 0))])


class _Coordinate:
    """How one parameter is shown: as μ = x² (a POI with mu=True and x = √μ) or in the fit's coordinate."""

    def __init__(self, name, model, mu, allow_negative_poi, blinded=()):
        self.name = name
        self.squared = bool(mu) and not allow_negative_poi and name in _pois(model)
        self.blinded = name in blinded

    @property
    def label(self) -> str:
        text = rf"$\mu$ ({self.name})" if self.squared else self.name
        return text + (" (blinded)" if self.blinded else "")

    def value(self, x):
        x = np.asarray(x, dtype=float)
        return x * x if self.squared else x

    def sigma(self, x, s):
        """Linear propagation of an uncertainty (or a shift) s of x at x."""
        return 2 * np.abs(x) * np.asarray(s, dtype=float) if self.squared else np.asarray(s, dtype=float)


def _fit_label(fit) -> str:
    name = getattr(fit, "name", None)
    return f"{name} fit" if name else ""


def _is_data_fit(fit) -> bool:
    name = getattr(fit, "name", "data") or "data"
    return not (name == "asimov" or name.startswith("toy"))


def _correlation_of(fit) -> np.ndarray:
    corr = getattr(fit, "correlation", None)
    if corr is not None:
        return np.asarray(corr, dtype=float)
    cov = np.asarray(fit.covariance, dtype=float)
    s = np.sqrt(np.clip(np.diag(cov), 0, None))
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = cov / np.outer(s, s)
    corr[~np.isfinite(corr)] = 0.0
    return corr


# ---------------------------------------------------------------------------------------------------------------------
# 1. Pulls and impacts


def _prefit_widths(fit, model):
    """σ₀ per fit parameter: the model's prefit_uncertainty (0: unconstrained); a model that does not record it
    (fitlib.Model) gives 1 to every systematic (rabbit's default constraint) and 0 to its POIs."""
    names = list(fit.names)
    if model is not None and getattr(model, "prefit_uncertainty", None) is not None:
        widths = dict(zip(model.parameter_names, np.asarray(model.prefit_uncertainty, dtype=float)))
        return np.array([widths.get(n, 0.0) for n in names])
    if model is None:
        raise ValueError("the pulls need the model's prefit uncertainties: pass a Results, or model= (the results' "
                         "model, fitlib.results.ModelInfo, or the fitlib.Model fitted)")
    pois = set(_pois(model))
    return np.array([0.0 if n in pois else 1.0 for n in names])


def pulls_and_impacts(fit, target=None, top=30, kind="impacts", grouped=False, *, impacts=None, model=None,
                      fit_name=None, mu=True, allow_negative_poi=None, style=None, label=None, path=None,
                      dpi=100) -> Figure:
    """The ranking plot: on the left the pulls (θ̂ − θ₀)/σ₀ of the constrained nuisances with their constraints σ̂/σ₀
    as error bars (unconstrained ones get their fitted value as text), on the right the impacts on `target` as bars
    (the shift for +1σ and, mirrored, for −1σ of the parameter), the `top` largest |impact| first.

    fit: a Results, a StoredFit, or a FitResult with `impacts=` (fitlib.impacts or fitlib.global_impacts) and
    `model=`. target: a POI or NOI (default: the first). kind: "impacts" (traditional, --doImpacts),
    "global_impacts" (--globalImpacts) or None (pulls only: the `top` largest |pulls|). grouped: a bar chart of
    the impacts of the groups (and 'stat', 'binByBinStat') with the total uncertainty instead. Impacts on a POI are
    on μ with mu=True (see the module). Size: 1000 × (130 + 26 per row) pixels at dpi 100 (grouped likewise).
    """
    style = _style_name(style)
    fit, model, anp = _resolve(fit, fit_name, model, allow_negative_poi)
    names = list(fit.names)
    x = np.asarray(fit.x, dtype=float)
    x0 = np.asarray(fit.x0, dtype=float)
    sigma = np.asarray(fit.uncertainties, dtype=float)
    blinded = list(getattr(fit, "blinded", []) or [])
    if kind not in ("impacts", "global_impacts", None):
        raise ValueError(f"kind {kind!r}: 'impacts', 'global_impacts' or None (pulls only)")
    imp = impacts
    if imp is None and kind is not None:
        imp = getattr(fit, kind, None)
        if imp is None:
            option = "--doImpacts" if kind == "impacts" else "--globalImpacts"
            call = "fitlib.impacts" if kind == "impacts" else "fitlib.global_impacts"
            raise ValueError(f"the fit has no {kind.replace('_', ' ')}: fitlib-fit {option} writes them (in Python, "
                             f"impacts={call}(model, result)); kind=None plots the pulls alone")
    if imp is not None:
        targets = list(imp.targets)
        if target is None:
            if not targets:
                raise ValueError("the impacts have no targets (no POIs or NOIs)")
            target = targets[0]
        if target not in targets:
            raise KeyError(f"no impacts on {target!r}; the targets are {targets}")
        row = targets.index(target)
        coord = _Coordinate(target, model, mu, anp, blinded)
        ti = names.index(target)
        if grouped:
            return _grouped_impacts(fit, imp, row, coord, x[ti], sigma[ti], kind, style, label, path, dpi)
        values = coord.sigma(x[ti], np.asarray(imp.values, dtype=float)[row])
        sources = list(imp.sources)
        keep = [j for j, s in enumerate(sources) if s != target and values[j] != 0 and np.isfinite(values[j])]
        keep.sort(key=lambda j: -abs(values[j]))
        rows = [names.index(sources[j]) for j in keep[:top]]
        impact = [values[j] for j in keep[:top]]
    else:
        if grouped:
            raise ValueError("grouped=True needs impacts (kind='impacts' or 'global_impacts')")
        coord = None
        widths = _prefit_widths(fit, model)
        cand = [i for i in range(len(names)) if widths[i] > 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            cand.sort(key=lambda i: -abs((x[i] - x0[i]) / widths[i]))
        rows = cand[:top]
        impact = None
    widths = _prefit_widths(fit, model)
    n = len(rows)
    with _styled(style):
        fig = _figure(1000, 130 + 26 * max(n, 1), style, dpi)
        if impact is not None:
            ax_p, ax_i = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [1, 1]})
        else:
            ax_p, ax_i = fig.subplots(), None
        y = np.arange(n)[::-1]  # the first row on top
        constrained = np.array([widths[i] > 0 for i in rows], dtype=bool)
        pull = np.array([(x[i] - x0[i]) / widths[i] if widths[i] > 0 else np.nan for i in rows])
        constraint = np.array([sigma[i] / widths[i] if widths[i] > 0 else np.nan for i in rows])
        ax_p.axvspan(-2, 2, color="#ffe066", alpha=0.6, lw=0)
        ax_p.axvspan(-1, 1, color="#74c476", alpha=0.6, lw=0)
        ax_p.axvline(0, color="0.3", lw=0.8)
        if constrained.any():
            ax_p.errorbar(pull[constrained], y[constrained], xerr=constraint[constrained], fmt="o", color="black",
                          ms=4, capsize=0, label="pull", gid="pulls")
        for k, i in enumerate(rows):
            if not constrained[k]:
                c = _Coordinate(names[i], model, mu, anp, blinded)
                value, error = float(c.value(x[i])), float(c.sigma(x[i], sigma[i]))
                text = f"{'μ' if c.squared else 'θ'} = {value:.3g} ± {error:.2g} (free)"
                ax_p.text(0, y[k], text, ha="center", va="center", fontsize="small", color="0.25")
        reach = np.abs(pull[constrained]) + np.nan_to_num(constraint[constrained])
        reach = reach[np.isfinite(reach)]
        lim = max(2.5, float(np.max(reach)) * 1.1 if reach.size else 0)
        ax_p.set_xlim(-lim, lim)
        ax_p.set_ylim(-0.7, n - 0.3)
        ax_p.set_yticks(y, [names[i] + (" (blinded)" if names[i] in blinded else "") for i in rows])
        ax_p.tick_params(axis="y", which="minor", left=False, right=False)
        ax_p.set_xlabel(r"$(\hat{\theta}-\theta_0)/\Delta\theta_0$")
        if ax_i is not None:
            impact = np.asarray(impact, dtype=float)
            ax_i.barh(y, impact, height=0.7, color="#d6604d", label=r"$+1\sigma$ impact", gid="impact_up")
            ax_i.barh(y, -impact, height=0.7, color="#4393c3", label=r"$-1\sigma$ impact", gid="impact_down")
            ax_i.axvline(0, color="0.3", lw=0.8)
            m = float(np.max(np.abs(impact))) * 1.15 if n else 1.0
            ax_i.set_xlim(-m, m)
            ax_i.tick_params(axis="y", which="both", left=False, right=False, labelleft=False)
            what = "global impact" if kind == "global_impacts" else "impact"
            ax_i.set_xlabel(f"{what} on {coord.label}")
            ax_i.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, frameon=False, fontsize="small")
        _experiment_label(ax_p, style, label, _is_data_fit(fit), "" if ax_i is not None else _fit_label(fit))
        if ax_i is not None and style is None and not label:
            ax_p.set_title(_fit_label(fit), loc="left", fontsize="medium")
    return _finish(fig, path, style)


def _grouped_impacts(fit, imp, row, coord, xt, st, kind, style, label, path, dpi):
    groups = list(imp.groups)
    values = np.abs(coord.sigma(xt, np.asarray(imp.grouped, dtype=float)[row]))
    order = sorted(range(len(groups)), key=lambda j: -values[j])
    bars = [("total", float(coord.sigma(xt, st)))] + [(groups[j], float(values[j])) for j in order]
    n = len(bars)
    with _styled(style):
        fig = _figure(1000, 130 + 26 * n, style, dpi)
        ax = fig.subplots()
        y = np.arange(n)[::-1]
        colors = ["0.35"] + ["#4393c3"] * (n - 1)
        ax.barh(y, [b[1] for b in bars], height=0.7, color=colors, gid="grouped_impacts")
        for yy, (_, v) in zip(y, bars):
            ax.text(v, yy, f" {v:.3g}", va="center", fontsize="small")
        ax.set_yticks(y, [b[0] for b in bars])
        ax.tick_params(axis="y", which="minor", left=False, right=False)
        ax.set_ylim(-0.7, n - 0.3)
        ax.set_xlim(0, max(b[1] for b in bars) * 1.2 or 1)
        what = "global impacts" if kind == "global_impacts" else "impacts"
        ax.set_xlabel(rf"grouped {what} on {coord.label}")
        _experiment_label(ax, style, label, _is_data_fit(fit), _fit_label(fit))
    return _finish(fig, path, style)


# ---------------------------------------------------------------------------------------------------------------------
# 2. Histograms


def _channel(model, which):
    """(index, channel, first bin) of channel `which` (a name or an index; None: the first)."""
    return _find_channel(model.channels, 0 if which is None else which)


def _hist_source(obj, fit_name, model):
    """(dict of fitlib.histograms' arrays, model, fit or None)."""
    if _is_results(obj):
        obj, model, _ = _resolve(obj, fit_name, model)
    fit = None
    if hasattr(obj, "names") and hasattr(obj, "x"):  # a fit
        fit = obj
        if getattr(obj, "histograms", None) is None:
            raise ValueError(f"the {_fit_label(obj) or 'fit'} has no histograms: fitlib-fit --saveHists writes them "
                             "(--computeHistCov their covariance); in Python pass fitlib.histograms(model, result) "
                             "with model=")
        obj = obj.histograms
    if isinstance(obj, dict):
        if model is None:
            raise ValueError("histograms as a dict (fitlib.histograms) need model= (the fitlib.Model)")
        return obj, model, fit
    if hasattr(obj, "as_dict"):
        return obj.as_dict(), model if model is not None else obj.model, fit
    raise TypeError(f"cannot plot histograms of {type(obj).__name__}: a Results, StoredFit, Histograms or "
                    "fitlib.histograms' dict with model=")


def _display_bins(c, start, flow, project):
    """The channel's bins as plotted: (bins, axis, shape, shown). bins[j] are the model's bins summed into plotted bin
    j (an int array [plotted bins, bins summed into each]); axis is (Axis, with flow bins) of the projection, None
    for an unrolled channel; shape the channel's displayed shape; shown the (Axis, with flow bins) of every axis."""
    axes = list(c.axes)
    if not axes:
        if project is not None:
            raise KeyError(f"channel {c.name!r} has no axes to project onto")
        return start + np.arange(c.nbins)[:, None], None, (c.nbins,), []
    grid = np.arange(c.nbins).reshape(c.shape)
    if c.flow and not flow:
        grid = grid[tuple(slice(int(a.underflow), int(a.underflow) + a.size) for a in axes)]
    shown = [(a, bool(c.flow and flow)) for a in axes]
    if project is None and len(axes) == 1:
        project = axes[0].name
    if project is None:
        return start + grid.reshape(-1, 1), None, grid.shape, shown
    names = [a.name for a in axes]
    if project not in names:
        raise KeyError(f"channel {c.name!r} has no axis {project!r}; its axes are {names}")
    k = names.index(project)
    return start + np.moveaxis(grid, k, 0).reshape(grid.shape[k], -1), shown[k], grid.shape, shown


def _is_category(a) -> bool:
    return a.kind in ("StrCategory", "IntCategory", "Boolean")


def _bin_labels(a, with_flow: bool) -> list:
    if a.kind in ("StrCategory", "IntCategory"):
        labels = [str(v) for v in a.categories]
    elif a.kind == "Boolean":
        labels = ["False", "True"]
    elif a.kind == "Integer":
        labels = [str(int(v)) for v in a.edges[:-1]]
    else:
        labels = [f"[{lo:g}, {hi:g})" for lo, hi in zip(a.edges[:-1], a.edges[1:])]
    if with_flow:
        labels = (["underflow"] if a.underflow else []) + labels + (["overflow"] if a.overflow else [])
    return labels


def histogram(fit, channel=None, stage="postfit", *, project=None, flow=False, model=None, fit_name=None, logy=False,
              style=None, label=None, path=None, dpi=100) -> Figure:
    """A channel's predictions stacked by process with the total's uncertainty band (√variance), the data with
    √(data_variance) error bars (the counts for a Poisson fit) and a data/prediction panel with the band; χ²/ndf of
    the channel (histograms' prefit_chi2/postfit_chi2) in the legend's title. A masked channel has no data and no
    ratio panel.

    fit: a Results, a StoredFit with histograms (fitlib-fit --saveHists), its Histograms, or fitlib.histograms'
    dict with `model=`. channel: a name or an index (default: the first). stage: "postfit" or "prefit".
    A channel of several axes is unrolled into one axis of bin indices with the boundaries of its outer axes marked,
    or with `project="axis name"` summed onto that axis. The projected band is √(Pᵀ C P) with the channel's bin
    covariance C where the histograms have it (--computeHistCov); without it the bins' variances are summed,
    which ignores the correlations between bins. A channel's flow bins (masked channels' with flow) are left out
    unless flow=True. Size: 800 × 700 pixels at dpi 100 (800 × 520 without the ratio panel).
    """
    style = _style_name(style)
    if stage not in ("prefit", "postfit"):
        raise ValueError(f"stage {stage!r}: 'prefit' or 'postfit'")
    d, model, fitobj = _hist_source(fit, fit_name, model)
    ci, c, start = _channel(model, channel)
    if d.get(stage) is None:
        raise ValueError(f"the histograms have no {stage} yields" + (
            ": a blinded data fit keeps the prefit ones only (fitlib-fit --unblind shows the postfit)"
            if stage == "postfit" else ""))
    bins, axis, shape, shown = _display_bins(c, start, flow, project)
    m = len(bins)
    yields = np.asarray(d[stage], dtype=float)[bins].sum(axis=1)  # [m, processes]
    total = np.asarray(d[f"{stage}_total"], dtype=float)[bins].sum(axis=1)
    cov_blocks = d.get(f"{stage}_covariance")
    band_note = ""
    if bins.shape[1] > 1 and cov_blocks is not None:  # Pᵀ C P, P the sum over the other axes
        cov = np.asarray(cov_blocks[ci], dtype=float)
        p = np.zeros((c.nbins, m))
        p[bins - start, np.arange(m)[:, None]] = 1.0
        variance = np.einsum("aj,aj->j", cov @ p, p)
        band_note = "bin covariance"
    else:
        variance = np.asarray(d[f"{stage}_variance"], dtype=float)[bins].sum(axis=1)
        if bins.shape[1] > 1:
            band_note = "bins' variances summed, correlations ignored"
    has_data = not c.masked and d.get("data") is not None
    if has_data:
        data = np.asarray(d["data"], dtype=float)[bins].sum(axis=1)
        dv = d.get("data_variance")
        data_err = np.sqrt(np.clip(np.asarray(dv if dv is not None else d["data"], dtype=float)[bins].sum(axis=1), 0,
                                   None))
    chi2 = d.get(f"{stage}_chi2")
    if axis is not None and not axis[1] and not _is_category(axis[0]):
        edges = np.asarray(axis[0].edges, dtype=float)
        xlabel = axis[0].label or axis[0].name
    else:
        edges = np.arange(m + 1, dtype=float)
        xlabel = ((axis[0].label or axis[0].name) if axis is not None
                  else f"bin ({' × '.join(a.name for a, _ in shown)}, unrolled)" if len(shown) > 1 else "bin")
    centers = 0.5 * (edges[1:] + edges[:-1])
    names = list(model.process_names)
    signal = list(np.asarray(getattr(model, "signal", np.zeros(len(names), bool)), dtype=bool))
    order = [i for i in range(len(names)) if not signal[i]] + [i for i in range(len(names)) if signal[i]]
    err = np.sqrt(np.clip(variance, 0, None))
    with _styled(style):
        fig = _figure(800, 700 if has_data else 520, style, dpi)
        if has_data:
            ax, ax_r = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
        else:
            ax, ax_r = fig.subplots(), None
        colors = matplotlib.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
        bottom = np.zeros(m)
        for i in order:
            top = bottom + yields[:, i]
            _stairs(ax, top, edges, baseline=bottom, fill=True, facecolor=colors[i % len(colors)], lw=0,
                    label=names[i], gid=f"stack:{names[i]}")
            bottom = top
        _stairs(ax, total + err, edges, baseline=total - err, fill=True, facecolor="none", edgecolor="0.25",
                hatch="////", lw=0, label="uncertainty", gid="band")
        _stairs(ax, total, edges, fill=False, edgecolor="black", lw=0.8, gid="total")
        if has_data:
            ax.errorbar(centers, data, yerr=data_err, fmt="o", color="black", ms=3.5, lw=1, label="data", gid="data")
        ax.set_ylabel("Events")
        if logy:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, None)
        title = stage
        if chi2 is not None:
            c2, ndf = float(np.asarray(chi2["chi2"])[ci]), int(np.asarray(chi2["ndf"])[ci])
            if np.isfinite(c2) and ndf > 0:
                title += rf", $\chi^2$/ndf = {c2:.1f}/{ndf}"
        if band_note:
            title += f"\nband: {band_note}"
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles[::-1], labels[::-1], title=title, fontsize="small", title_fontsize="small",
                  ncols=2 if len(labels) > 5 else 1, loc="upper right")
        ax.set_ylim(top=(ax.get_ylim()[1] * (1.35 if not logy else 50)))
        _mark_unrolled(ax, shape, shown, edges, axis, m)
        xa = ax_r if ax_r is not None else ax
        if axis is not None and (axis[1] or _is_category(axis[0])):
            xa.set_xticks(centers, _bin_labels(axis[0], axis[1]), rotation=0 if m <= 8 else 90)
        xa.set_xlabel(xlabel)
        xa.set_xlim(edges[0], edges[-1])
        if ax_r is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = data / total
                ratio_err = data_err / total
                rel = err / total
            _stairs(ax_r, 1 + rel, edges, baseline=1 - rel, fill=True, facecolor="none", edgecolor="0.25",
                    hatch="////", lw=0, gid="ratio_band")
            ax_r.axhline(1, color="0.3", lw=0.8)
            ax_r.errorbar(centers, ratio, yerr=ratio_err, fmt="o", color="black", ms=3.5, lw=1, gid="ratio")
            spread = np.concatenate([np.abs(ratio - 1) + ratio_err, rel])
            spread = spread[np.isfinite(spread)]
            r = min(max(float(np.max(spread)) * 1.1 if spread.size else 0.1, 0.1), 1.0)
            ax_r.set_ylim(1 - r, 1 + r)
            ax_r.set_ylabel("Data / pred.")
        right = f"{c.name}" + (f", {_fit_label(fitobj)}" if fitobj is not None else "")
        _experiment_label(ax, style, label, fitobj is None or _is_data_fit(fitobj), right)
    return _finish(fig, path, style)


def _mark_unrolled(ax, shape, shown, edges, axis, m):
    """Vertical lines at the boundaries of the outer axes of an unrolled channel, with their bins as labels."""
    if axis is not None or len(shape) < 2:
        return
    inner = int(np.prod(shape[1:]))
    for step in [int(np.prod(shape[k:])) for k in range(len(shape) - 1, 0, -1)]:
        outer = step == inner
        for b in range(step, m, step):
            ax.axvline(edges[b], color="0.4" if outer else "0.7", lw=1.0 if outer else 0.6,
                       ls="-" if outer else ":", zorder=0.5)
    a, with_flow = shown[0]
    labels = _bin_labels(a, with_flow)
    top = ax.secondary_xaxis("top")
    top.set_xticks([edges[j * inner] + 0.5 * inner for j in range(shape[0])],
                   [f"{a.label or a.name} {labels[j]}" if j == 0 else labels[j] for j in range(shape[0])]
                   if shape[0] <= 12 else [], fontsize="x-small", rotation=0 if shape[0] <= 6 else 90)
    top.tick_params(which="both", length=0)


# ---------------------------------------------------------------------------------------------------------------------
# 3. Correlation matrix


def correlation(fit, top=None, parameters=None, *, fit_name=None, annotate=None, style=None, label=None, path=None,
                dpi=100) -> Figure:
    """The fit's correlation matrix as a heatmap (frozen parameters left out).

    fit: a Results, StoredFit or FitResult (its covariance normalised where it has no correlation). parameters: the
    names to show, in that order; top: the `top` parameters with the largest |correlation| with any other (in the
    fit's order). annotate: write the coefficients in the cells (default: up to 20 parameters). The correlation
    of μ = x² with the others is that of the fit's coordinate x (for x̂ > 0). Size: (200 + 24·n) pixels square
    (at least 560; tick labels dropped beyond 120 parameters).
    """
    style = _style_name(style)
    fit, _, _ = _resolve(fit, fit_name)
    names = list(fit.names)
    corr = _correlation_of(fit)
    if parameters is not None:
        missing = [p for p in parameters if p not in names]
        if missing:
            raise KeyError(f"the fit has no parameters {missing}; its parameters are {names}")
        idx = [names.index(p) for p in parameters]
    else:
        frozen = np.asarray(getattr(fit, "frozen", np.zeros(len(names), bool)), dtype=bool)
        idx = [i for i in range(len(names)) if not frozen[i]]
        if top is not None and len(idx) > top:
            sub = np.abs(corr[np.ix_(idx, idx)])
            np.fill_diagonal(sub, 0)
            score = np.nan_to_num(sub).max(axis=1)
            best = sorted(np.argsort(-score, kind="stable")[:top])
            idx = [idx[k] for k in best]
    sub = corr[np.ix_(idx, idx)]
    n = len(idx)
    if annotate is None:
        annotate = n <= 20
    size = min(max(560, 200 + 24 * n), 3000)
    with _styled(style):
        fig = _figure(size, size, style, dpi)
        ax = fig.subplots()
        im = ax.imshow(sub, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest", aspect="equal")
        im.set_gid("correlation")
        fig.colorbar(im, ax=ax, shrink=0.8, label="correlation")
        if n <= 120:
            ax.set_xticks(np.arange(n), [names[i] for i in idx], rotation=90, fontsize="small")
            ax.set_yticks(np.arange(n), [names[i] for i in idx], fontsize="small")
        ax.tick_params(which="minor", bottom=False, top=False, left=False, right=False)
        if annotate:
            for a in range(n):
                for b in range(n):
                    v = sub[a, b]
                    ax.text(b, a, f"{v:.2f}", ha="center", va="center", fontsize="small" if n <= 10 else "x-small",
                            color="white" if abs(v) > 0.6 else "black")
        _experiment_label(ax, style, label, _is_data_fit(fit), _fit_label(fit))
    return _finish(fig, path, style)


# ---------------------------------------------------------------------------------------------------------------------
# 4. and 5. Likelihood scans


def _crossings(v, y, level, vhat):
    """The values left and right of vhat where the scan y(v) crosses `level`, by linear interpolation between
    points (None where the scan does not reach it)."""
    order = np.argsort(v)
    v, y = v[order], y[order]
    ok = np.isfinite(y)
    v, y = v[ok], y[ok]
    lo = hi = None
    for a in range(len(v) - 1):
        y0, y1 = y[a] - level, y[a + 1] - level
        if y0 == y1 or (y0 != 0 and (y0 > 0) == (y1 > 0)):  # no crossing in [v_a, v_a+1) (one at y1 = 0 is the next's)
            continue
        c = v[a] + (v[a + 1] - v[a]) * y0 / (y0 - y1)
        if c <= vhat:
            lo = c  # the last crossing left of the minimum
        elif hi is None:
            hi = c
    return lo, hi


def _scan_source(obj, parameter, fit_name, model, result, anp):
    if hasattr(obj, "dnll") and hasattr(obj, "parameter"):  # a Scan
        return obj, result, model, anp
    fit, model, anp = _resolve(obj, fit_name, model, anp)
    scans = getattr(fit, "scans", None)
    if not scans:
        raise ValueError(f"the {_fit_label(fit) or 'fit'} has no likelihood scans: fitlib-fit --scan NAME writes them "
                         "(in Python pass fitlib.scan(model, result, NAME) with result=)")
    if parameter is None:
        parameter = next(iter(scans))
    if parameter not in scans:
        raise KeyError(f"no scan of {parameter!r}; the scans are of {list(scans)}")
    return scans[parameter], fit, model, anp


def scan(fit, parameter=None, *, result=None, fit_name=None, model=None, mu=True, allow_negative_poi=None,
         style=None, label=None, path=None, dpi=100) -> Figure:
    """A profile-likelihood scan: 2ΔNLL against the parameter's value, the 1σ and 2σ levels (2ΔNLL = 1 and 4) with
    the scan's crossings (interpolated between points) marked and written in the legend, and the Hessian's
    parabola ((v − v̂)/σ)² of the fit's uncertainty for comparison (σ_μ = 2x̂σ for a POI shown as μ; a scan that
    reaches x < 0 stays in x). Points whose fit did not converge are crossed out.

    fit: a Results, a StoredFit (its scan of `parameter`, by default the first), or a Scan (fitlib.scan's or
    StoredFit.scans[p]) with `result=` the fit it was made around for the parabola (none without it).
    Size: 700 × 500 pixels at dpi 100.
    """
    style = _style_name(style)
    s, fitobj, model, anp = _scan_source(fit, parameter, fit_name, model, result, allow_negative_poi)
    p = s.parameter
    blinded = list(getattr(fitobj, "blinded", []) or []) if fitobj is not None else []
    coord = _Coordinate(p, model, mu, anp, blinded)
    coord.squared &= bool(np.all(np.asarray(s.values) >= 0))  # x² would fold a scan through x = 0 onto itself
    v = coord.value(s.values)
    y = 2 * np.asarray(s.dnll, dtype=float)
    conv = np.array([str(t).startswith("converged") for t in s.status], dtype=bool)
    if fitobj is not None:
        i = list(fitobj.names).index(p)
        xh, sx = float(fitobj.x[i]), float(fitobj.uncertainties[i])
        vhat, sv = float(coord.value(xh)), float(coord.sigma(xh, sx))
    else:
        vhat, sv = float(v[np.nanargmin(y)]), float("nan")
    with _styled(style):
        fig = _figure(700, 500, style, dpi)
        ax = fig.subplots()
        span = (np.nanmin(v), np.nanmax(v))
        if np.isfinite(sv) and sv > 0:
            t = np.linspace(span[0], span[1], 200)
            ax.plot(t, ((t - vhat) / sv) ** 2, color="#d6604d", lw=1.2, ls="--", label="Hessian", gid="parabola")
        ax.plot(v, y, "o-", color="#2166ac", ms=4, lw=1.5, label="profile scan", gid="scan")
        if not conv.all():
            ax.plot(v[~conv], y[~conv], "x", color="red", ms=9, mew=2, label="not converged")
        lines = []
        for level, name in ((1.0, r"$1\sigma$"), (4.0, r"$2\sigma$")):
            ax.axhline(level, color="0.5", lw=0.8, ls=":")
            ax.text(0.995, level, name, transform=ax.get_yaxis_transform(), va="bottom", ha="right",
                    fontsize="small", color="0.3")
            lo, hi = _crossings(v, y, level, vhat)
            for c in (lo, hi):
                if c is not None:
                    ax.plot([c, c], [0, level], color="0.4", lw=0.8, ls="--")
                    ax.plot([c], [level], "o", mfc="white", mec="0.2", ms=5, gid=f"crossing{int(level)}")
            fmt = lambda c: "beyond the scan" if c is None else f"{c:.4g}"  # noqa: E731
            lines.append(f"{name}: [{fmt(lo)}, {fmt(hi)}]")
            if level == 1.0 and lo is not None and hi is not None:
                what = r"$\hat{\mu}$" if coord.squared else "best fit"
                lines.insert(0, rf"{what} = {vhat:.4g}$^{{+{hi - vhat:.2g}}}_{{-{vhat - lo:.2g}}}$")
        ax.plot([], [], " ", label="\n".join(lines))
        ax.set_xlim(*span)
        ax.set_ylim(0, max(5.0, float(np.nanmax(y)) * 1.1))
        ax.set_xlabel(coord.label)
        ax.set_ylabel(r"$-2\,\Delta\ln L$")
        ax.legend(fontsize="small", loc="upper center")
        right = _fit_label(fitobj) if fitobj is not None else ""
        _experiment_label(ax, style, label, fitobj is None or _is_data_fit(fitobj), right)
    return _finish(fig, path, style)


def scan2d(fit, parameters=None, *, result=None, fit_name=None, model=None, mu=True, allow_negative_poi=None,
           style=None, label=None, path=None, dpi=100) -> Figure:
    """A two-parameter profile scan: 2ΔNLL as a colour map with the 68.3 % and 95 % CL contours of two parameters
    (2ΔNLL = 2.30 and 5.99) and the best fit marked (points whose fit did not converge crossed out).

    fit: a Results, a StoredFit (its 2-D scan of `parameters` (a, b), by default the first) or a Scan2D with
    `result=` the fit for the best-fit point (else the grid's minimum). POIs as μ with mu=True (the module).
    Size: 700 × 600 pixels at dpi 100.
    """
    style = _style_name(style)
    if hasattr(fit, "dnll") and hasattr(fit, "values_x"):
        s, fitobj, anp = fit, result, allow_negative_poi
    else:
        fitobj, model, anp = _resolve(fit, fit_name, model, allow_negative_poi)
        scans = list(getattr(fitobj, "scans2D", []) or [])
        if not scans:
            raise ValueError(f"the {_fit_label(fitobj) or 'fit'} has no 2-D scans: fitlib-fit --scan2D A B writes them")
        if parameters is None:
            s = scans[0]
        else:
            match = [t for t in scans if tuple(t.parameters) == tuple(parameters)]
            if not match:
                have = [tuple(t.parameters) for t in scans]
                raise KeyError(f"no 2-D scan of {tuple(parameters)}; the scans are of {have}")
            s = match[0]
    a, b = s.parameters
    blinded = list(getattr(fitobj, "blinded", []) or []) if fitobj is not None else []
    ca, cb = (_Coordinate(p, model, mu, bool(anp), blinded) for p in (a, b))
    ca.squared &= bool(np.all(np.asarray(s.values_x) >= 0))  # x² would fold a scan through x = 0 onto itself
    cb.squared &= bool(np.all(np.asarray(s.values_y) >= 0))
    vx, vy = ca.value(s.values_x), cb.value(s.values_y)
    z = 2 * np.asarray(s.dnll, dtype=float).T  # [y, x]
    conv = np.char.startswith(np.asarray(s.status).astype(str), "converged").T
    if fitobj is not None:
        names = list(fitobj.names)
        best = (float(ca.value(fitobj.x[names.index(a)])), float(cb.value(fitobj.x[names.index(b)])))
    else:
        j, i = np.unravel_index(np.nanargmin(z), z.shape)
        best = (float(vx[i]), float(vy[j]))
    with _styled(style):
        fig = _figure(700, 600, style, dpi)
        ax = fig.subplots()
        vmax = max(_LEVELS_2D[1] * 2, 1.0)
        mesh = ax.pcolormesh(vx, vy, np.minimum(z, vmax * 10), shading="nearest", cmap="Blues_r", vmin=0, vmax=vmax)
        mesh.set_gid("dnll")
        fig.colorbar(mesh, ax=ax, label=r"$-2\,\Delta\ln L$", extend="max")
        cs = ax.contour(vx, vy, z, levels=list(_LEVELS_2D), colors=["#b2182b", "#ef8a62"], linewidths=[2, 1.5],
                        linestyles=["-", "--"])
        cs.set_gid("contours")
        ax.plot([], [], color="#b2182b", lw=2, label="68.3% CL")
        ax.plot([], [], color="#ef8a62", lw=1.5, ls="--", label="95% CL")
        ax.plot([best[0]], [best[1]], marker="P", color="black", ms=10, ls="none", label="best fit", gid="best")
        if not conv.all():
            X, Y = np.meshgrid(vx, vy)
            ax.plot(X[~conv], Y[~conv], "x", color="red", ms=7, label="not converged")
        ax.set_xlabel(ca.label)
        ax.set_ylabel(cb.label)
        ax.legend(fontsize="small", loc="upper right")
        right = _fit_label(fitobj) if fitobj is not None else ""
        _experiment_label(ax, style, label, fitobj is None or _is_data_fit(fitobj), right)
    return _finish(fig, path, style)


# ---------------------------------------------------------------------------------------------------------------------
# 6. Toys


def _option(run, name):
    """A fitlib-fit option of the run: from its options, else from its command line (not every option is in both)."""
    if name in run.options:
        return run.options[name]
    words = run.command_line.split()
    for k, w in enumerate(words):
        if w == f"--{name}" and k + 1 < len(words):
            return words[k + 1]
        if w.startswith(f"--{name}="):
            return w.split("=", 1)[1]
    return None


def _toy_pulls(results, parameter):
    """Each converged toy's pull (x̂ − truth)/σ̂ of `parameter` in the fit's coordinates, as the results define it."""
    toys = results.toys
    fits = [f for n, f in results.fits.items() if n.startswith("toy") and n[3:].isdigit()]
    if toys is None or not fits:
        raise ValueError(f"{results.path} has no toys: fitlib-fit -t N writes them")
    i = list(fits[0].names).index(parameter)
    x = np.array([f.x[i] for f in fits], dtype=float)
    s = np.array([f.uncertainties[i] for f in fits], dtype=float)
    ok = np.array([f.converged for f in fits], dtype=bool) & np.isfinite(x) & np.isfinite(s) & (s > 0)
    x, s = x[ok], s[ok]
    k = list(toys.parameters).index(parameter) if parameter in toys.parameters else None
    if toys.pull_reference == "generating_point":
        kind = dict(zip(results.model.parameter_names, results.model.parameter_kind)).get(parameter)
        if kind != "poi" and _option(results.run, "toysSystRandomize") == "bayesian":
            raise ValueError(f"{parameter!r} is a nuisance, and with --toysSystRandomize bayesian its truth is each "
                             "toy's draw, which the results do not keep")
        truth = np.array([f.x0[i] for f, good in zip(fits, ok) if good], dtype=float)
    elif toys.pull_reference == "observed_fit":
        # every toy's truth is the fit to the observed data, which the file keeps only in the toys' summary:
        # pull_mean = mean(x/σ) − t·mean(1/σ) over the same toys
        if k is None or int(toys.pull_count[k]) != len(x) or len(x) == 0:
            raise ValueError(f"cannot recover the observed fit's {parameter!r} (the toys' truth) from the summary")
        truth = np.full(len(x), (np.mean(x / s) - toys.pull_mean[k]) / np.mean(1 / s))
    else:
        raise ValueError(f"unknown pull_reference {toys.pull_reference!r}")
    pulls = (x - truth) / s
    if k is not None and len(pulls) and np.isfinite(toys.pull_mean[k]):
        if abs(np.mean(pulls) - toys.pull_mean[k]) > 1e-6 * max(1.0, abs(toys.pull_mean[k])):
            warnings.warn(f"the toys' pulls of {parameter!r} average {np.mean(pulls):.6g}, the file's summary says "
                          f"{toys.pull_mean[k]:.6g}", stacklevel=3)
    return pulls


def toy_pulls(results, parameter=None, *, bins=None, style=None, label=None, path=None, dpi=100) -> Figure:
    """The distribution of the toys' pulls (x̂ − truth)/σ̂ of a POI or NOI (default: the first), over the converged
    toys (results.fits "toy1" …), with a Gaussian fitted by maximum likelihood (the pulls' mean and their standard
    deviation with 1/n) and the expected N(0, 1).

    The truth is the file's ToysSummary.pull_reference (docs/results-format.md): 'generating_point', the
    toys' generating parameters (each toy's x0: the defaults, --expectSignal included); 'observed_fit', the fit to
    the observed data, recovered from the summary's pull_mean. Pulls are in the fit's coordinates, as the summary's
    (a POI is √μ unless --allowNegativePOI). Size: 700 × 500 pixels at dpi 100.
    """
    style = _style_name(style)
    if not _is_results(results):
        raise TypeError("toy_pulls needs a results file's Results (fitlib.results.read_results)")
    if results.toys is None:
        raise ValueError(f"{results.path} has no toys: fitlib-fit -t N writes them")
    if parameter is None:
        if not results.toys.parameters:
            raise ValueError("the toys have no POIs or NOIs")
        parameter = results.toys.parameters[0]
    pulls = _toy_pulls(results, parameter)
    n = len(pulls)
    mean = float(np.mean(pulls)) if n else float("nan")
    width = float(np.sqrt(np.mean((pulls - mean) ** 2))) if n else float("nan")
    lim = max(4.0, math.ceil(float(np.max(np.abs(pulls)))) if n else 4.0)
    if bins is None:
        bins = int(2 * lim / (0.25 if n >= 100 else 0.5))
    edges = np.linspace(-lim, lim, bins + 1)
    counts, _ = np.histogram(pulls, edges)
    w = edges[1] - edges[0]
    with _styled(style):
        fig = _figure(700, 500, style, dpi)
        ax = fig.subplots()
        _stairs(ax, counts, edges, fill=True, facecolor="#92c5de", lw=0, label=f"{n} converged toys", gid="toys")
        _stairs(ax, counts, edges, fill=False, edgecolor="#2166ac", lw=1)
        t = np.linspace(-lim, lim, 400)
        if n and width > 0:
            g = n * w * np.exp(-0.5 * ((t - mean) / width) ** 2) / (width * math.sqrt(2 * math.pi))
            ax.plot(t, g, color="#b2182b", lw=1.8, label=f"Gaussian fit: mean = {mean:.3f}, σ = {width:.3f}",
                    gid="gaussian")
        ax.plot(t, n * w * np.exp(-0.5 * t**2) / math.sqrt(2 * math.pi), color="0.4", lw=1, ls="--", label="N(0, 1)")
        ax.set_xlim(-lim, lim)
        ax.set_ylim(0, max(counts.max() if n else 1, 1) * 1.35)
        ax.set_xlabel(rf"pull $(\hat{{x}} - x_{{\mathrm{{true}}}})/\hat{{\sigma}}$ of {parameter}")
        ax.set_ylabel("toys")
        ref = {"generating_point": "truth: generating point", "observed_fit": "truth: observed fit"}
        ax.legend(fontsize="small", loc="upper left", title=ref.get(results.toys.pull_reference),
                  title_fontsize="small")
        _experiment_label(ax, style, label, False, "toys")
    return _finish(fig, path, style)
