# SPDX-License-Identifier: MIT
"""fitlib.plot and fitlib-plot (fitlib.plot_cli) on results files that fitlib-fit makes (FITLIB_FIT, which
scripts/python-venv.sh sets to the build's; without it these tests are skipped): each plot rendered to PNG and PDF
(the files exist, the PNG decodes at the plot's size in pixels, the PDF is one), and what the axes show against the
results: the stack's top is the total yield, the ratio points data/total, the impact bars the largest impacts in
order, the scan curve 2·ΔNLL, the heatmap the correlation submatrix, the toys' histogram their pulls.
"""

from __future__ import annotations

import math
import os
import pathlib

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.image  # noqa: E402

import fitlib  # noqa: E402
from fitlib import plot  # noqa: E402
from fitlib.plot_cli import main  # noqa: E402
from fitlib.results import read_results  # noqa: E402
import common  # noqa: E402
from common import AXES, DEMO, ROOT  # noqa: E402

ANALYSIS = ("-t", "-1", "0", "--unblind", "--doImpacts", "--globalImpacts", "--scan", "signal", "--scan2D", "signal",
            "lumi", "--scanPoints", "9", "--saveHists", "--computeHistCov")


def fitlib_fit(tmp_path_factory, tensor, *options):
    return read_results(common.fitlib_fit(tmp_path_factory, tensor, *options))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Asimov and data fits of the demo with impacts, 1-D and 2-D scans and histograms with their covariance."""
    return fitlib_fit(tmp_path_factory, DEMO, *ANALYSIS)


@pytest.fixture(scope="module")
def toys(tmp_path_factory):
    return fitlib_fit(tmp_path_factory, DEMO, "-t", "100", "--replicaBatch", "64")


@pytest.fixture(scope="module")
def observed_toys(tmp_path_factory):
    """Toys around the observed data (pull_reference observed_fit), with the data fit that is their truth."""
    return fitlib_fit(tmp_path_factory, DEMO, "-t", "0", "20", "--unblind", "--toysDataMode", "observed")


@pytest.fixture(scope="module")
def axes(tmp_path_factory):
    """Channels of several axes of every kind, masked ones with flow bins, with the histograms' covariance."""
    return fitlib_fit(tmp_path_factory, AXES, "-t", "0", "--unblind", "--saveHists", "--computeHistCov")


def render(fn, tmp_path, name, size, *args, **kwargs):
    """fn(*args) written to NAME.png and NAME.pdf; checks both files and the PNG's size (width, height)."""
    png, pdf = tmp_path / f"{name}.png", tmp_path / f"{name}.pdf"
    fig = fn(*args, path=[png, pdf], **kwargs)
    assert png.is_file() and pdf.is_file()
    image = matplotlib.image.imread(png)
    assert image.shape[:2] == (size[1], size[0])
    assert pdf.read_bytes()[:5] == b"%PDF-"
    return fig


def by_gid(artists, gid):
    found = [a for a in artists if a.get_gid() == gid]
    assert found, f"no artist {gid!r}"
    return found


def ranked_impacts(fit, target, kind="impacts", top=30):
    """(names, impacts on mu) of the `top` largest impacts on the POI `target`, the largest first."""
    imp = getattr(fit, kind).of(target)
    xhat = fit.x[fit.names.index(target)]
    items = [(n, 2 * xhat * v) for n, v in imp.items() if n != target and v != 0]
    items.sort(key=lambda t: -abs(t[1]))
    return [n for n, _ in items[:top]], np.array([v for _, v in items[:top]])


# ----- pulls and impacts


