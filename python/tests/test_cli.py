# SPDX-License-Identifier: MIT
"""fitlib_fit (fitlib.cli): rabbit_fit's command line translated into fitlib-fit's, its -o DIRECTORY, the options it
refuses or ignores, the exit statuses, and a run on the demo tensor.

The translation needs nothing but the package. The comparison with rabbit_fit's own parser runs where rabbit is
installed (it imports TensorFlow); the run on the demo where the package has its fitlib-fit program and the packages of
fitlib[rabbit]. Both are skipped otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import pathlib
import sys
import textwrap
import types

import pytest

from fitlib import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "data" / "demo_analysis.hdf5"


def no_signals(path):
    raise AssertionError(f"the tensor's POIs were read ({path}), though no --expectSignal VALUE needs them")


def translate(*argv, signals=no_signals):
    return cli.translate(list(argv), signals=signals)


def refused(capsys, *argv, signals=no_signals) -> str:
    """The message of a command line that fitlib_fit refuses, checking that it exits as argparse does (status 2)."""
    with pytest.raises(SystemExit) as e:
        translate(*argv, signals=signals)
    assert e.value.code == 2
    return capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# Translation


def test_rabbit_command_line():
    fitlib_argv, plan = translate("tensor.hdf5", "-o", "out/", "--outname", "fr.hdf5", "-t", "-1", "0", "--doImpacts",
                                  "--globalImpacts", "--saveHists", "--computeHistErrors", "--scan", "sig",
                                  "--freezeParameters", "a", "b", "--expectSignal", "sig", "1.0")
    assert fitlib_argv == ["tensor.hdf5", "-o", os.path.join("out", "fr_fitlib.hdf5"), "-t", "-1", "0",
                           "--expectSignal", "sig", "1.0", "--freezeParameters", "a", "b", "--doImpacts", "--globalImpacts",
                           "--scan", "sig", "--saveHists"]
    assert plan.tensor == "tensor.hdf5"
    assert plan.directory == pathlib.Path("out")
    assert plan.rabbit_output == pathlib.Path("out/fr.hdf5")
    assert plan.fitlib_output == pathlib.Path("out/fr_fitlib.hdf5")
    assert plan.json_output is None
    assert plan.notes == ()


def test_defaults_are_fitlib_fits_own():
    """rabbit_fit's defaults are fitlib-fit's (-t -1, the seed, the toys, the minimiser, bin-by-bin statistics), so a
    bare command line passes nothing but the files."""
    fitlib_argv, plan = translate("t.hdf5")
    assert fitlib_argv == ["t.hdf5", "-o", "fitresults_fitlib.hdf5"]
    assert plan.rabbit_output == pathlib.Path("fitresults.hdf5")
    assert plan.directory == pathlib.Path(".")
    # Spelled out, rabbit's defaults change nothing either, also those of the options fitlib does not have.
    spelled = translate("t.hdf5", "-o", "./", "--outname", "fitresults.hdf5", "-t", "-1", "--seed", "123456789",
                        "--toysSystRandomize", "frequentist", "--toysDataRandomize", "poisson", "--toysDataMode", "expected",
                        "--binByBinStatType", "automatic", "--binByBinStatMode", "lite",
                        "--minBBKstat", "0", "--scanPoints", "15", "--scanRange", "3", "-v", "3", "--expectSignal", "1",
                        "--earlyStopping", "-1", "--POIMode", "mu", "--paramModel", "Mu", "--regularizationStrength", "0",
                        "--prefitUnconstrainedNuisanceUncertainty", "0", "--blindingGroup", "--asymImpactsHess", "exact")
    assert spelled[0] == fitlib_argv
    # rabbit's own minimiser is not fitlib-fit's default (auto): spelled out, it is passed on.
    assert translate("t.hdf5", "--minimizerMethod", "trust-krylov")[0] == [*fitlib_argv, "--minimizerMethod", "trust-krylov"]


def test_options_fitlib_fit_has():
    fitlib_argv, _ = translate(
        "t.hdf5", "-t", "0", "--pseudoData", "--toysSystRandomize", "bayesian", "--toysDataRandomize", "normal",
        "--toysDataMode", "observed", "--seed", "7", "--setConstraintMinimum", "a", "0.5", "--setConstraintMinimum", "b",
        "-1", "--allowNegativeParam", "--minimizerMethod", "trust-exact", "--minimizerMaxiter", "50", "--minimizerGtol",
        "1e-9", "--chisqFit", "--noBinByBinStat", "--binByBinStatType", "gamma", "--binByBinStatMode", "full",
        "--minBBKstat", "0.1", "--scan", "--scan2D", "a", "b", "--scan2D", "a", "c", "--scanPoints", "5", "--scanRange",
        "2", "--unblind", "--threads", "4", "--replicaBatch", "8", "--preconditioning", "diagonal", "--minimizerEdmTol",
        "1e-10", "--binByBinStatZeroVariance", "scale", "--systematicType", "normal", "--allowNegativeExpectation",
        "--hdf5PluginPath", "/p", "--maxMetaMiB", "128", "--maxCompressionRatio", "4096", "--json", "-q")
    assert fitlib_argv == [
        "t.hdf5", "-o", "fitresults_fitlib.hdf5", "--json", "-q", "-t", "0", "--pseudoData", "--toysSystRandomize",
        "bayesian", "--toysDataRandomize", "normal", "--toysDataMode", "observed", "--minimizerMethod", "trust-exact",
        "--binByBinStatType", "gamma", "--binByBinStatMode", "full", "--seed", "7", "--setConstraintMinimum", "a", "0.5",
        "--setConstraintMinimum", "b", "-1", "--allowNegativePOI", "--minimizerMaxiter", "50", "--minimizerGtol", "1e-09",
        "--chisqFit", "--noBinByBinStat", "--minBBKstat", "0.1", "--scan", "--scan2D", "a", "b", "--scan2D", "a", "c",
        "--scanPoints", "5", "--scanRange", "2.0", "--unblind", "--threads", "4", "--replicaBatch", "8",
        "--preconditioning", "diagonal", "--minimizerEdmTol", "1e-10", "--binByBinStatZeroVariance", "scale",
        "--systematicType", "normal", "--hdf5PluginPath", "/p", "--maxMetaMiB", "128", "--maxCompressionRatio", "4096.0",
        "--allowNegativeExpectation"]


def test_verbosity_and_names():
    assert "-q" in translate("t.hdf5", "-v", "2")[0]
    assert "-q" not in translate("t.hdf5", "-v", "4")[0]
    assert translate("t.hdf5", "--unblind", "sig", "mu_.*")[0][-3:] == ["--unblind", "sig", "mu_.*"]
    assert translate("t.hdf5", "--pseudoData", "a", "b")[0][-3:] == ["--pseudoData", "a", "b"]
    assert translate("t.hdf5", "--allowNegativePOI")[0][-1] == "--allowNegativePOI"
    # rabbit's --noEDM skips the covariance along with the EDM.
    assert translate("t.hdf5", "--noEDM")[0][-1] == "--noHessian"
    assert translate("t.hdf5", "--noHessian", "--noEDM")[0].count("--noHessian") == 1


def test_expect_signal_forms():
    # rabbit's NAME VALUE, repeated, and several pairs at once
    argv = translate("t.hdf5", "--expectSignal", "sig", "0", "--expectSignal", "bsm", "2", "x", "3")[0]
    assert argv[3:] == ["--expectSignal", "sig", "0", "--expectSignal", "bsm", "2", "--expectSignal", "x", "3"]
    # rabbit 0.2.5's VALUE: every POI, read from the tensor; 1 (its default) needs no names
    argv = translate("t.hdf5", "--expectSignal", "0.5", signals=lambda path: ["s1", "s2"])[0]
    assert argv[3:] == ["--expectSignal", "s1", "0.5", "--expectSignal", "s2", "0.5"]
    assert translate("t.hdf5", "--expectSignal", "1")[0] == ["t.hdf5", "-o", "fitresults_fitlib.hdf5"]
    # a later VALUE sets every POI again, a later pair one of them
    argv = translate("t.hdf5", "--expectSignal", "s1", "3", "--expectSignal", "1", "--expectSignal", "s2", "0",
                     signals=lambda path: ["s1", "s2"])[0]
    assert argv[3:] == ["--expectSignal", "s1", "3", "--expectSignal", "s1", "1", "--expectSignal", "s2", "1",
                        "--expectSignal", "s2", "0"]
    # the tensor after either form, as rabbit's parsers leave it
    argv, plan = translate("--expectSignal", "0.5", "t.hdf5", signals=lambda path: [f"poi of {path}"])
    assert plan.tensor == "t.hdf5" and argv[3:] == ["--expectSignal", "poi of t.hdf5", "0.5"]
    argv, plan = translate("--expectSignal", "sig", "2", "t.hdf5")
    assert plan.tensor == "t.hdf5" and argv[3:] == ["--expectSignal", "sig", "2"]


def test_expect_signal_errors(capsys):
    assert "VALUE 'x' is not a number" in refused(capsys, "t.hdf5", "--expectSignal", "sig", "x")
    # the tensor's POIs read by fitlib_fit itself: a missing tensor is named
    assert "--expectSignal 2: cannot read the POIs of 'no_such_tensor.hdf5' (" in refused(
        capsys, "no_such_tensor.hdf5", "--expectSignal", "2", signals=None)

    def unreadable(path):
        raise OSError("no file")

    with pytest.raises(SystemExit):
        cli.translate(["t.hdf5", "--expectSignal", "2"], signals=unreadable)
    assert "--expectSignal 2: cannot read the POIs of 't.hdf5' (no file)" in capsys.readouterr().err


def test_histogram_options():
    argv, plan = translate("t.hdf5", "--saveHists", "--saveHistsPerProcess", "--computeHistErrors",
                           "--computeHistErrorsPerProcess", "--computeHistCov", "--computeVariations", "--noChi2",
                           "-m", "BaseMapping", "-m", "Project", "ch0", "pt", "--physicsModel", "Ratio", "ch0", "ch1")
    assert argv[3:] == ["--saveHists", "--computeHistErrorsPerProcess", "--computeHistCov", "--computeVariations",
                        "--noChi2", "-m", "Project", "ch0", "pt", "-m", "Ratio", "ch0", "ch1"]
    assert plan.notes == ("-m BaseMapping: the channels' own histograms, which --saveHists always writes",)
    # Without --saveHists rabbit_fit ignores them: so does fitlib_fit, saying so.
    argv, plan = translate("t.hdf5", "--computeHistCov", "--saveHistsPerProcess", "-m", "Select", "ch0")
    assert argv == ["t.hdf5", "-o", "fitresults_fitlib.hdf5"]
    assert plan.notes == ("--computeHistCov, --saveHistsPerProcess, -m Select ch0 ignored without --saveHists, as "
                          "rabbit_fit ignores them",)


def test_ignored_options_noted():
    argv, plan = translate("t.hdf5", "--eager", "--noColorLogger", "--diagnostics", "--fullNll", "--hvpMethod", "fwdrev",
                           "--jitCompile", "off", "--globalImpactsDisableJVP", "--minimizerFtol", "1e-6", "--contourLevels",
                           "1", "2")
    assert argv == ["t.hdf5", "-o", "fitresults_fitlib.hdf5"]
    flags = [note.split()[0] for note in plan.notes]
    assert flags == ["--noColorLogger", "--eager", "--hvpMethod", "--jitCompile", "--globalImpactsDisableJVP",
                     "--diagnostics", "--minimizerFtol", "--fullNll", "--contourLevels"]
    assert all(" ignored: " in note for note in plan.notes)


@pytest.mark.parametrize(("argv", "message"), [
    (["--contourScan"], "--contourScan: fitlib does not have this option of rabbit_fit; instead: --scan NAME…"),
    (["--contourScan", "sig"], "--contourScan: fitlib does not have"),
    (["--contourScan2D", "a", "b"], "--contourScan2D: fitlib does not have"),
    (["--externalPostfit", "fr.hdf5"], "--externalPostfit: fitlib does not have this option of rabbit_fit"),
    (["--noFit"], "--noFit: fitlib does not have"),
    (["--prefitOnly"], "--prefitOnly: fitlib does not have"),
    (["--toysRandomizeParameters"], "--toysRandomizeParameters: fitlib does not have"),
    (["--POIMode", "none"], "--POIMode: fitlib does not have this option of rabbit_fit; instead: fitlib has rabbit's Mu "
                            "model only"),
    (["--paramModel", "Ones"], "--freezeParameters NAME…"),
    (["--paramModel", "Mu", "--paramModel", "ABCD", "a", "b", "c", "d"], "--paramModel: fitlib does not have"),
    (["--earlyStopping", "10"], "instead: fitlib stops on the EDM (--minimizerEdmTol)"),
    (["--forceLinear"], "--forceLinear: fitlib does not have this option of rabbit_fit\n"),
    (["--prefitUnconstrainedNuisanceUncertainty", "1"], "--prefitUnconstrainedNuisanceUncertainty: fitlib does not have"),
    (["--blindingGroup", "a.*"], "--blindingGroup: fitlib does not have"),
    (["--gaussianGlobalImpacts"], "instead: --globalImpacts"),
    (["--asymImpacts"], "--asymImpacts: fitlib does not have this option of rabbit_fit; instead: --doImpacts"),
    (["--globalAsymImpacts"], "instead: --globalImpacts"),
    (["--nonProfiledImpacts"], "--nonProfiledImpacts: fitlib does not have"),
    (["--scanRangeUsePrefit"], "instead: --scanRange, in postfit σ"),
    (["--computeHistImpacts"], "--computeHistImpacts: fitlib does not have"),
    (["--computeSaturatedProjectionTests"], "--computeSaturatedProjectionTests: fitlib does not have"),
    (["--compositeModel"], "--compositeMapping: fitlib does not have"),
    (["-r", "SVD", "Select", "ch0_masked"], "-r/--regularization: fitlib does not have"),
    (["--regularizationStrength", "0.1"], "--regularizationStrength: fitlib does not have"),
    (["--lCurveScan"], "--lCurveScan: fitlib does not have"),
    (["--minimizerMethod", "L-BFGS-B"], "--minimizerMethod L-BFGS-B: fitlib minimises with trust-region methods only; "
                                        "instead: trust-krylov, trust-ncg, trust-exact, trust-gauss-newton, "
                                        "trust-gauss-newton-krylov"),
    (["--minimizerMaxiter", "0"], "--minimizerMaxiter 0: fitlib takes a positive iteration limit"),
    (["--saveHists", "-m", "Asymmetry", "ch0", "ch1"], "-m Asymmetry: fitlib does not have this mapping; it has Select, "
                                                       "Project, Normalize, Ratio"),
    (["-m", "my_mappings.Custom", "ch0"], "-m my_mappings.Custom: fitlib does not have this mapping"),
])
def test_refused(capsys, argv, message):
    err = refused(capsys, "t.hdf5", *argv)
    assert err.startswith("usage: fitlib_fit [options] filename\nfitlib_fit: error: -")
    assert message in err


def test_malformed(capsys):
    assert "the following arguments are required: filename" in refused(capsys, "--scan", "t.hdf5")
    assert "unrecognized arguments: u.hdf5" in refused(capsys, "t.hdf5", "--expectSignal", "0.5", "u.hdf5")
    assert "unrecognized arguments: --noSuchOption" in refused(capsys, "t.hdf5", "--noSuchOption")
    assert "argument --toysDataMode: invalid choice" in refused(capsys, "t.hdf5", "--toysDataMode", "up")
    assert "expected 2 arguments" in refused(capsys, "t.hdf5", "--scan2D", "a")


# ----------------------------------------------------------------------------------------------------------------
# -o DIRECTORY, --outname, --postfix: rabbit's names


@pytest.mark.parametrize(("argv", "rabbit", "fitlib"), [
    ([], "fitresults.hdf5", "fitresults_fitlib.hdf5"),
    (["-o", "out"], "out/fitresults.hdf5", "out/fitresults_fitlib.hdf5"),
    (["--output", "a/b/", "--outname", "fr.hdf5"], "a/b/fr.hdf5", "a/b/fr_fitlib.hdf5"),
    (["--outpath", "out", "--outname", "fr"], "out/fr.hdf5", "out/fr_fitlib.hdf5"),  # rabbit adds .hdf5
    (["-o", "out", "--outname", "fr.h5", "--postfix", "v2"], "out/fr_v2.h5", "out/fr_v2_fitlib.hdf5"),
    (["-o", "out", "-p", "v2"], "out/fitresults_v2.hdf5", "out/fitresults_v2_fitlib.hdf5"),
    (["-o", "out", "--outname", "sub/fr.hdf5"], "out/sub/fr.hdf5", "out/sub/fr_fitlib.hdf5"),
])
def test_output_directory(argv, rabbit, fitlib):
    fitlib_argv, plan = translate("t.hdf5", *argv, "--json")
    assert plan.rabbit_output == pathlib.Path(rabbit)
    assert plan.fitlib_output == pathlib.Path(fitlib)
    assert plan.directory == pathlib.Path(rabbit).parent
    assert plan.json_output == pathlib.Path(fitlib).with_suffix(".json")
    assert fitlib_argv[1:4] == ["-o", str(pathlib.Path(fitlib)), "--json"]
    assert translate("t.hdf5", *argv, "--noRabbitOutput")[1].rabbit_output is None


def test_output_that_looks_like_a_file():
    """rabbit's -o is a directory also when it is named like a file: a note says where the results go."""
    _, plan = translate("t.hdf5", "-o", "results.hdf5")
    assert plan.rabbit_output == pathlib.Path("results.hdf5/fitresults.hdf5")
    assert plan.notes == ("-o results.hdf5 is the directory of the results, as rabbit_fit's -o: they go to "
                          "results.hdf5/fitresults.hdf5",)


