# SPDX-License-Identifier: MIT
"""fitlib.results.read_results against the JSON summary fitlib-fit writes beside the same results file: run
information, model, every fit's numbers, impacts, scans, histograms, mappings and the toys' summary, and the
channels as hist histograms; and its errors for files it cannot read.

The results files come from fitlib-fit (FITLIB_FIT, which scripts/python-venv.sh sets to the build's); without it
those tests are skipped.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import h5py
import numpy as np
import pytest

from fitlib.results import FORMAT_VERSIONS, Results, ResultsError, read_results
from common import AXES, DEMO, DEMO_OPTIONS, HIST_OPTIONS, fitlib_fit

HAS_HIST = importlib.util.find_spec("hist") is not None  # the channel histograms need it; the rest does not


def run_fitlib_fit(tmp_path_factory, tensor: pathlib.Path, *options: str) -> tuple[Results, dict]:
    """fitlib-fit's results file of `tensor` with `options`, read back, and its JSON summary."""
    out = fitlib_fit(tmp_path_factory, tensor, *options, "--json")
    return read_results(out), json.loads(out.with_suffix(".json").read_text())


def numbers(values) -> np.ndarray:
    """JSON numbers (null for what is not finite) as doubles, nested lists as arrays."""

    def nan_for_null(v):
        return [nan_for_null(x) for x in v] if isinstance(v, list) else np.nan if v is None else v

    return np.array(nan_for_null(values), dtype=float)