@pytest.mark.parametrize("kind", ["impacts", "global_impacts"])
def test_pulls_and_impacts(results, tmp_path, kind):
    fit = results["data"]
    names, impacts = ranked_impacts(fit, "signal", kind)
    fig = render(plot.pulls_and_impacts, tmp_path, kind, (1000, 130 + 26 * len(names)), results, kind=kind)
    ax_p, ax_i = fig.axes
    up = by_gid(ax_i.patches, "impact_up")
    down = by_gid(ax_i.patches, "impact_down")
    np.testing.assert_allclose([p.get_width() for p in up], impacts, rtol=1e-12)
    np.testing.assert_allclose([p.get_width() for p in down], -impacts, rtol=1e-12)
    assert [p.get_y() + p.get_height() / 2 for p in up] == list(range(len(names)))[::-1]  # the largest on top
    labels = sorted(((t.get_position()[1], t.get_text()) for t in ax_p.get_yticklabels()), reverse=True)
    assert [t for _, t in labels] == names
    # the constrained rows' pulls (θ̂ − θ₀)/σ₀ with σ̂/σ₀ as error bars; the unconstrained wjets_norm has none (and
    # no global impact)
    m = results.model
    width = dict(zip(m.parameter_names, m.prefit_uncertainty))
    rows = [n for n in names if width[n] > 0]
    assert ("wjets_norm" in names) == (kind == "impacts") and "wjets_norm" not in rows
    i = [fit.names.index(n) for n in rows]
    sigma0 = np.array([width[n] for n in rows])
    (pulls,) = by_gid(ax_p.lines, "pulls")
    np.testing.assert_allclose(pulls.get_xdata(), (fit.x[i] - fit.x0[i]) / sigma0, rtol=1e-12)
    assert list(pulls.get_ydata()) == [len(names) - 1 - names.index(n) for n in rows]
    (container,) = [c for c in ax_p.containers if c.has_xerr]
    half = [abs(s[1][0] - s[0][0]) / 2 for s in container.lines[2][0].get_segments()]
    np.testing.assert_allclose(half, fit.uncertainties[i] / sigma0, rtol=1e-12)


def test_impacts_top_and_fit_coordinates(results, tmp_path):
    fit = results["data"]
    names, impacts = ranked_impacts(fit, "signal", top=3)
    xhat = fit.x[0]
    fig = render(plot.pulls_and_impacts, tmp_path, "top3", (1000, 130 + 26 * 3), results, top=3, mu=False)
    widths = [p.get_width() for p in by_gid(fig.axes[1].patches, "impact_up")]
    np.testing.assert_allclose(widths, impacts / (2 * xhat), rtol=1e-12)  # on x = √μ, as stored


@pytest.mark.parametrize("kind", ["impacts", "global_impacts"])
def test_grouped_impacts(results, tmp_path, kind):
    fit = results["data"]
    grouped = getattr(fit, kind).grouped_of("signal")
    xhat, sigma = fit.x[0], fit.uncertainties[0]
    order = sorted(grouped, key=lambda g: -grouped[g])
    fig = render(plot.pulls_and_impacts, tmp_path, f"{kind}_grouped", (1000, 130 + 26 * (len(order) + 1)), results,
                 kind=kind, grouped=True)
    (ax,) = fig.axes
    bars = by_gid(ax.patches, "grouped_impacts")
    expected = 2 * xhat * np.array([sigma] + [grouped[g] for g in order])
    np.testing.assert_allclose([b.get_width() for b in bars], expected, rtol=1e-12)
    labels = sorted(((t.get_position()[1], t.get_text()) for t in ax.get_yticklabels()), reverse=True)
    assert [t for _, t in labels] == ["total", *order]


def test_pulls_only(results, tmp_path):
    """kind=None: the constrained nuisances' pulls alone, the largest |pull| on top."""
    fit = results["data"]
    m = results.model
    width = dict(zip(m.parameter_names, m.prefit_uncertainty))
    rows = [n for n in m.parameter_names if width[n] > 0]
    i = [fit.names.index(n) for n in rows]
    pull = (fit.x[i] - fit.x0[i]) / np.array([width[n] for n in rows])
    order = np.argsort(-np.abs(pull), kind="stable")
    fig = render(plot.pulls_and_impacts, tmp_path, "pulls", (1000, 130 + 26 * len(rows)), results, kind=None)
    (ax,) = fig.axes
    (line,) = by_gid(ax.lines, "pulls")
    np.testing.assert_allclose(line.get_xdata(), pull[order], rtol=1e-12)
    labels = sorted(((t.get_position()[1], t.get_text()) for t in ax.get_yticklabels()), reverse=True)
    assert [t for _, t in labels] == [rows[k] for k in order]


# ----- histograms


def channel_slice(model, name):
    c = model.channel(name)
    return c, slice(c.start, c.start + c.nbins)


