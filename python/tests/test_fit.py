# SPDX-License-Identifier: MIT
"""fitlib's Python package against fitlib-fit: the same fits and histograms to the last bit, its errors as Python
exceptions, and the channels as hist histograms.

The comparisons with fitlib-fit run it on the same tensor; give its path in FITLIB_FIT (scripts/python-venv.sh sets
it to the build's), else they are skipped.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import pathlib
import signal

import numpy as np
import pytest

import fitlib
from common import AXES, DEMO, ROOT, SPARSE, fitlib_fit

def run_fitlib_fit(tmp_path_factory, tensor: pathlib.Path, *options: str) -> dict:
    """fitlib-fit's JSON summary of `-t 0 --unblind` on `tensor` with `options`: its one fit, "data"."""
    out = fitlib_fit(tmp_path_factory, tensor, "-t", "0", "--unblind", "--json", *options)
    (fit,) = json.loads(out.with_suffix(".json").read_text())["fits"]
    assert fit["name"] == "data"
    return fit


def numbers(values) -> np.ndarray:
    """A JSON list of numbers (null for what is not finite) as doubles."""
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def assert_same_bits(actual, expected) -> None:
    """Equal to the last bit, -0.0 and 0.0 told apart; NaN where the other is NaN (JSON writes every NaN as null)."""
    actual, expected = np.asarray(actual, dtype=float), np.asarray(expected, dtype=float)
    assert actual.shape == expected.shape
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan)
    differ = actual[~nan].view(np.uint64) != expected[~nan].view(np.uint64)
    first = np.flatnonzero(differ)[:5]
    assert not differ.any(), f"{differ.sum()} of {differ.size} differ, first {first}: {actual[~nan][first]} vs {expected[~nan][first]}"


def assert_same_fit(result: fitlib.FitResult, reference: dict) -> None:
    parameters = reference["parameters"]
    assert result.names == [p["name"] for p in parameters]
    assert result.status == reference["status"]
    assert result.converged and reference["converged"]
    assert result.covariance_status == reference["covariance_status"]
    assert result.iterations == reference["iterations"]
    assert result.evaluations == reference["evaluations"]
    assert_same_bits(result.nll, reference["nll_reduced"])
    assert_same_bits(result.edm, numbers([reference["edm"]])[0])
    assert_same_bits(result.x0, numbers(p["prefit"] for p in parameters))
    assert_same_bits(result.x, numbers(p["postfit"] for p in parameters))
    assert_same_bits(result.uncertainties, numbers(p["uncertainty"] for p in parameters))
    assert_same_bits(result.covariance, np.array([numbers(row) for row in reference["covariance"]]))


@pytest.fixture(scope="module")
def demo() -> fitlib.Model:
    return fitlib.read_rabbit(DEMO)


@pytest.fixture(scope="module")
def demo_fit(demo) -> fitlib.FitResult:
    return fitlib.fit(demo)


@pytest.fixture(scope="module")
def demo_hists(demo, demo_fit) -> dict:
    return fitlib.histograms(demo, demo_fit, process_variances=True)


def test_version_is_the_headers():
    assert fitlib.__version__ == importlib.metadata.version("fitlib")


def test_model(demo):
    assert (demo.nbins, demo.nbins_full, demo.nprocs, demo.nsyst, demo.npoi) == (300, 324, 4, 7, 1)
    assert not demo.sparse
    assert demo.parameter_names[: demo.npoi] == [p for p, s in zip(demo.process_names, demo.signal) if s]
    assert demo.parameter_names[demo.npoi :] == demo.systematic_names
    assert [(c.name, c.nbins, c.masked) for c in demo.channels] == [("ch0", 300, False), ("ch1_masked", 24, True)]
    assert demo.channels_skipped  # the demo tensor has no meta: rabbit's default channels
    assert demo.data.shape == demo.data_variance.shape == (300,)
    assert demo.nominal.shape == (324, 4)
    assert not demo.data.flags.writeable


def test_fit_is_fitlib_fits(demo_fit, tmp_path_factory):
    assert_same_fit(demo_fit, run_fitlib_fit(tmp_path_factory, DEMO))