# ----------------------------------------------------------------------------------------------------------------
# Against rabbit_fit's own parser, where rabbit is installed


@pytest.fixture(scope="module")
def rabbit_parser() -> argparse.ArgumentParser:
    """rabbit_fit's parser (rabbit 0.2.5's make_parser() parses at once: its parser is caught at parse_args)."""
    scripts = importlib.metadata.entry_points()
    scripts = scripts.select(group="console_scripts") if hasattr(scripts, "select") else scripts.get("console_scripts", [])
    entry = [e for e in scripts if e.name == "rabbit_fit"]
    if not entry:
        pytest.skip("rabbit is not installed: no comparison with rabbit_fit's parser")
    module = importlib.import_module(entry[0].module)
    caught = []
    original = argparse.ArgumentParser.parse_args

    def catch(self, args=None, namespace=None):
        caught.append(self)
        return original(self, ["tensor.hdf5"], namespace)

    argparse.ArgumentParser.parse_args = catch
    try:
        made = module.make_parser()
    finally:
        argparse.ArgumentParser.parse_args = original
    return made if isinstance(made, argparse.ArgumentParser) else caught[0]


# Defaults that differ on purpose: rabbit 0.2.5's --expectSignal 1.0 and HEAD's None both mean the tensor's default
# (1); --contourLevels only matters to --contourScan, which fitlib refuses.
DIFFERENT_DEFAULTS = {"--expectSignal", "--contourLevels"}