@pytest.mark.parametrize("stage", ["postfit", "prefit"])
def test_histogram(results, tmp_path, stage):
    h = results["data"].histograms
    c, s = channel_slice(results.model, "ch0")
    fig = render(plot.histogram, tmp_path, f"hist_{stage}", (800, 700), results, "ch0", stage=stage)
    ax, ax_r = fig.axes
    total = getattr(h, f"{stage}_total")[s]
    procs = getattr(h, stage)[s]
    err = np.sqrt(getattr(h, f"{stage}_variance")[s])
    edges = results.model.channel("ch0").axes[0].edges
    # the stack: backgrounds from the bottom, the signal on top, whose top is the total
    names, signal = results.model.process_names, results.model.signal
    stacked = [n for n, sg in zip(names, signal) if not sg] + [n for n, sg in zip(names, signal) if sg]
    patches = [by_gid(ax.patches, f"stack:{n}")[0] for n in stacked]
    for n, p in zip(stacked, patches):
        data = p.get_data()
        np.testing.assert_array_equal(data.edges, edges)
        np.testing.assert_allclose(data.values - data.baseline, procs[:, names.index(n)], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(patches[-1].get_data().values, total, rtol=1e-12)
    band = by_gid(ax.patches, "band")[0].get_data()
    np.testing.assert_allclose(band.values, total + err, rtol=1e-12)
    np.testing.assert_allclose(band.baseline, total - err, rtol=1e-12)
    (data,) = by_gid(ax.lines, "data")
    np.testing.assert_array_equal(data.get_ydata(), h.data[s])
    np.testing.assert_allclose(data.get_xdata(), (edges[1:] + edges[:-1]) / 2)
    (ratio,) = by_gid(ax_r.lines, "ratio")
    np.testing.assert_allclose(ratio.get_ydata(), h.data[s] / total, rtol=1e-12)
    rband = by_gid(ax_r.patches, "ratio_band")[0].get_data()
    np.testing.assert_allclose(rband.values, 1 + err / total, rtol=1e-12)
    chi2 = getattr(h, f"{stage}_chi2")
    assert f"{chi2.chi2[0]:.1f}/{chi2.ndf[0]}" in ax.get_legend().get_title().get_text()


def test_histogram_masked(results, tmp_path):
    h = results["data"].histograms
    c, s = channel_slice(results.model, "ch1_masked")
    fig = render(plot.histogram, tmp_path, "masked", (800, 520), results["data"], "ch1_masked")
    (ax,) = fig.axes  # no ratio panel
    assert not [a for a in ax.lines if a.get_gid() == "data"]
    top = by_gid(ax.patches, "stack:signal")[0].get_data().values
    np.testing.assert_allclose(top, h.postfit_total[s], rtol=1e-12)


def test_histogram_unrolled(axes, tmp_path):
    h = axes["data"].histograms
    c, s = channel_slice(axes.model, "pt_eta")
    fig = render(plot.histogram, tmp_path, "unrolled", (800, 700), axes, "pt_eta")
    ax = fig.axes[0]
    top = by_gid(ax.patches, "stack:sig")[0].get_data()
    np.testing.assert_allclose(top.values, h.postfit_total[s], rtol=1e-12)
    np.testing.assert_array_equal(top.edges, np.arange(17))
    # the boundaries of the outer axis pt (4 bins of eta each)
    vlines = sorted(ln.get_xdata()[0] for ln in ax.lines if len(set(ln.get_xdata())) == 1 and ln.get_gid() is None)
    assert vlines == [4, 8, 12]


def test_histogram_flow_bins_left_out(axes, tmp_path):
    h = axes["data"].histograms
    c, s = channel_slice(axes.model, "unfolded")  # masked, flow bins: 5 × 5 stored, 3 × 3 inside
    assert c.flow and c.shape == (5, 5)
    fig = render(plot.histogram, tmp_path, "flow", (800, 520), axes, "unfolded")
    top = by_gid(fig.axes[0].patches, "stack:sig")[0].get_data().values
    np.testing.assert_allclose(top, h.postfit_total[s].reshape(5, 5)[1:4, 1:4].ravel(), rtol=1e-12)


def test_histogram_projection(axes, tmp_path):
    """Projected onto pt: the band is √(Pᵀ C P) with the channel's covariance, or the summed variances without."""
    h = axes["data"].histograms
    c, s = channel_slice(axes.model, "pt_eta")
    ci = [ch.name for ch in axes.model.channels].index("pt_eta")
    total = h.postfit_total[s].reshape(4, 4).sum(axis=1)
    cov = h.postfit_covariance[ci].reshape(4, 4, 4, 4)
    err_cov = np.sqrt(np.array([cov[a, :, a, :].sum() for a in range(4)]))  # Pᵀ C P, P summing over eta
    err_var = np.sqrt(h.postfit_variance[s].reshape(4, 4).sum(axis=1))
    assert not np.allclose(err_cov, err_var)  # the correlations matter here
    fig = render(plot.histogram, tmp_path, "project", (800, 700), axes, "pt_eta", project="pt")
    ax, ax_r = fig.axes
    band = by_gid(ax.patches, "band")[0].get_data()
    np.testing.assert_allclose(band.values, total + err_cov, rtol=1e-12)
    np.testing.assert_array_equal(band.edges, c.axes[0].edges)
    (ratio,) = by_gid(ax_r.lines, "ratio")
    np.testing.assert_allclose(ratio.get_ydata(), h.data[s].reshape(4, 4).sum(axis=1) / total, rtol=1e-12)
    # fitlib.histograms' dict without the covariance, with the model given
    d = h.as_dict()
    del d["postfit_covariance"], d["prefit_covariance"]
    fig = plot.histogram(d, "pt_eta", project="pt", model=axes.model)
    band = by_gid(fig.axes[0].patches, "band")[0].get_data()
    np.testing.assert_allclose(band.values, total + err_var, rtol=1e-12)
    assert "correlations ignored" in fig.axes[0].get_legend().get_title().get_text()


@pytest.mark.parametrize("style", ["CMS", "ATLAS"])
def test_styles(results, tmp_path, style):
    """mplhep's style and experiment label; the same size in pixels as without."""
    pytest.importorskip("mplhep")
    fig = render(plot.scan, tmp_path, style, (700, 500), results, style=style, label="Preliminary")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert style in texts and "Preliminary" in texts


# ----- correlation


def test_correlation(results, tmp_path):
    fit = results["data"]
    fig = render(plot.correlation, tmp_path, "correlation", (560, 560), results)
    (image,) = fig.axes[0].images
    np.testing.assert_array_equal(image.get_array(), fit.correlation)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == fit.names
    # the 3 most correlated with any other, in the fit's order
    offdiag = np.abs(fit.correlation - np.diag(np.diag(fit.correlation))).max(axis=1)
    top = sorted(np.argsort(-offdiag)[:3])
    fig = render(plot.correlation, tmp_path, "correlation_top", (560, 560), results, top=3)
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), fit.correlation[np.ix_(top, top)])
    chosen = ["jes", "signal"]
    fig = plot.correlation(results, parameters=chosen)
    i = [fit.names.index(p) for p in chosen]
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), fit.correlation[np.ix_(i, i)])