def test_threads_are_fitlib_fits(demo, demo_fit, tmp_path_factory):
    result = fitlib.fit(demo, threads=3)
    # Three shards add the bins in another order than one: the same minimum, not the same bits.
    assert (np.abs(result.x - demo_fit.x) <= 1e-3 * demo_fit.uncertainties).all()
    assert_same_fit(result, run_fitlib_fit(tmp_path_factory, DEMO, "--threads", "3"))


def test_sparse_is_fitlib_fits(tmp_path_factory):
    model = fitlib.read_rabbit(SPARSE)
    assert model.sparse
    assert_same_fit(fitlib.fit(model), run_fitlib_fit(tmp_path_factory, SPARSE))


def test_result(demo_fit):
    n = len(demo_fit.names)
    assert demo_fit.converged and demo_fit.covariance_status == "accurate"
    assert demo_fit.covariance.shape == demo_fit.hessian.shape == (n, n)
    np.testing.assert_array_equal(np.sqrt(np.diag(demo_fit.covariance)), demo_fit.uncertainties)
    assert not demo_fit.frozen.any() and demo_fit.frozen.dtype == bool
    assert demo_fit.status_text.startswith("converged")
    assert "signal" in demo_fit.report()
    assert demo_fit.method == "trust-gauss-newton"  # auto's choice for the demo (asymmetric, a Hessian of a few passes)
    assert demo_fit.evaluations["gauss_newton"] > 0


def test_frozen(demo):
    result = fitlib.fit(demo, frozen=["lumi"])
    i = result.names.index("lumi")
    assert result.frozen[i] and result.x[i] == result.x0[i] and result.uncertainties[i] == 0


def test_histograms_are_fitlib_fits(demo_hists, tmp_path_factory):
    reference = run_fitlib_fit(tmp_path_factory, DEMO, "--saveHists")["histograms"]
    for key in ["data", "data_variance", "prefit_total", "prefit_variance", "postfit_total", "postfit_variance"]:
        assert_same_bits(demo_hists[key], numbers(reference[key]))
    for when in ["prefit", "postfit"]:
        chi2, want = demo_hists[f"{when}_chi2"], reference[f"{when}_chi2"]
        assert_same_bits(chi2["total_chi2"], numbers([want["total"]["chi2"]])[0])
        assert chi2["total_ndf"] == want["total"]["ndf"]
        assert_same_bits(chi2["chi2"], numbers(c["chi2"] for c in want["channels"]))
        np.testing.assert_array_equal(chi2["ndf"], [c["ndf"] for c in want["channels"]])


def test_histograms(demo, demo_hists):
    nb, nbf, np_ = demo.nbins, demo.nbins_full, demo.nprocs
    for when in ["prefit", "postfit"]:
        assert demo_hists[when].shape == demo_hists[f"{when}_process_variance"].shape == (nbf, np_)
        assert demo_hists[f"{when}_total"].shape == demo_hists[f"{when}_variance"].shape == (nbf,)
        # The totals are the sums over processes, added in process order as fitlib adds them.
        total = np.zeros(nbf)
        for p in range(np_):
            total += demo_hists[when][:, p]
        assert_same_bits(demo_hists[f"{when}_total"], total)
        assert (demo_hists[f"{when}_process_variance"] >= 0).all()
        assert demo_hists[f"{when}_chi2"]["chi2"].shape == (len(demo.channels),)
    assert demo_hists["data"].shape == demo_hists["data_variance"].shape == (nb,)
    assert_same_bits(demo_hists["data"], demo.data)


def test_histograms_need_the_fits_model(demo, demo_fit):
    with pytest.raises(fitlib.UsageError, match="another Model"):
        fitlib.histograms(fitlib.read_rabbit(DEMO), demo_fit)
    with pytest.raises(fitlib.UsageError, match="covariance"):
        fitlib.histograms(demo, fitlib.fit(demo, covariance=False))


def test_missing_file_is_a_file_error():
    path = "no_such_tensor.hdf5"
    with pytest.raises(fitlib.FileError, match=path) as raised:
        fitlib.read_rabbit(path)
    assert isinstance(raised.value, OSError) and isinstance(raised.value, fitlib.Error)