def test_rabbit_options_and_defaults(rabbit_parser):
    ours = cli.build_parser()
    mine = ours._option_string_actions
    checked = 0
    for action in rabbit_parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:  # the tensor
            assert action.dest == "filename"
            continue
        for s in action.option_strings:
            assert s in mine, f"rabbit_fit's {s} is not an option of fitlib_fit"
        flag = action.option_strings[-1]
        if flag in DIFFERENT_DEFAULTS:
            continue
        assert mine[flag].default == action.default, f"{flag}: {mine[flag].default!r}, rabbit_fit {action.default!r}"
        if action.choices is not None:
            assert set(action.choices) <= set(mine[flag].choices or ()), flag
        checked += 1
    assert checked > 40
    # And rabbit's own parse of a realistic command line means the same.
    argv = ["tensor.hdf5", "-o", "out/", "--outname", "fr.hdf5", "-t", "-1", "0", "--doImpacts", "--globalImpacts",
            "--saveHists", "--computeHistErrors", "--scan", "sig", "--freezeParameters", "a", "b"]
    theirs = vars(rabbit_parser.parse_args(argv))
    parsed = vars(ours.parse_args(argv))
    aliases = {"outpath": "output", "allowNegativeParam": "allowNegativePOI", "physicsModel": "mapping",
               "compositeModel": "compositeMapping"}
    for dest, value in theirs.items():
        if dest not in ("expectSignal", "contourLevels"):
            assert parsed[aliases.get(dest, dest)] == value, dest