# ----- scans


def crossing(v, y, level, side):
    """The linear interpolation of y(v) = level on one side of the minimum."""
    k = int(np.argmin(y))
    if side < 0:
        vv, yy = v[: k + 1][::-1], y[: k + 1][::-1]
    else:
        vv, yy = v[k:], y[k:]
    return float(np.interp(level, yy, vv))


def test_scan(results, tmp_path):
    fit = results["data"]
    s = fit.scans["signal"]
    fig = render(plot.scan, tmp_path, "scan", (700, 500), results, "signal")
    ax = fig.axes[0]
    (curve,) = by_gid(ax.lines, "scan")
    np.testing.assert_array_equal(curve.get_ydata(), 2 * s.dnll)
    np.testing.assert_allclose(curve.get_xdata(), s.values**2, rtol=1e-15)  # μ = x²
    mu, y = s.values**2, 2 * s.dnll
    for level in (1, 4):
        marks = sorted(m.get_xdata()[0] for m in by_gid(ax.lines, f"crossing{level}"))
        np.testing.assert_allclose(marks, [crossing(mu, y, level, -1), crossing(mu, y, level, +1)], rtol=1e-12)
    (parabola,) = by_gid(ax.lines, "parabola")
    t = parabola.get_xdata()
    xhat, sx = fit.x[0], fit.uncertainties[0]
    np.testing.assert_allclose(parabola.get_ydata(), ((t - xhat**2) / (2 * xhat * sx)) ** 2, rtol=1e-12)
    # the Scan itself, in the fit's coordinates, the parabola from result=
    fig = plot.scan(s, result=fit, model=results.model, mu=False)
    (curve,) = by_gid(fig.axes[0].lines, "scan")
    np.testing.assert_array_equal(curve.get_xdata(), s.values)
    (parabola,) = by_gid(fig.axes[0].lines, "parabola")
    t = parabola.get_xdata()
    np.testing.assert_allclose(parabola.get_ydata(), ((t - xhat) / sx) ** 2, rtol=1e-12)