def assert_same(actual, expected) -> None:
    """Equal to the last bit (JSON keeps doubles exactly); NaN where the JSON has null."""
    np.testing.assert_array_equal(np.asarray(actual, dtype=float), numbers(expected))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return run_fitlib_fit(tmp_path_factory, DEMO, *DEMO_OPTIONS, *HIST_OPTIONS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Asimov, a blinded data fit and three toys in one run."""
    return run_fitlib_fit(tmp_path_factory, DEMO, "-t", "-1", "0", "3", "--doImpacts", "--saveHists")


@pytest.fixture(scope="module")
def axes(tmp_path_factory):
    """The axes tensor (every hist axis kind, a masked channel with flow bins), with a 2-D scan and mappings."""
    return run_fitlib_fit(tmp_path_factory, AXES, "-t", "0", "--unblind", "--saveHists", "--computeHistCov", "--scan2D", "sig",
                          "lumi", "--scanPoints", "3", "-m", "Project", "pt_eta", "pt", "-m", "Normalize", "counts")


def test_run_info(demo):
    results, ref = demo
    run = results.run
    assert (run.fitlib_version, run.format_version) == (ref["fitlib_version"], ref["format_version"])
    assert run.format_version in FORMAT_VERSIONS
    assert (run.input_path, run.input_sha256) == (ref["input"]["path"], ref["input"]["sha256"])
    assert run.command_line == ref["command_line"]
    assert run.options == ref["options"]
    assert list(results.fits) == [f["name"] for f in ref["fits"]] == ["data"]
    assert results.toys is None


def assert_same_channels(channels, ref_channels) -> None:
    assert [c.name for c in channels] == [c["name"] for c in ref_channels]
    for c, w in zip(channels, ref_channels):
        assert (c.nbins, c.start, c.masked, c.flow) == (w["bins"], w["start"], w["masked"], w["flow"])
        assert len(c.axes) == len(w["axes"])
        for a, wa in zip(c.axes, w["axes"]):
            assert (a.kind, a.name, a.label) == (wa["kind"], wa["name"], wa["label"])
            assert (a.underflow, a.overflow, a.circular, a.growth) == (wa["underflow"], wa["overflow"], wa["circular"], wa["growth"])
            if "categories" in wa:
                assert a.categories == wa["categories"] and a.size == len(wa["categories"])
            else:
                assert_same(a.edges, wa["edges"])
                assert a.size == len(wa["edges"]) - 1


def test_model(demo):
    results, ref = demo
    model, want = results.model, ref["model"]
    assert_same_channels(model.channels, want["channels"])
    assert model.process_names == [p["name"] for p in want["processes"]]
    assert model.signal.tolist() == [p["signal"] for p in want["processes"]]
    assert model.parameter_names == [p["name"] for p in want["parameters"]]
    assert model.parameter_kind == [p["kind"] for p in want["parameters"]]
    assert model.constrained.tolist() == [p["constrained"] for p in want["parameters"]]
    assert_same(model.prefit_uncertainty, [p["prefit_uncertainty"] for p in want["parameters"]])
    assert model.groups == {g["name"]: g["members"] for g in want["groups"]}
    assert model.pois == ["signal"] and model.npoi == 1 and model.nois == []
    assert model.nbins == 300 and model.nbins_full == 324 and model.nprocs == 4
    assert model.channel("ch1_masked") is model.channels[1] is model.channel(1)
    with pytest.raises(KeyError, match="channels are 'ch0', 'ch1_masked'"):
        model.channel("nope")


def assert_same_fit(fit, ref: dict) -> None:
    """A StoredFit against its entry of the JSON summary, under fitlib.FitResult's attribute names."""
    parameters = ref["parameters"]
    assert fit.name == ref["name"]
    assert fit.names == [p["name"] for p in parameters]
    assert_same(fit.x0, [p["prefit"] for p in parameters])
    assert_same(fit.x, [p["postfit"] for p in parameters])
    assert_same(fit.uncertainties, [p["uncertainty"] for p in parameters])
    assert fit.frozen.tolist() == [p["frozen"] for p in parameters]
    assert (fit.status, fit.converged, fit.covariance_status) == (ref["status"], ref["converged"], ref["covariance_status"])
    assert fit.iterations == ref["iterations"]
    assert_same([fit.nll, fit.nll_full, fit.edm], [ref["nll_reduced"], ref["nll_full"], ref["edm"]])
    assert fit.blinded == ref["blinded"]
    assert fit.timing == ref["timing"] and fit.seconds == ref["timing"]["minimize_seconds"]
    # C_ij at [i, j] in both (the covariance is symmetric only to rounding, so a transpose would show)
    assert_same(fit.covariance, numbers(ref["covariance"]))
    np.testing.assert_allclose(fit.correlation.diagonal()[fit.uncertainties > 0], 1.0, rtol=1e-12)
    gof = ref["saturated_gof"]
    assert (fit.saturated_gof.chi2, fit.saturated_gof.ndf, fit.saturated_gof.p_value) == (gof["chi2"], gof["ndf"], gof["p_value"])
    assert fit.hessian is None and fit.error is None  # results files store neither (no error: nothing threw)


def test_fit(demo):
    results, ref = demo
    fit = results["data"]
    assert_same_fit(fit, ref["fits"][0])
    assert fit.gradient.shape == fit.x.shape and fit.bin_by_bin_beta.shape == (300, 1)
    assert [f.name for f in results] == ["data"] and len(results) == 1
    with pytest.raises(KeyError, match="its fits are \\['data'\\]"):
        results["asimov"]


@pytest.mark.parametrize("kind", ["impacts", "global_impacts"])
def test_impacts(demo, kind):
    results, ref = demo
    impacts, want = getattr(results["data"], kind), ref["fits"][0][kind]
    assert impacts.targets == list(want) == ["signal"]
    assert impacts.sources == results.model.parameter_names
    assert impacts.values.shape == (1, len(impacts.sources)) and impacts.grouped.shape == (1, len(impacts.groups))
    for target, w in want.items():
        # the JSON leaves out the exact zeros (parameters that are no source)
        assert {k: v for k, v in impacts.of(target).items() if v != 0.0} == w["parameters"]
        assert impacts.grouped_of(target) == w["groups"]
    assert impacts.groups == [*results.model.groups, "stat", "binByBinStat"]


def test_scan(demo):
    results, ref = demo
    (scan,) = results["data"].scans.values()
    want = ref["fits"][0]["scans"]["signal"]
    assert scan.parameter == "signal"
    assert_same(scan.values, want["values"])
    assert_same(scan.dnll, want["dnll"])
    assert scan.status == want["status"] and scan.converged.all()


def test_histograms(demo):
    results, ref = demo
    h, want = results["data"].histograms, ref["fits"][0]["histograms"]
    for k in ("data", "data_variance", "prefit_total", "prefit_variance", "postfit_total", "postfit_variance"):
        assert_same(getattr(h, k), want[k])
    for stage in ("prefit", "postfit"):
        chi2, w = getattr(h, f"{stage}_chi2"), want[f"{stage}_chi2"]
        assert (chi2.total_chi2, chi2.total_ndf) == (w["total"]["chi2"], w["total"]["ndf"])
        assert_same(chi2.chi2, [c["chi2"] for c in w["channels"]])
        assert chi2.ndf.tolist() == [c["ndf"] for c in w["channels"]]
        blocks = getattr(h, f"{stage}_covariance")
        assert len(blocks) == len(results.model.channels)
        for c, block, flat in zip(results.model.channels, blocks, want[f"{stage}_covariance"]):
            assert block.shape == (c.nbins, c.nbins)
            assert_same(block.ravel(), flat)
        # what only the HDF5 file has: per process, their variances and the variations
        assert getattr(h, stage).shape == getattr(h, f"{stage}_process_variance").shape == (324, 4)
        np.testing.assert_allclose(getattr(h, stage).sum(axis=1), getattr(h, f"{stage}_total"), rtol=1e-12)
        assert getattr(h, f"{stage}_variations").shape == (324, 8, 2)
    d = h.as_dict()
    assert set(d) >= {"prefit", "postfit_total", "prefit_covariance", "postfit_chi2"} and d["postfit_chi2"]["total_ndf"] == 300


def test_channel_hists(demo):
    pytest.importorskip("hist")
    results, _ = demo
    h = results["data"].histograms
    out = h.channel_hists("ch0")
    assert set(out) == {"prefit", "postfit", "prefit_processes", "postfit_processes", "data"}
    assert [a.name for a in out["postfit"].axes] == ["obs"] and out["postfit"].shape == (300,)
    np.testing.assert_array_equal(out["postfit"].values(), h.postfit_total[:300])
    np.testing.assert_array_equal(out["postfit"].variances(), h.postfit_variance[:300])
    np.testing.assert_array_equal(out["postfit_processes"].values(), h.postfit[:300])
    np.testing.assert_array_equal(out["postfit_processes"].variances(), h.postfit_process_variance[:300])
    assert list(out["postfit_processes"].axes["process"]) == results.model.process_names
    np.testing.assert_array_equal(out["data"].values(), h.data)
    masked = h.channel_hists("ch1_masked")
    assert "data" not in masked
    np.testing.assert_array_equal(masked["prefit"].values(), h.prefit_total[300:])


def test_axes_channels(axes):
    """Every hist axis kind, and a masked channel whose bins include its flow bins, as hist histograms."""
    fhist = pytest.importorskip("fitlib.hist")
    results, ref = axes
    model = results.model
    assert_same_channels(model.channels, ref["model"]["channels"])
    want = json.loads(AXES.with_suffix(".json").read_text())["channels"]  # what hist said of the tensor's axes
    h = results["data"].histograms
    assert [c.name for c in model.channels] == [w["name"] for w in want]
    for c, w in zip(model.channels, want):
        assert c.shape == tuple(a["extent"] if c.flow else a["size"] for a in w["axes"])
        for a, wa in zip(fhist.axes(c), w["axes"]):
            assert (type(a).__name__, a.name, a.size, a.extent) == (wa["class"], wa["name"], wa["size"], wa["extent"])
        hp = h.channel_hists(c.name)["postfit"]
        np.testing.assert_array_equal(hp.values(flow=c.flow).ravel(), h.postfit_total[c.start : c.start + c.nbins])
    unfolded = model.channel("unfolded")
    assert unfolded.flow and unfolded.shape == (5, 5)


def test_scan2D_and_mappings(axes):
    results, ref = axes
    fit, want = results["data"], ref["fits"][0]
    (scan,) = fit.scans2D
    (w,) = want["scans2D"]
    assert scan.parameters == ("sig", "lumi") == tuple(w["parameters"])
    assert_same(scan.values_x, w["values"][0])
    assert_same(scan.values_y, w["values"][1])
    assert_same(scan.dnll, w["dnll"])
    assert scan.status.shape == scan.dnll.shape == (3, 3) and scan.status.ravel().tolist() == w["status"]
    assert [m.key for m in fit.mappings] == [m["key"] for m in want["mappings"]] == ["Project pt_eta pt", "Normalize counts"]
    for m, wm in zip(fit.mappings, want["mappings"]):
        assert_same_channels(m.channels, wm["channels"])
        for k in ("data", "data_variance", "prefit", "prefit_variance", "postfit", "postfit_variance"):
            assert_same(getattr(m, k), wm[k])
        assert_same(m.postfit_covariance.ravel(), wm["postfit_covariance"])
        assert (m.prefit_chi2, m.prefit_ndf) == (wm["prefit_chi2"]["chi2"], wm["prefit_chi2"]["ndf"])
        assert (m.postfit_chi2, m.postfit_ndf) == (wm["postfit_chi2"]["chi2"], wm["postfit_chi2"]["ndf"])
    if HAS_HIST:
        project = fit.mappings[0]
        hp = project.channel_hist("pt_eta")
        assert [a.name for a in hp.axes] == ["pt"]
        np.testing.assert_array_equal(hp.values(), project.postfit)


def test_fits_and_toys(runs):
    results, ref = runs
    assert list(results.fits) == [f["name"] for f in ref["fits"]] == ["asimov", "data", "toy1", "toy2", "toy3"]
    for fit, w in zip(results, ref["fits"]):
        assert_same_fit(fit, w)
        assert fit.impacts is not None
    data = results["data"]
    assert data.blinded == ["signal"]  # a data fit without --unblind: no postfit histograms
    assert data.histograms.postfit is None and data.histograms.postfit_chi2 is None
    assert results["asimov"].histograms.postfit is not None and results["toy1"].histograms is None
    if HAS_HIST:
        assert set(data.histograms.channel_hists("ch0")) == {"prefit", "prefit_processes", "data"}
    toys, want = results.toys, ref["toys"]
    assert (toys.toys, toys.converged, toys.width, toys.seconds) == (want["toys"], want["converged"], want["width"], want["seconds"])
    assert (toys.toys_per_second, toys.pull_reference) == (want["toys_per_second"], want["pull_reference"])
    assert (toys.evaluations, toys.columns, toys.active_fraction) == tuple(want["batch"][k] for k in ("evaluations", "columns", "active_fraction"))
    assert toys.parameters == [p["name"] for p in want["parameters"]]
    for what in ("value", "pull"):
        assert_same(getattr(toys, f"{what}_mean"), [p[what]["mean"] for p in want["parameters"]])
        assert_same(getattr(toys, f"{what}_stddev"), [p[what]["stddev"] for p in want["parameters"]])
        assert getattr(toys, f"{what}_count").tolist() == [p[what]["count"] for p in want["parameters"]]


# ---------------------------------------------------------------------------------------------------------------------
# errors: each names the file, what it is, and what to do


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="fitlib-fit TENSOR -o"):
        read_results(tmp_path / "nope.hdf5")


def test_not_hdf5(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("{}")
    with pytest.raises(ResultsError, match="not an HDF5 file"):
        read_results(path)


def test_rabbit_tensor():
    with pytest.raises(ResultsError, match="not a fitlib results file .*a rabbit input tensor .*fitlib-fit TENSOR"):
        read_results(DEMO)


def test_other_hdf5(tmp_path):
    path = tmp_path / "other.hdf5"
    with h5py.File(path, "w") as f:
        f["x"] = [1.0]
    with pytest.raises(ResultsError, match="HDF5 file but not a fitlib results file \\(no root attribute format_version\\)"):
        read_results(path)


@pytest.mark.parametrize("version, match", [(99, "layout version 99, written by fitlib 9.0.0; .*update fitlib"),
                                            (2, "layout version 2 .*before the /model/ group .*rerun the fit")])
def test_unknown_version(tmp_path, version, match):
    path = tmp_path / "results.hdf5"
    with h5py.File(path, "w") as f:
        f.attrs["fitlib_version"] = "9.0.0" if version == 99 else "0.0.1"
        f.attrs["format_version"] = np.int64(version)
    with pytest.raises(ResultsError, match=match):
        read_results(path)