def test_errors_are_python_errors():
    assert issubclass(fitlib.ModelError, ValueError) and issubclass(fitlib.UsageError, ValueError)
    assert issubclass(fitlib.FileError, OSError)
    assert all(issubclass(e, fitlib.Error) for e in [fitlib.ModelError, fitlib.UsageError, fitlib.FileError])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"frozen": ["no_such_nuisance"]}, "'no_such_nuisance' matches no parameter"),
        ({"threads": -1}, "threads must be ≥ 1, or 0 for every core"),
        ({"threads": 1000}, "shards"),
        ({"data_term": "poisson2"}, "data_term='poisson2' is not one of"),
        ({"method": "BFGS"}, "unknown minimizer method 'BFGS': use auto"),
    ],
)
def test_bad_options_are_usage_errors(demo, options, message):
    with pytest.raises(fitlib.UsageError, match=message):
        fitlib.fit(demo, **options)


# ---------------------------------------------------------------------------------------------------------------------
# hist


def test_channel_axes_are_hists():
    """Every axis kind of the axes tensor (written by rabbit's TensorWriter) against what hist itself said of it."""
    fhist = pytest.importorskip("fitlib.hist")
    model = fitlib.read_rabbit(AXES)
    assert not model.channels_skipped, model.channels_skipped
    want = json.loads(AXES.with_suffix(".json").read_text())["channels"]
    assert [c.name for c in model.channels] == [c["name"] for c in want]
    for c, w in zip(model.channels, want):
        for a, wa in zip(fhist.axes(c), w["axes"]):
            assert (type(a).__name__, a.name, a.size, a.extent) == (wa["class"], wa["name"], wa["size"], wa["extent"])
            assert (a.traits.underflow, a.traits.overflow, a.traits.circular, a.traits.growth) == (
                wa["underflow"], wa["overflow"], wa["circular"], wa["growth"])
            if "edges" in wa:
                # boost-histogram 1.8.1 misreports a circular Variable axis's edges past its first bin (it bins by the
                # edges given): compare the edges the axis holds, as make_axes_tensor.py records them
                edges = a._ax.__getstate__()[1] if type(a).__name__ == "Variable" and a.traits.circular else a.edges
                np.testing.assert_allclose(edges, wa["edges"], rtol=1e-12)
            if "categories" in wa:
                assert [str(x) for x in a] == wa["categories"]
        if not c.masked:  # the data in the channel's bins, in row-major order over its axes
            h = fhist.channel_hist(model, c.name, model.data)
            np.testing.assert_array_equal(h.values(flow=c.flow).ravel(), model.data[w["start"] : w["start"] + c.nbins])


def test_channel_hists(demo, demo_hists):
    fhist = pytest.importorskip("fitlib.hist")
    out = fhist.channel_hists(demo, demo_hists, "ch0")
    assert set(out) == {"prefit", "postfit", "prefit_processes", "postfit_processes", "data"}
    np.testing.assert_array_equal(out["postfit"].values(), demo_hists["postfit_total"][:300])
    np.testing.assert_array_equal(out["postfit"].variances(), demo_hists["postfit_variance"][:300])
    np.testing.assert_array_equal(out["postfit_processes"].values(), demo_hists["postfit"][:300])
    assert [str(p) for p in out["postfit_processes"].axes["process"]] == demo.process_names
    masked = fhist.channel_hists(demo, demo_hists, "ch1_masked")
    assert "data" not in masked
    np.testing.assert_array_equal(masked["prefit"].values(), demo_hists["prefit_total"][300:])


@pytest.fixture(scope="module")
def demo_postfit_reference(tmp_path_factory) -> dict:
    return run_fitlib_fit(tmp_path_factory, DEMO, "--doImpacts", "--globalImpacts", "--scan", "signal", "--scanPoints", "7", "--scanRange", "2.5")


