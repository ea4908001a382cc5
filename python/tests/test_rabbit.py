# SPDX-License-Identifier: MIT
"""fitlib.rabbit.write_fitresults: fitlib's results in rabbit 0.2.5's fitresults layout. A schema check (entries, keys,
hist names, axes, storage types, shapes) against what rabbit_fit writes, the numbers against the results file, and
the round trip through wums.ioutils.pickle_load_h5py, as rabbit.io_tools.get_fitresult reads it.

scripts/rabbit-compat.sh runs rabbit's own scripts on such a file (it needs rabbit's venv). The results files come
from fitlib-fit (FITLIB_FIT, which scripts/python-venv.sh sets); without it, or without wums, those tests are skipped.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import h5py
import numpy as np
import pytest

hist = pytest.importorskip("hist")

from fitlib import rabbit  # noqa: E402
from fitlib.results import read_results  # noqa: E402
from common import AXES, DEMO, DEMO_OPTIONS, HIST_OPTIONS, fitlib_fit  # noqa: E402


# rabbit_fit's entries of a fit, in its order, for the options above (rabbit_fit ... --saveHists --saveHistsPerProcess
# --computeHistErrors --computeHistErrorsPerProcess --computeHistCov --computeVariations --fullNll, rabbit 0.2.5)
FIT_KEYS = ["parms_prefit", "physics_models", "impacts", "impacts_grouped", "global_impacts", "global_impacts_grouped",
            "nllvalreduced", "ndfsat", "edmval", "postfit_profile", "nllvalfull", "parms", "cov", "nll_scan_signal"]
CHANNEL_KEYS = ["hist_data_obs", "hist_nobs", "hist_prefit_inclusive", "hist_prefit", "hist_prefit_inclusive_variations",
                "hist_postfit_inclusive", "hist_postfit", "hist_postfit_inclusive_variations"]
MASKED_CHANNEL_KEYS = CHANNEL_KEYS[2:]
MODEL_KEYS = ["channels", "hist_prefit_inclusive_cov", "ndf_prefit", "chi2_prefit", "hist_postfit_inclusive_cov", "ndf", "chi2"]


def run_fitlib_fit(tmp_path_factory, tensor: pathlib.Path, *options: str) -> pathlib.Path:
    """The path of fitlib-fit's results file of `tensor` with `options`."""
    return fitlib_fit(tmp_path_factory, tensor, *options)


@pytest.fixture(scope="module")
def ioutils():
    return pytest.importorskip("wums.ioutils", reason="wums is not installed (pip install wums[pickling])")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return read_results(run_fitlib_fit(tmp_path_factory, DEMO, *DEMO_OPTIONS, *HIST_OPTIONS))


@pytest.fixture(scope="module")
def demo_file(demo, ioutils, tmp_path_factory):
    """The demo's results written in rabbit's layout and read back as rabbit.io_tools.get_fitresult does."""
    path = rabbit.write_fitresults(demo, tmp_path_factory.mktemp("rabbit") / "fitresults.hdf5")
    with h5py.File(path, "r") as f:
        keys = list(f.keys())
        meta = ioutils.pickle_load_h5py(f["meta"])
        results = unproxied(ioutils.pickle_load_h5py(f["results"]), ioutils)
    return keys, meta, results


def unproxied(d: dict, ioutils) -> dict:
    """The dict with every H5PickleProxy read (rabbit's scripts call .get() on each)."""
    return {k: unproxied(v, ioutils) if isinstance(v, dict) else v.get() if isinstance(v, ioutils.H5PickleProxy) else v
            for k, v in d.items()}


def axes_of(h) -> list:
    return [(type(a).__name__, a.name) for a in h.axes]


def categories(h, name: str) -> list:
    return [str(c) for c in h.axes[name]]


def assert_hist(h, name, axes, storage, shape=None) -> None:
    assert isinstance(h, hist.Hist)
    assert h.name == name
    assert axes_of(h) == axes
    assert h.storage_type is storage
    if shape is not None:
        assert h.shape == shape


def test_entries_and_meta(demo, demo_file):
    keys, meta, results = demo_file
    assert keys == ["meta", "results"]
    assert list(meta) == ["meta_info", "meta_info_input", "signals", "procs", "nois"]
    # rabbit's names: object arrays of bytes, which io_tools turns into str with .astype(str)
    assert meta["signals"].dtype == object and meta["signals"].astype(str).tolist() == ["signal"]
    assert meta["procs"].astype(str).tolist() == demo.model.process_names
    assert meta["nois"].astype(str).tolist() == []
    assert meta["meta_info"]["command"] == demo.run.command_line and meta["meta_info"]["args"] == demo.run.options
    info = meta["meta_info_input"]
    assert info["meta_info"]["input_sha256"] == demo.run.input_sha256
    assert list(info["channel_info"]) == ["ch0", "ch1_masked"]  # rabbit_plot_hists reads channel_info
    ch0 = info["channel_info"]["ch0"]
    assert (ch0["masked"], ch0["flow"], ch0["start"], ch0["stop"]) == (False, False, 0, 300)
    assert [(type(a).__name__, a.name, a.size) for a in ch0["axes"]] == [("Integer", "obs", 300)]
    assert list(results) == FIT_KEYS