def test_scan2d(results, tmp_path):
    fit = results["data"]
    (s,) = fit.scans2D
    fig = render(plot.scan2d, tmp_path, "scan2d", (700, 600), results)
    ax = fig.axes[0]
    (mesh,) = [c for c in ax.collections if c.get_gid() == "dnll"]
    np.testing.assert_array_equal(np.asarray(mesh.get_array()).reshape(len(s.values_y), len(s.values_x)),
                                  2 * s.dnll.T)
    (contours,) = [c for c in ax.collections if c.get_gid() == "contours"]
    np.testing.assert_allclose(contours.levels, [-2 * math.log(1 - math.erf(1 / math.sqrt(2))), -2 * math.log(0.05)])
    np.testing.assert_allclose(contours.levels, [2.30, 5.99], atol=0.005)
    (best,) = by_gid(ax.lines, "best")
    i = fit.names.index("lumi")
    np.testing.assert_allclose([best.get_xdata()[0], best.get_ydata()[0]], [fit.x[0] ** 2, fit.x[i]], rtol=1e-15)


# ----- toys


def toy_pulls_of(results, parameter):
    """(x̂ − truth)/σ̂ of the converged toys, the truth the generating point (each toy's x0)."""
    fits = [f for n, f in results.fits.items() if n.startswith("toy")]
    i = fits[0].names.index(parameter)
    return np.array([(f.x[i] - f.x0[i]) / f.uncertainties[i] for f in fits if f.converged])