@pytest.mark.parametrize("kind", ["impacts", "global_impacts"])
def test_impacts_are_fitlib_fits(demo, demo_fit, demo_postfit_reference, kind):
    impacts = getattr(fitlib, kind)(demo, demo_fit)
    assert impacts.kind == ("global" if kind == "global_impacts" else "traditional")
    reference = demo_postfit_reference[kind]
    assert impacts.targets == list(reference) == ["signal"]
    assert impacts.sources == demo_fit.names
    assert impacts.values.shape == (1, len(demo_fit.names)) and impacts.grouped.shape == (1, len(impacts.groups))
    for t, target in enumerate(impacts.targets):
        want = reference[target]
        assert sorted(want["groups"]) == sorted(impacts.groups)
        for name, value in want["parameters"].items():
            assert_same_bits(impacts.values[t, impacts.sources.index(name)], value)
        for group, value in want["groups"].items():
            assert_same_bits(impacts.grouped[t, impacts.groups.index(group)], value)
        assert impacts.of(target) == dict(zip(impacts.sources, impacts.values[t].tolist()))
        assert impacts.grouped_of(target) == dict(zip(impacts.groups, impacts.grouped[t].tolist()))
    with pytest.raises(KeyError, match="no impacts on 'lumi'; the targets are 'signal'"):
        impacts.of("lumi")


def test_scan_is_fitlib_fits(demo, demo_fit, demo_postfit_reference):
    scan = fitlib.scan(demo, demo_fit, "signal", points=7, range=2.5)
    want = demo_postfit_reference["scans"]["signal"]
    assert scan.parameter == "signal" and scan.status == want["status"]
    assert_same_bits(scan.values, numbers(want["values"]))
    assert_same_bits(scan.dnll, numbers(want["dnll"]))
    assert scan.dnll[3] == 0 and (scan.dnll >= 0).all()
    assert scan.converged.all() and scan.converged.dtype == bool


def test_postfit_errors(demo, demo_fit):
    with pytest.raises(fitlib.UsageError, match="unknown parameter 'sigal'"):
        fitlib.scan(demo, demo_fit, "sigal")
    with pytest.raises(fitlib.UsageError, match="need the fit.s covariance"):
        fitlib.impacts(demo, fitlib.fit(demo, covariance=False))
    with pytest.raises(fitlib.UsageError, match="another Model"):
        fitlib.impacts(fitlib.read_rabbit(DEMO), demo_fit)


def test_progress_goes_to_logging(demo, demo_fit, caplog):
    caplog.set_level(logging.DEBUG, logger="fitlib")
    result = fitlib.fit(demo)
    lines = [r.getMessage() for r in caplog.records if r.name == "fitlib"]
    iterations = [m for m in lines if m.startswith("iteration ")]
    assert len(iterations) == result.iterations and iterations[0].startswith("iteration 1: f ")
    assert lines[-1].startswith("fit: converged") and f"after {result.iterations} iterations" in lines[-1]
    assert_same_bits(result.x, demo_fit.x)  # watching a fit does not change it


def test_ctrl_c_stops_a_fit(demo):
    """SIGINT during a fit (here from a logging filter at the third iteration) stops it and raises KeyboardInterrupt."""

    class InterruptAtThird(logging.Filter):
        def filter(self, record):
            if record.getMessage().startswith("iteration 3:"):
                signal.raise_signal(signal.SIGINT)
            return True

    logger = logging.getLogger("fitlib")
    interrupt = InterruptAtThird()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addFilter(interrupt)
    # Python's own SIGINT handler, also where this process started with SIGINT ignored (a background job of a
    # non-interactive shell, e.g. `make test &`): Python then installs none, and raise_signal does nothing.
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            fitlib.fit(demo)
    finally:
        signal.signal(signal.SIGINT, handler)
        logger.removeFilter(interrupt)
        logger.setLevel(level)