def test_parameters(demo, demo_file):
    _, _, results = demo_file
    fit, names = demo["data"], demo.model.parameter_names
    for key, values, variances in (("parms", fit.x, fit.uncertainties**2), ("parms_prefit", fit.x0, demo.model.prefit_uncertainty**2)):
        h = results[key]
        assert_hist(h, key, [("StrCategory", "parms")], hist.storage.Weight, (8,))
        assert categories(h, "parms") == names
        np.testing.assert_array_equal(h.values(), values)
        np.testing.assert_array_equal(h.variances(), variances)
    cov = results["cov"]
    assert_hist(cov, "cov", [("StrCategory", "parms_x"), ("StrCategory", "parms_y")], hist.storage.Double, (8, 8))
    np.testing.assert_array_equal(cov.values(), fit.covariance)
    assert results["nllvalreduced"] == fit.nll and results["nllvalfull"] == fit.nll_full and results["edmval"] == fit.edm
    assert results["ndfsat"] == fit.saturated_gof.ndf == 298 and results["postfit_profile"] is True
    assert isinstance(results["ndfsat"], np.int32) and isinstance(results["nllvalreduced"], np.float64)


@pytest.mark.parametrize("kind", ["impacts", "global_impacts"])
def test_impacts(demo, demo_file, kind):
    _, _, results = demo_file
    impacts, model = getattr(demo["data"], kind), demo.model
    sources = model.parameter_names if kind == "impacts" else model.systematic_names  # rabbit: global ones from the systematics
    h = results[kind]
    assert_hist(h, kind, [("StrCategory", "parms"), ("StrCategory", "impacts")], hist.storage.Double, (1, len(sources)))
    assert categories(h, "parms") == ["signal"] and categories(h, "impacts") == sources
    for j, s in enumerate(sources):
        assert h.values()[0, j] == impacts.of("signal")[s]
    g = results[f"{kind}_grouped"]
    assert_hist(g, f"{kind}_grouped", [("StrCategory", "parms"), ("StrCategory", "impacts")], hist.storage.Double)
    assert categories(g, "impacts") == ["luminosity", "experimental", "theory", "background", "stat", "binByBinStat"]
    np.testing.assert_array_equal(g.values(), impacts.grouped)


def test_scan(demo, demo_file):
    _, _, results = demo_file
    scan = demo["data"].scans["signal"]
    h = results["nll_scan_signal"]
    assert_hist(h, "nll_scan_signal", [("StrCategory", "scan")], hist.storage.Double, (7,))
    np.testing.assert_array_equal(np.array(categories(h, "scan"), dtype=float), scan.values)  # rabbit: str of each value
    np.testing.assert_array_equal(h.values(), scan.dnll)


def test_histograms(demo, demo_file):
    _, _, results = demo_file
    h, model = demo["data"].histograms, demo.model
    base = results["physics_models"]["Basemodel"]
    assert list(results["physics_models"]) == ["Basemodel"] and list(base) == MODEL_KEYS
    assert list(base["channels"]) == ["ch0", "ch1_masked"]
    assert list(base["channels"]["ch0"]) == CHANNEL_KEYS and list(base["channels"]["ch1_masked"]) == MASKED_CHANNEL_KEYS
    names = model.parameter_names
    for c in model.channels:
        d, axis, rows = base["channels"][c.name], [("Integer", c.axes[0].name)], slice(c.start, c.start + c.nbins)
        for stage in ("prefit", "postfit"):
            inclusive = d[f"hist_{stage}_inclusive"]
            assert_hist(inclusive, f"hist_{stage}_inclusive", axis, hist.storage.Weight, (c.nbins,))
            np.testing.assert_array_equal(inclusive.values(), getattr(h, f"{stage}_total")[rows])
            np.testing.assert_array_equal(inclusive.variances(), getattr(h, f"{stage}_variance")[rows])
            processes = d[f"hist_{stage}"]
            assert_hist(processes, f"hist_{stage}", [*axis, ("StrCategory", "processes")], hist.storage.Weight, (c.nbins, 4))
            assert categories(processes, "processes") == model.process_names
            np.testing.assert_array_equal(processes.values(), getattr(h, stage)[rows])
            np.testing.assert_array_equal(processes.variances(), getattr(h, f"{stage}_process_variance")[rows])
            variations = d[f"hist_{stage}_inclusive_variations"]
            assert_hist(variations, f"hist_{stage}_inclusive_variations", [*axis, ("StrCategory", "vars"), ("Regular", "downUpVar")],
                        hist.storage.Double, (c.nbins, 8, 2))
            assert categories(variations, "vars") == names
            np.testing.assert_array_equal(variations.values(), getattr(h, f"{stage}_variations")[rows])
            assert inclusive.label.startswith(f"{stage} expected number of events")
        if not c.masked:
            for key in ("hist_data_obs", "hist_nobs"):  # the data fit: its data are the observed data
                assert_hist(d[key], key, axis, hist.storage.Weight, (c.nbins,))
                np.testing.assert_array_equal(d[key].values(), h.data)
                np.testing.assert_array_equal(d[key].variances(), h.data_variance)
    for stage, suffix in (("prefit", "_prefit"), ("postfit", "")):
        cov = base[f"hist_{stage}_inclusive_cov"]
        assert_hist(cov, f"hist_{stage}_inclusive_cov", [("Integer", "x"), ("Integer", "y")], hist.storage.Double, (324, 324))
        values = cov.values()
        for c, block in zip(model.channels, getattr(h, f"{stage}_covariance")):
            np.testing.assert_array_equal(values[c.start : c.start + c.nbins, c.start : c.start + c.nbins], block)
        assert np.isnan(values[:300, 300:]).all() and np.isnan(values[300:, :300]).all()  # not in fitlib's results
        chi2 = getattr(h, f"{stage}_chi2")
        assert (base[f"chi2{suffix}"], base[f"ndf{suffix}"]) == (chi2.total_chi2, chi2.total_ndf)