def test_toy_pulls(toys, tmp_path):
    pulls = toy_pulls_of(toys, "signal")
    k = toys.toys.parameters.index("signal")
    assert toys.toys.pull_reference == "generating_point"
    assert len(pulls) == toys.toys.pull_count[k]
    assert abs(pulls.mean() - toys.toys.pull_mean[k]) < 1e-12
    assert abs(pulls.std(ddof=1) - toys.toys.pull_stddev[k]) < 1e-12
    fig = render(plot.toy_pulls, tmp_path, "toys", (700, 500), toys, "signal")
    ax = fig.axes[0]
    hist = by_gid(ax.patches, "toys")[0].get_data()
    counts, _ = np.histogram(pulls, hist.edges)
    np.testing.assert_array_equal(hist.values, counts)
    assert counts.sum() == len(pulls)
    (gauss,) = by_gid(ax.lines, "gaussian")
    mean, sigma, w = pulls.mean(), pulls.std(), hist.edges[1] - hist.edges[0]
    t = gauss.get_xdata()
    expected = len(pulls) * w * np.exp(-0.5 * ((t - mean) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    np.testing.assert_allclose(gauss.get_ydata(), expected, rtol=1e-12)
    assert f"{mean:.3f}" in gauss.get_label() and f"{sigma:.3f}" in gauss.get_label()


def test_toy_pulls_observed(observed_toys):
    """Toys around the observed data: the truth is the data fit, which the plot recovers from the summary."""
    r = observed_toys
    assert r.toys.pull_reference == "observed_fit"
    fits = [f for n, f in r.fits.items() if n.startswith("toy") and f.converged]
    x, s = np.array([f.x[0] for f in fits]), np.array([f.uncertainties[0] for f in fits])
    np.testing.assert_allclose(plot._toy_pulls(r, "signal"), (x - r["data"].x[0]) / s, rtol=0, atol=1e-9)
    fig = plot.toy_pulls(r)
    assert by_gid(fig.axes[0].patches, "toys")[0].get_data().values.sum() == len(fits)


def test_toy_pulls_bayesian_nuisance(tmp_path_factory):
    """With --toysSystRandomize bayesian a NOI's truth is each toy's draw, which the file does not keep: refused; the
    POI's truth is the generating point."""
    r = fitlib_fit(tmp_path_factory, ROOT / "tests" / "data" / "rabbit" / "test_tensor.hdf5", "-t", "5",
                   "--toysSystRandomize", "bayesian")
    poi, noi = r.toys.parameters[0], r.toys.parameters[1]
    np.testing.assert_allclose(plot._toy_pulls(r, poi).mean(), r.toys.pull_mean[0], rtol=1e-12)
    with pytest.raises(ValueError, match="bayesian"):
        plot.toy_pulls(r, noi)


# ----- errors


def test_missing_data_errors(toys, results):
    toy = toys["toy1"]
    with pytest.raises(ValueError, match="--doImpacts"):
        plot.pulls_and_impacts(toy, model=toys.model)
    with pytest.raises(ValueError, match="--globalImpacts"):
        plot.pulls_and_impacts(toy, kind="global_impacts", model=toys.model)
    with pytest.raises(ValueError, match="--saveHists"):
        plot.histogram(toy, "ch0")
    with pytest.raises(ValueError, match="--scan NAME"):
        plot.scan(toy)
    with pytest.raises(ValueError, match="--scan2D"):
        plot.scan2d(toy)
    with pytest.raises(ValueError, match="-t N"):
        plot.toy_pulls(results)
    with pytest.raises(KeyError, match="ch0"):
        plot.histogram(results, "nope")
    with pytest.raises(ValueError, match=r"\.png and \.pdf"):
        plot.correlation(results, path="x.svg")


# ----- fitlib-plot


def test_cli(results, tmp_path, capsys):
    assert main([results.path, "-o", str(tmp_path / "out")]) == 0  # PNG only, the default
    written = capsys.readouterr().out.split()
    stems = {"data_pulls", "data_impacts_signal", "data_impacts_grouped_signal", "data_global_impacts_signal",
             "data_global_impacts_grouped_signal", "data_hist_prefit_ch0", "data_hist_postfit_ch0",
             "data_hist_prefit_ch1_masked", "data_hist_postfit_ch1_masked", "data_correlation", "data_scan_signal",
             "data_scan2D_signal_lumi"}
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == sorted(f"{s}.png" for s in stems)
    assert sorted(pathlib.Path(w).name for w in written if w != "wrote") == files
    assert matplotlib.image.imread(tmp_path / "out" / "data_hist_postfit_ch0.png").shape[:2] == (700, 800)
    assert main([results.path, "-o", str(tmp_path / "pdf"), "--correlation", "--format", "png", "pdf"]) == 0
    assert sorted(os.listdir(tmp_path / "pdf")) == ["data_correlation.pdf", "data_correlation.png"]
    assert (tmp_path / "pdf" / "data_correlation.pdf").read_bytes()[:5] == b"%PDF-"


def test_cli_choice_and_errors(toys, results, tmp_path, capsys):
    out = str(tmp_path / "toys")
    assert main([toys.path, "-o", out, "--style", "cms"]) == 0  # toys only: their pulls
    assert sorted(os.listdir(out)) == ["toys_pulls_signal.png"]
    capsys.readouterr()
    assert main([toys.path, "-o", out, "--impacts"]) == 2
    assert "--fit" in capsys.readouterr().err
    assert main([toys.path, "-o", out, "--fit", "toy1", "--impacts", "--hists"]) == 2
    assert "--doImpacts" in capsys.readouterr().err
    assert main([results.path, "-o", out, "--toys"]) == 2
    assert "-t N" in capsys.readouterr().err
    assert main([results.path, "-o", out, "--fit", "nope"]) == 2
    assert "asimov, data" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.hdf5"), "-o", out]) == 1
    assert "no results file" in capsys.readouterr().err
    out2 = str(tmp_path / "asimov")
    assert main([results.path, "-o", out2, "--fit", "asimov", "--scans", "--correlation"]) == 0
    assert sorted(os.listdir(out2)) == ["asimov_correlation.png", "asimov_scan2D_signal_lumi.png",
                                        "asimov_scan_signal.png"]


# ----- the in-memory objects (the compiled extension)


def test_in_memory(tmp_path):
    core = pytest.importorskip("fitlib._core")
    model = fitlib.read_rabbit(str(DEMO))
    result = core.fit(model)
    impacts = core.impacts(model, result)
    fig = render(plot.pulls_and_impacts, tmp_path, "memory_impacts", (1000, 130 + 26 * 7), result, impacts=impacts,
                 model=model)
    xhat = result.x[0]
    values = [v for n, v in zip(impacts.sources, impacts.values[0]) if n != "signal" and v != 0]
    expected = sorted((2 * xhat * v for v in values), key=lambda v: -abs(v))
    np.testing.assert_allclose([p.get_width() for p in by_gid(fig.axes[1].patches, "impact_up")], expected, rtol=1e-12)
    hists = core.histograms(model, result)
    fig = plot.histogram(hists, "ch0", model=model)
    top = by_gid(fig.axes[0].patches, "stack:signal")[0].get_data().values
    np.testing.assert_allclose(top, hists["postfit_total"][: model.channels[0].nbins], rtol=1e-12)
    fig = plot.correlation(result)
    cov = np.asarray(result.covariance)
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), cov / np.outer(sd, sd), rtol=1e-12)
    s = core.scan(model, result, "signal", points=5)
    fig = plot.scan(s, result=result, model=model)
    np.testing.assert_array_equal(by_gid(fig.axes[0].lines, "scan")[0].get_ydata(), 2 * np.asarray(s.dnll))