# ----------------------------------------------------------------------------------------------------------------
# main(): the run, with a stand-in fitlib-fit and converter


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """fitlib.program.executable() a script that writes its arguments to its -o file and exits with
    $FAKE_FITLIB_FIT_STATUS; fitlib.rabbit.write_fitresults records its calls (and raises with $FAKE_CONVERT_FAILS)."""
    exe = tmp_path / "fitlib-fit"
    exe.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""
        import json, os, sys
        args = sys.argv[1:]
        with open(args[args.index("-o") + 1], "w") as f:
            json.dump(args, f)
        sys.exit(int(os.environ.get("FAKE_FITLIB_FIT_STATUS", "0")))
    """))
    exe.chmod(0o755)
    calls = []

    def write_fitresults(results, path, *, tensor=None):
        calls.append((results, path, tensor))
        if os.environ.get("FAKE_CONVERT_FAILS"):
            raise OSError("disk full")
        pathlib.Path(path).write_text("rabbit")

    monkeypatch.setitem(sys.modules, "fitlib.program", types.SimpleNamespace(executable=lambda: exe))
    monkeypatch.setitem(sys.modules, "fitlib.rabbit", types.SimpleNamespace(write_fitresults=write_fitresults))
    monkeypatch.setattr(cli, "_RABBIT_PACKAGES", ())
    monkeypatch.chdir(tmp_path)
    return calls


@pytest.mark.parametrize("status", [0, 3])
def test_main_converts(stand_ins, monkeypatch, capsys, status):
    monkeypatch.setenv("FAKE_FITLIB_FIT_STATUS", str(status))
    assert cli.main(["t.hdf5", "-o", "out/sub", "--outname", "fr.hdf5", "-t", "0", "--eager"]) == status
    assert json.loads(pathlib.Path("out/sub/fr_fitlib.hdf5").read_text()) == ["t.hdf5", "-o", "out/sub/fr_fitlib.hdf5",
                                                                             "-t", "0"]
    assert stand_ins == [("out/sub/fr_fitlib.hdf5", "out/sub/fr.hdf5", "t.hdf5")]
    assert pathlib.Path("out/sub/fr.hdf5").read_text() == "rabbit"
    out, err = capsys.readouterr()
    assert "fitlib_fit: note: --eager ignored" in err
    assert "rabbit's results written in file out/sub/fr.hdf5" in out


@pytest.mark.parametrize("status", [2, 4, 1])
def test_main_failed_fit_is_not_converted(stand_ins, monkeypatch, status):
    monkeypatch.setenv("FAKE_FITLIB_FIT_STATUS", str(status))
    assert cli.main(["t.hdf5", "-o", "out"]) == status
    assert stand_ins == []


def test_main_failed_conversion(stand_ins, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_CONVERT_FAILS", "1")
    assert cli.main(["t.hdf5"]) == 4
    err = capsys.readouterr().err
    assert "could not write rabbit's results 'fitresults.hdf5' (OSError: disk full); fitlib's own results are in " \
           "'fitresults_fitlib.hdf5'" in err
    assert len(stand_ins) == 2  # with the tensor's meta, then without


def test_main_no_rabbit_output(stand_ins, monkeypatch):
    monkeypatch.setitem(sys.modules, "fitlib.rabbit", None)  # import fails
    assert cli.main(["t.hdf5", "--noRabbitOutput"]) == 0
    assert pathlib.Path("fitresults_fitlib.hdf5").exists()


def test_main_missing_converter_stops_before_the_fit(stand_ins, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "fitlib.rabbit", None)
    assert cli.main(["t.hdf5", "-o", "out"]) == 1
    assert "pip install 'fitlib[rabbit]', or pass --noRabbitOutput" in capsys.readouterr().err
    assert not pathlib.Path("out").exists()
    monkeypatch.delitem(sys.modules, "fitlib.rabbit")
    monkeypatch.setitem(sys.modules, "fitlib.rabbit", types.SimpleNamespace(write_fitresults=None))
    monkeypatch.setattr(cli, "_RABBIT_PACKAGES", ("no_such_module_wums",))
    assert cli.main(["t.hdf5", "-o", "out"]) == 1
    assert "no module named no_such_module_wums" in capsys.readouterr().err
    assert not pathlib.Path("out").exists()


def test_main_output_is_a_file(stand_ins, capsys):
    pathlib.Path("results.hdf5").write_text("")
    assert cli.main(["t.hdf5", "-o", "results.hdf5"]) == 2
    assert "cannot create the directory 'results.hdf5'" in capsys.readouterr().err


def test_main_rabbit_output_is_the_tensor(stand_ins, capsys):
    pathlib.Path("t.hdf5").write_text("")
    assert cli.main(["t.hdf5", "--outname", "t.hdf5"]) == 2
    assert "is the input tensor" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# The demo, with the package's fitlib-fit and converter


def test_end_to_end(tmp_path, monkeypatch):
    run = pytest.importorskip("fitlib.program")
    pytest.importorskip("fitlib.rabbit")
    ioutils = pytest.importorskip("wums.ioutils")
    h5py = pytest.importorskip("h5py")
    try:
        run.executable()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    monkeypatch.chdir(tmp_path)
    assert cli.main([str(DEMO), "-o", "out/", "--outname", "fr.hdf5", "-t", "-1", "0", "--doImpacts", "--saveHists",
                     "--scan", "signal", "--json", "-v", "1", "--postfix", "demo"]) == 0
    summary = json.loads(pathlib.Path("out/fr_demo_fitlib.json").read_text())
    assert [f["name"] for f in summary["fits"]] == ["asimov", "data"]
    assert summary["options"]["doImpacts"] and summary["options"]["saveHists"]
    with h5py.File("out/fr_demo.hdf5", "r") as f:
        assert {"meta", "results", "results_asimov"} <= set(f)
        asimov = ioutils.pickle_load_h5py(f["results_asimov"])
        parms = asimov["parms"].get()  # the proxies read from the open file
    (signal,) = [p for p in summary["fits"][0]["parameters"] if p["name"] == "signal"]
    assert parms[parms.axes[0].index("signal")].value == pytest.approx(signal["postfit"], rel=1e-12)
    assert "nll_scan_signal" in asimov and "impacts" in asimov