def test_round_trip(demo, demo_file):
    """What rabbit's scripts read back is what fitresults() built: the same hists, axes and numbers."""
    _, _, results = demo_file
    built = rabbit.fitresults(demo, "data")

    def compare(a: dict, b: dict, path: str):
        assert list(a) == list(b), path
        for k in a:
            if isinstance(a[k], dict):
                compare(a[k], b[k], f"{path}/{k}")
            elif isinstance(a[k], hist.Hist):
                assert (a[k].name, a[k].label, a[k].storage_type, a[k].axes) == (b[k].name, b[k].label, b[k].storage_type, b[k].axes)
                np.testing.assert_array_equal(a[k].values(flow=True), b[k].values(flow=True), err_msg=f"{path}/{k}")
                if a[k].storage_type is hist.storage.Weight:
                    np.testing.assert_array_equal(a[k].variances(flow=True), b[k].variances(flow=True), err_msg=f"{path}/{k}")
            else:
                assert a[k] == b[k] and type(a[k]) is type(b[k]), f"{path}/{k}"

    compare(results, built, "results")


def test_fits_as_rabbit_names(tmp_path_factory, ioutils):
    """Asimov, a blinded data fit and toys: rabbit's entry names, and what each fit has."""
    res = read_results(run_fitlib_fit(tmp_path_factory, DEMO, "-t", "-1", "0", "2", "--doImpacts", "--saveHists"))
    path = rabbit.write_fitresults(res.path, tmp_path_factory.mktemp("rabbit") / "fitresults.hdf5")  # from the path
    with h5py.File(path, "r") as f:
        assert list(f.keys()) == ["meta", "results", "results_asimov", "results_toy1", "results_toy2"]
        asimov = unproxied(ioutils.pickle_load_h5py(f["results_asimov"]), ioutils)
        data = unproxied(ioutils.pickle_load_h5py(f["results"]), ioutils)
        toy = unproxied(ioutils.pickle_load_h5py(f["results_toy1"]), ioutils)
    assert "physics_models" not in toy and "impacts" in toy
    # the blinded data fit has its prefit histograms only; the Asimov fit's hist_data_obs is the observed data
    assert list(data["physics_models"]["Basemodel"]["channels"]["ch0"]) == ["hist_data_obs", "hist_nobs", "hist_prefit_inclusive", "hist_prefit"]
    ch0 = asimov["physics_models"]["Basemodel"]["channels"]["ch0"]
    np.testing.assert_array_equal(ch0["hist_data_obs"].values(), res["data"].histograms.data)
    np.testing.assert_array_equal(ch0["hist_nobs"].values(), res["asimov"].histograms.data)
    assert [rabbit.group_name(n) for n in ("data", "asimov", "toy7", "pseudodata_alt")] == ["results", "results_asimov", "results_toy7", "results_alt"]