def demo_arrays() -> dict:
    """The demo tensor's datasets (rabbit's layout, asymmetric) as Model.from_arrays takes them."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(DEMO) as f:
        names = lambda key: [s.decode() for s in f[key][...]]  # noqa: E731
        procs, systs = names("hprocs"), names("hsysts")
        bins = f["hnorm"].size // len(procs)
        return dict(
            nominal=f["hnorm"][...].reshape(bins, len(procs)),
            logk=f["hlogk"][...].reshape(bins, len(procs), 2, len(systs)),
            data=f["hdata_obs"][...],
            processes=procs,
            signal=names("hsignals"),
            systematics=systs,
            sumw2=f["hsumw2"][...].reshape(bins, len(procs)),
            constraint_weights=f["hconstraintweights"][...],
            groups={g.decode(): [systs[i] for i in idx] for g, idx in zip(f["hsystgroups"][...], f["hsystgroupidxs"][...])},
        )


def test_model_from_arrays_is_the_tensor(demo, demo_fit):
    arrays = demo_arrays()
    model = fitlib.Model.from_arrays(**arrays)
    assert model.path == "<arrays>"
    assert (model.nbins, model.nbins_full, model.nprocs, model.nsyst, model.symmetric) == (300, 324, 4, 7, False)
    assert [(c.name, c.nbins, c.masked) for c in model.channels] == [(c.name, c.nbins, c.masked) for c in demo.channels]
    result = fitlib.fit(model)
    assert result.names == demo_fit.names and result.iterations == demo_fit.iterations
    for key in ["x", "uncertainties", "covariance", "nll"]:
        assert_same_bits(getattr(result, key), getattr(demo_fit, key))
    assert fitlib.impacts(model, result).groups == fitlib.impacts(demo, demo_fit).groups


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(logk=np.zeros((324, 4, 7, 2))), r"logk \(asymmetric: \[bins, processes, 2, systematics\]\) has shape \[324, 4, 7, 2\]"),
        (dict(data=np.zeros(299), channels=[("ch0", 300, False), ("ch1_masked", 24, True)]), r"data has shape \[299\]; expected \[300\]"),
        (dict(signal=["sgnal"]), r"'sgnal' is not a process"),
        (dict(groups={"g": ["lumix"]}), r"'lumix' is not a systematic"),
        (dict(channels=[("a", 300, False), ("b", 20, True)]), r"the channels cover 320 bins, but nominal has 324 rows"),
    ],
)
def test_model_from_arrays_errors(change, message):
    with pytest.raises(fitlib.ModelError, match=message):
        fitlib.Model.from_arrays(**{**demo_arrays(), **change})


def test_run_is_fitlib_fit(demo, demo_fit, tmp_path, caplog):
    """fitlib.run: the package's own fitlib-fit, its results read back; the same fit as fitlib.fit's."""
    caplog.set_level(logging.INFO, logger="fitlib")
    results = fitlib.run(DEMO, "-t", "-1", "0", "--unblind", "--doImpacts", output=tmp_path / "r.hdf5", quiet=False)
    assert list(results.fits) == ["asimov", "data"] and (tmp_path / "r.hdf5").is_file()
    fit = results["data"]
    assert fit.names == demo_fit.names and fit.status == demo_fit.status and fit.iterations == demo_fit.iterations
    assert_same_bits(fit.x, demo_fit.x)
    assert_same_bits(fit.nll, demo_fit.nll)
    assert_same_bits(fit.impacts.values, fitlib.impacts(demo, demo_fit).values)
    assert_same_bits(fit.covariance, demo_fit.covariance)
    assert_same_bits(fit.correlation, demo_fit.correlation)
    said = [r.getMessage() for r in caplog.records if r.name == "fitlib"]
    assert any(m.startswith("fitlib-fit: fit 'data'") for m in said)  # its stderr, line by line


def test_run_errors_are_fitlib_fits(tmp_path):
    with pytest.raises(fitlib.FitlibFitError, match="'no_such_nuisance' matches no parameter") as e:
        fitlib.run(DEMO, "--freezeParameters", "no_such_nuisance")
    assert e.value.returncode == 2
    with pytest.raises(ValueError, match="output="):
        fitlib.run(DEMO, "-o", str(tmp_path / "x.hdf5"))


def test_blosc2_tensor_needs_no_plugin_path(monkeypatch):
    """rabbit's current tensors are Blosc2-compressed: read through PyPI's hdf5plugin, without HDF5_PLUGIN_PATH."""
    pytest.importorskip("hdf5plugin")
    monkeypatch.delenv("HDF5_PLUGIN_PATH", raising=False)
    blosc2 = fitlib.read_rabbit(ROOT / "tests" / "data" / "rabbit" / "test_tensor_blosc2.hdf5")
    gzip = fitlib.read_rabbit(ROOT / "tests" / "data" / "rabbit" / "test_tensor_symmetric.hdf5")  # its gzip original
    np.testing.assert_array_equal(blosc2.data, gzip.data)
    np.testing.assert_array_equal(blosc2.nominal, gzip.nominal)


@pytest.mark.parametrize(
    "options, flags",
    [
        (dict(bin_by_bin_mode="full"), ["--binByBinStatMode", "full"]),
        (dict(bin_by_bin=False), ["--noBinByBinStat"]),
        (dict(data_term="chisq"), ["--chisqFit"]),
        (dict(allow_negative_poi=True), ["--allowNegativePOI"]),
        (dict(frozen=["lumi", "jes"]), ["--freezeParameters", "lumi", "jes"]),
        (dict(method="trust-krylov"), ["--minimizerMethod", "trust-krylov"]),
        (dict(method="trust-exact"), ["--minimizerMethod", "trust-exact"]),
        (dict(method="trust-ncg"), ["--minimizerMethod", "trust-ncg"]),
        (dict(method="trust-gauss-newton"), ["--minimizerMethod", "trust-gauss-newton"]),
        (dict(method="trust-gauss-newton-krylov"), ["--minimizerMethod", "trust-gauss-newton-krylov"]),
    ],
)
def test_options_are_fitlib_fits(demo, tmp_path_factory, options, flags):
    assert_same_fit(fitlib.fit(demo, **options), run_fitlib_fit(tmp_path_factory, DEMO, *flags))


def test_all_histograms_are_fitlib_fits(demo, demo_fit, tmp_path):
    """Every histogram array (per process, their variances, the channels' covariance, the ±1σ variations) as
    fitlib-fit --saveHists writes them to its results file."""
    hists = fitlib.histograms(demo, demo_fit, covariance=True, process_variances=True, variations=True)
    stored = fitlib.run(DEMO, "-t", "0", "--unblind", "--saveHists", "--computeHistCov", "--computeHistErrorsPerProcess",
                        "--computeVariations")["data"].histograms
    for key in ["prefit", "postfit", "prefit_process_variance", "postfit_process_variance", "prefit_variations",
                "postfit_variations", "prefit_total", "postfit_variance"]:
        assert_same_bits(hists[key], getattr(stored, key))
    assert hists["postfit_variations"].shape == (demo.nbins_full, demo.nparams, 2)
    for when in ["prefit", "postfit"]:
        assert len(hists[f"{when}_covariance"]) == len(demo.channels)
        for mine, theirs in zip(hists[f"{when}_covariance"], getattr(stored, f"{when}_covariance")):
            assert_same_bits(mine, theirs)


def test_progress_without_tqdm_goes_to_stderr(demo, demo_fit, capsys):
    if importlib.util.find_spec("tqdm") is not None:
        pytest.skip("tqdm is installed: progress=True draws a bar")
    result = fitlib.fit(demo, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == result.iterations and lines[0].startswith("fitlib: iteration 1: f ")
    assert_same_bits(result.x, demo_fit.x)


def test_run_rabbit_output_with_this_python(tmp_path, monkeypatch):
    """fitlib.run(..., "--rabbitOutput", F): the bundled fitlib-fit converts with this Python, whatever python3 the PATH
    has (the venv need not be activated)."""
    pytest.importorskip("wums.ioutils")
    monkeypatch.delenv("FITLIB_PYTHON", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # Debian's python3, without fitlib
    out = tmp_path / "fitresults.hdf5"
    fitlib.run(DEMO, "-t", "0", "--unblind", "--rabbitOutput", str(out))
    assert out.is_file()


def test_channels_from_the_pickled_meta():
    """Where fitlib's reader cannot decode the meta, read_rabbit takes the channels from Python's pickle: that path gives
    the channels fitlib's reader gives, on the tensor with every axis kind (transforms, flow, circular, categories)."""
    pytest.importorskip("hist")
    from fitlib import _core, _meta

    model = fitlib.read_rabbit(AXES)
    assert not model.channels_skipped
    pickled = _core._with_channels(model, _meta._pickled_channels(str(AXES)))
    assert [(c.name, c.nbins, c.masked, c.flow) for c in pickled.channels] == [(c.name, c.nbins, c.masked, c.flow) for c in model.channels]
    fields = ["kind", "name", "label", "edges", "categories", "transform", "underflow", "overflow", "circular", "growth"]
    for mine, theirs in zip(pickled.channels, model.channels):
        assert [[getattr(a, f) for f in fields] for a in mine.axes] == [[getattr(a, f) for f in fields] for a in theirs.axes]
    with pytest.raises(fitlib.ModelError, match="describes 12 bins and 0 masked ones, but the tensor has"):
        _core._with_channels(model, _meta._pickled_channels(str(AXES))[:1])
    # rabbit 0.2.5's test tensor pickles hist axes this hist cannot unpickle either: rabbit's default channels, said why
    tensor = fitlib.read_rabbit(ROOT / "tests" / "data" / "rabbit" / "test_tensor.hdf5")
    assert "'ch1_masked', as rabbit does" in tensor.channels_skipped


def test_likelihood_is_the_fits(demo, demo_fit):
    """fitlib.Likelihood: the NLL fit minimises, at its minimum the fit's NLL and gradient to the last bit; the gradient
    against central differences, the Hessian-vector product against the dense Hessian."""
    lik = fitlib.Likelihood(demo)
    assert lik.names == demo_fit.names and len(lik) == len(demo_fit.names)
    assert_same_bits(lik.x0, demo_fit.x0)
    f, g = lik.value_and_gradient(demo_fit.x)
    assert_same_bits(f, demo_fit.nll)
    assert_same_bits(g, demo_fit.gradient)
    assert_same_bits(lik.value(demo_fit.x), f)
    x = lik.x0 + 0.1
    g = lik.gradient(x)
    for i in range(len(x)):
        h = 1e-5 * np.eye(len(x))[i]
        assert (lik.value(x + h) - lik.value(x - h)) / 2e-5 == pytest.approx(g[i], rel=1e-6, abs=1e-6)
    hess = lik.hessian(x)
    v = np.linspace(-1, 1, len(x))
    np.testing.assert_allclose(lik.hessp(x, v), hess @ v, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(hess, hess.T, rtol=1e-12, atol=1e-12)
    with pytest.raises(fitlib.UsageError, match="x must be a vector of the 8 parameters"):
        lik.value(np.zeros(3))
    assert_same_bits(lik.value(demo_fit.x.tolist()), f)  # a list does as well as an array
    with pytest.raises(fitlib.UsageError, match="x is not an array of numbers"):
        lik.value(["a"] * 8)
    chisq = fitlib.Likelihood(demo, data_term="chisq")
    assert chisq.value(demo_fit.x) != f


def test_model_from_lists():
    """Model.from_arrays takes lists as well as arrays (any dtype and order)."""
    model = fitlib.Model.from_arrays([[10, 90], [20, 80], [30, 70]], [[[0.1], [0.0]], [[0.0], [0.05]], [[0.0], [-0.05]]],
                                     [45, 95, 110], processes=["sig", "bkg"], signal=["sig"], systematics=["x"],
                                     constraint_weights=[1])
    result = fitlib.fit(model)
    assert result.converged and result.names == ["sig", "x"]
    assert model.nominal.tolist() == [[10, 90], [20, 80], [30, 70]]


def test_threads_default_to_every_core(demo, demo_fit, tmp_path_factory):
    """fitlib-fit and fitlib.fit split the bins over every core this process may use, as many as the bins allow: the
    same default, the same bits."""
    cores = len(os.sched_getaffinity(0))
    expected = cores
    while expected > 1 and expected > demo.nbins:
        expected //= 2
    out = fitlib_fit(tmp_path_factory, DEMO, "-t", "0", "--unblind", "--json")
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["options"]["threads"] == expected
    assert_same_fit(fitlib.fit(demo, threads=expected), summary["fits"][0])
    assert_same_bits(demo_fit.x, fitlib.fit(demo, threads=expected).x)