def test_mappings_and_tensor_meta(tmp_path_factory, ioutils):
    """Mappings become rabbit's physics models by their key; tensor= copies the tensor's own meta."""
    res = read_results(run_fitlib_fit(tmp_path_factory, AXES, "-t", "0", "--unblind", "--saveHists", "--computeHistCov",
                                      "-m", "Project", "pt_eta", "pt", "-m", "Ratio", "pt_eta", "pt_eta"))
    path = rabbit.write_fitresults(res, tmp_path_factory.mktemp("rabbit") / "fitresults.hdf5", tensor=AXES)
    with h5py.File(path, "r") as f:
        meta = ioutils.pickle_load_h5py(f["meta"])
        results = unproxied(ioutils.pickle_load_h5py(f["results"]), ioutils)
    info = meta["meta_info_input"]
    assert list(info) == ["meta_info", "channel_info", "symmetric_tensor", "systematic_type"]  # the tensor's, as rabbit copies it
    assert "command" in info["meta_info"]
    assert [(n, c["start"], c["stop"]) for n, c in info["channel_info"].items()] == [(c.name, c.start, c.start + c.nbins) for c in res.model.channels]
    models = results["physics_models"]
    assert list(models) == ["Basemodel", "Project pt_eta pt", "Ratio pt_eta pt_eta"]
    project = models["Project pt_eta pt"]
    assert list(project) == MODEL_KEYS and list(project["channels"]) == ["pt_eta"]
    mapping = res["data"].mappings[0]
    d = project["channels"]["pt_eta"]
    assert list(d) == ["hist_data_obs", "hist_nobs", "hist_prefit_inclusive", "hist_postfit_inclusive"]
    assert_hist(d["hist_postfit_inclusive"], "hist_postfit_inclusive", [("Regular", "pt")], hist.storage.Weight, (4,))
    np.testing.assert_array_equal(d["hist_postfit_inclusive"].values(), mapping.postfit)
    np.testing.assert_array_equal(project["hist_postfit_inclusive_cov"].values(), mapping.postfit_covariance)
    assert (project["chi2"], project["ndf"]) == (mapping.postfit_chi2, mapping.postfit_ndf)
    # the flow bins of a masked channel that has them (rabbit: a channel's bins are its values(flow=True))
    unfolded = res.model.channel("unfolded")
    h = models["Basemodel"]["channels"]["unfolded"]["hist_postfit_inclusive"]
    np.testing.assert_array_equal(h.values(flow=True).ravel(), res["data"].histograms.postfit_total[unfolded.start : unfolded.start + unfolded.nbins])


def test_errors(demo, tmp_path, ioutils):
    with pytest.raises(IsADirectoryError, match="give the file to write"):
        rabbit.write_fitresults(demo, tmp_path)
    with pytest.raises(ValueError, match="is the fitlib results file being converted"):
        rabbit.write_fitresults(demo, demo.path)
    with pytest.raises(ValueError, match="is not the one these results were fitted on"):
        rabbit.write_fitresults(demo, tmp_path / "fitresults.hdf5", tensor=AXES)
    assert not list(tmp_path.iterdir())  # nothing left behind


def test_without_wums(demo, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wums", None)  # import wums fails
    with pytest.raises(ImportError, match=r"pip install wums\[pickling\]"):
        rabbit.write_fitresults(demo, tmp_path / "fitresults.hdf5")
    assert list(rabbit.fitresults(demo, "data")) == FIT_KEYS  # building the dicts needs hist only
    assert list(rabbit.meta(demo)) == ["meta_info", "meta_info_input", "signals", "procs", "nois"]


def test_fitlib_fit_rabbit_output(tmp_path, ioutils):
    """fitlib-fit --rabbitOutput: the results in rabbit's layout too, by this Python's `python -m fitlib.rabbit`."""
    exe = os.environ.get("FITLIB_FIT")
    if not exe:
        pytest.skip("FITLIB_FIT (the path of fitlib-fit) is not set")
    ours, theirs = tmp_path / "results.hdf5", tmp_path / "fitresults.hdf5"
    run = subprocess.run([exe, str(DEMO), "-t", "0", "--unblind", "-q", "--doImpacts", "-o", str(ours), "--rabbitOutput", str(theirs)],
                         capture_output=True, text=True, env={**os.environ, "FITLIB_PYTHON": sys.executable})
    assert run.returncode == 0, f"fitlib-fit exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
    assert f"wrote {theirs} (rabbit's layout)" in run.stdout
    fit = read_results(ours)["data"]
    with h5py.File(theirs, "r") as f:
        assert {"meta", "results"} <= set(f)
        result = ioutils.pickle_load_h5py(f["results"])
        parms = result["parms"].get()
        assert "impacts" in result
        np.testing.assert_array_equal(parms.values(), fit.x)


def test_python_m_fitlib_rabbit(tmp_path, ioutils):
    """`python -m fitlib.rabbit`'s errors: a missing results file is bad input (2), named."""
    run = subprocess.run([sys.executable, "-m", "fitlib.rabbit", str(tmp_path / "none.hdf5"), str(tmp_path / "out.hdf5")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "none.hdf5" in run.stderr
