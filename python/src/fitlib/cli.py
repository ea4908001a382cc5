# SPDX-License-Identifier: MIT
"""fitlib_fit: rabbit_fit's command line, run by fitlib.

    fitlib_fit tensor.hdf5 -o out/ --outname fr.hdf5 -t -1 0 --doImpacts --saveHists

takes the options of rabbit_fit (rabbit 0.2.5, the PyPI release, and rabbit's current ones), with their names and
defaults and with rabbit's -o DIRECTORY, translates them into fitlib-fit's command line and runs the fitlib-fit program
that the wheel bundles (fitlib.program.executable()). fitlib-fit writes fitlib's own results beside rabbit's file as
<DIR>/<stem>_fitlib.hdf5 (docs/results-format.md), and fitlib.rabbit converts them into rabbit's fitresults layout at
the path rabbit_fit would have written (<DIR>/<outname>, with _<postfix> before its extension), for rabbit's plotting and
printing scripts. The exit status is fitlib-fit's: 0 every fit converged, 3 one did not (both converted), 2 bad input
(nothing run), 4 the results could not be written; 2 also for an option fitlib does not have (named, with the
alternative where there is one), 1 when the fitlib-fit program or the rabbit converter is missing.

translate(argv) is the translation alone, without running anything: (fitlib-fit's arguments, Plan).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Callable, Optional, Sequence

__all__ = ["Plan", "build_parser", "main", "translate"]

PROG = "fitlib_fit"

_MAPPINGS = ("Select", "Project", "Normalize", "Ratio")  # fitlib-fit -m's kinds
_BASE_MAPPINGS = ("BaseMapping", "Basemodel")  # rabbit's: the channels' own histograms (HEAD, 0.2.5)
_TRUST_METHODS = ("trust-krylov", "trust-ncg", "trust-exact", "trust-gauss-newton", "trust-gauss-newton-krylov")
_RABBIT_PACKAGES = ("wums", "hist", "h5py")  # what fitlib.rabbit writes rabbit's layout with (fitlib[rabbit])

# rabbit_fit's options that fitlib refuses: (dest, option as rabbit spells it, what to use instead or None). Each is
# refused only when given a value other than rabbit's default, so that a command line spelling out rabbit's defaults
# runs unchanged.
_REFUSED = (
    ("earlyStopping", "--earlyStopping", "fitlib stops on the EDM (--minimizerEdmTol), the gradient (--minimizerGtol) "
     "or the iteration limit (--minimizerMaxiter)"),
    ("forceLinear", "--forceLinear", None),
    ("prefitUnconstrainedNuisanceUncertainty", "--prefitUnconstrainedNuisanceUncertainty", None),
    ("blindingGroup", "--blindingGroup", "fitlib blinds every POI and NOI with its own offset; --unblind NAME… unblinds them"),
    ("toysRandomizeParameters", "--toysRandomizeParameters", "fitlib starts every toy fit at the parameters' defaults"),
    ("POIMode", "--POIMode", "fitlib has rabbit's Mu model only (a POI μ per signal process); to fit without POIs, hold "
     "them at their defaults with --freezeParameters NAME…"),
    ("paramModel", "--paramModel", "fitlib has rabbit's Mu model only (a POI μ per signal process); for Ones (no POIs), "
     "hold them at their defaults with --freezeParameters NAME…"),
    ("compositeMapping", "--compositeMapping", "each -m mapping gets its own covariance (--computeHistCov); there is none "
     "across mappings"),
    ("regularization", "-r/--regularization", None),
    ("regularizationStrength", "--regularizationStrength", None),
    ("lCurveScan", "--lCurveScan", None),
    ("lCurveOptimize", "--lCurveOptimize", None),
    ("contourScan", "--contourScan", "--scan NAME… (the profile-likelihood scan; its Δ(2NLL) = 1 crossings are the "
     "interval)"),
    ("contourScan2D", "--contourScan2D", "--scan2D A B (rabbit has no 2D contour scan either)"),
    ("scanRangeUsePrefit", "--scanRangeUsePrefit", "--scanRange, in postfit σ"),
    ("prefitOnly", "--prefitOnly", "the prefit values and, with --saveHists, the prefit histograms are in every result"),
    ("computeHistImpacts", "--computeHistImpacts", None),
    ("computeHistGaussianImpacts", "--computeHistGaussianImpacts", None),
    ("computeSaturatedProjectionTests", "--computeSaturatedProjectionTests", None),
    ("externalPostfit", "--externalPostfit", None),
    ("externalPostfitResult", "--externalPostfitResult", None),
    ("noFit", "--noFit", None),
    ("noPostfitProfileBB", "--noPostfitProfileBB", None),
    ("gaussianGlobalImpacts", "--gaussianGlobalImpacts", "--globalImpacts (rabbit's likelihood-based global impacts; "
     "the Gaussian approximation's stat term differs)"),
    ("nonProfiledImpacts", "--nonProfiledImpacts", None),
    ("asymImpacts", "--asymImpacts", "--doImpacts (symmetric, from the Hessian)"),
    ("asymImpactsInclude", "--asymImpactsInclude", "--doImpacts (symmetric, from the Hessian)"),
    ("asymImpactsExclude", "--asymImpactsExclude", "--doImpacts (symmetric, from the Hessian)"),
    ("asymImpactsHess", "--asymImpactsHess", "--doImpacts (symmetric, from the Hessian)"),
    ("asymImpactsTol", "--asymImpactsTol", "--doImpacts (symmetric, from the Hessian)"),
    ("globalAsymImpacts", "--globalAsymImpacts", "--globalImpacts (symmetric)"),
    ("globalAsymImpactsInclude", "--globalAsymImpactsInclude", "--globalImpacts (symmetric)"),
    ("globalAsymImpactsExclude", "--globalAsymImpactsExclude", "--globalImpacts (symmetric)"),
    ("globalAsymImpactsSigma", "--globalAsymImpactsSigma", "--globalImpacts (symmetric)"),
    ("globalAsymImpactsLinearWarmstart", "--globalAsymImpactsLinearWarmstart", "--globalImpacts (symmetric)"),
)

# rabbit_fit's options that change no result of fitlib's (TensorFlow's settings, logging, what fitlib always does):
# accepted, and ignored with a note.
_IGNORED = (
    ("noColorLogger", "--noColorLogger", "fitlib-fit's messages have no colours"),
    ("eager", "--eager", "TensorFlow's eager mode; fitlib has no TensorFlow"),
    ("hvpMethod", "--hvpMethod", "TensorFlow's autodiff mode for Hessian-vector products; fitlib's are analytic"),
    ("jitCompile", "--jitCompile", "TensorFlow's XLA compilation; fitlib is compiled C++"),
    ("globalImpactsDisableJVP", "--globalImpactsDisableJVP", "how TensorFlow computes --globalImpacts; same numbers"),
    ("diagnostics", "--diagnostics", "rabbit's extra log lines; fitlib-fit always prints the EDM, and the results "
     "have it"),
    ("minimizerFtol", "--minimizerFtol", "L-BFGS-B's tolerance, which rabbit's trust-region methods ignore too"),
    ("fullNll", "--fullNll", "fitlib always computes the full -log(L) (nll_full)"),
)

# The histogram options fitlib-fit has, which rabbit_fit ignores without --saveHists: (dest, option).
_HIST_FLAGS = (
    ("computeHistErrorsPerProcess", "--computeHistErrorsPerProcess"),
    ("computeHistCov", "--computeHistCov"),
    ("computeVariations", "--computeVariations"),
    ("noChi2", "--noChi2"),
)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a translated command line does besides fitlib-fit's arguments: where the files go, and the notes."""

    tensor: str
    directory: pathlib.Path  # made before the fit, as rabbit_fit makes it
    fitlib_output: pathlib.Path  # fitlib's own results (fitlib-fit -o)
    rabbit_output: Optional[pathlib.Path]  # rabbit's fitresults layout; None with --noRabbitOutput
    json_output: Optional[pathlib.Path]  # fitlib-fit's JSON summary (--json)
    notes: tuple = ()  # one line each, for stderr: options accepted and ignored, or dropped as rabbit drops them


class _UnblindAction(argparse.Action):
    """--unblind [NAME…]: no names unblinds everything (rabbit stores ['.*'])."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, list(values) if values else [".*"])


def build_parser() -> argparse.ArgumentParser:
    """rabbit_fit's parser (the options of rabbit 0.2.5 and of rabbit's current rabbit_fit, with their defaults), with
    fitlib's own options added."""
    p = argparse.ArgumentParser(
        prog=PROG,
        usage="%(prog)s [options] filename",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.dedent("""\
            rabbit_fit's command line, run by fitlib: the fits of a rabbit input tensor
            by fitlib-fit, their results written twice:
              <DIR>/<outname>             rabbit's fitresults layout, as rabbit_fit names
                                          it (_<postfix> before the extension), for
                                          rabbit's plotting and printing scripts
              <DIR>/<stem>_fitlib.hdf5    fitlib's own results (<stem>: that name less
                                          its extension; docs/results-format.md), kept:
                                          the native result, with all that rabbit's
                                          layout has no place for"""),
        epilog=textwrap.dedent("""\
            Exit status (fitlib-fit's): 0 every fit converged; 3 a fit did not (its status
            is in the results, which are still converted); 2 bad input or an option
            fitlib does not have (nothing is run); 4 the results could not be written;
            1 the fitlib-fit program or the rabbit converter is missing (pip install
            'fitlib[rabbit]' installs the converter's packages).

            Differences from rabbit_fit: toys draw other random numbers; blinded values
            use fitlib's offsets; --saveHists writes the per-process histograms and the
            variances too (rabbit's --saveHistsPerProcess --computeHistErrors);
            --noHessian leaves every uncertainty NaN; -t takes one number of toys per
            run; lite bin-by-bin statistics leave processes without sumw2 alone, as
            rabbit since 2026-04 (--binByBinStatZeroVariance scale: rabbit 0.2.5's)."""),
    )
    p.add_argument("filename", nargs="?", help="the rabbit input tensor (HDF5, dense or sparse)")

    out = p.add_argument_group("output (rabbit_fit's)")
    out.add_argument("-o", "--output", "--outpath", dest="output", default="./", metavar="DIR",
                     help="directory of the results, made if missing (default: %(default)s)")
    out.add_argument("--outname", default="fitresults.hdf5", metavar="NAME",
                     help="name of rabbit's results file in it, .hdf5 added without an extension (default: %(default)s)")
    out.add_argument("-p", "--postfix", default=None, help="added as _POSTFIX before the extension of both results files")
    out.add_argument("-v", "--verbose", type=int, default=3, choices=[0, 1, 2, 3, 4],
                     help="3 (default) and 4 print fitlib-fit's progress; 0 to 2 only its warnings, errors and summary")

    fit = p.add_argument_group("rabbit_fit's options that fitlib runs")
    fit.add_argument("-t", "--toys", type=int, nargs="+", default=[-1], metavar="N",
                     help="fits: -1 the Asimov data set (default), 0 the data, N toys 1…N (one N per run)")
    fit.add_argument("--pseudoData", nargs="*", default=None, metavar="NAME",
                     help="fit the tensor's pseudodata sets of these names (none: all) instead of the data")
    fit.add_argument("--toysSystRandomize", default="frequentist", choices=["frequentist", "bayesian", "none"],
                     help="randomisation of the constraints in toys (default: %(default)s)")
    fit.add_argument("--toysDataRandomize", default="poisson", choices=["poisson", "normal", "none"],
                     help="fluctuation of the toys' data (default: %(default)s)")
    fit.add_argument("--toysDataMode", default="expected", choices=["expected", "observed"],
                     help="centre of the toys' data (default: %(default)s)")
    fit.add_argument("--seed", type=int, default=123456789, metavar="N",
                     help="seed of the toys (default: %(default)s; fitlib's random numbers are not rabbit's)")
    fit.add_argument("--expectSignal", nargs="+", action="append", default=None, metavar="NAME VALUE",
                     help="the default signal strength of a POI (repeatable); rabbit 0.2.5's --expectSignal VALUE sets "
                          "every POI's")
    fit.add_argument("--setConstraintMinimum", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="the constraint centre of a nuisance parameter (repeatable)")
    fit.add_argument("--freezeParameters", nargs="+", default=[], metavar="NAME",
                     help="parameters held at their defaults: names, or regular expressions matching whole names")
    fit.add_argument("--allowNegativePOI", "--allowNegativeParam", dest="allowNegativePOI", action="store_true",
                     help="POIs act linearly (μ = x), so they may be negative")
    fit.add_argument("--minimizerMethod", default="auto",
                     choices=["auto", *_TRUST_METHODS, "BFGS", "L-BFGS-B", "CG", "dogleg"],
                     help="auto (fitlib-fit's default, chosen by the cost of a dense Hessian), trust-krylov (rabbit's default), "
                          "trust-ncg, trust-exact, trust-gauss-newton or trust-gauss-newton-krylov; fitlib has no BFGS, "
                          "L-BFGS-B, CG or dogleg")
    fit.add_argument("--minimizerMaxiter", type=int, default=None, metavar="N", help="iteration limit (default: fitlib's, 200·parameters)")
    fit.add_argument("--minimizerGtol", type=float, default=None, metavar="X", help="stop when the gradient norm is below this")
    fit.add_argument("--chisqFit", action="store_true", help="χ² data term with the data variances")
    fit.add_argument("--covarianceFit", action="store_true", help="χ² data term with the tensor's data covariance")
    fit.add_argument("--noBinByBinStat", action="store_true", help="no bin-by-bin statistical uncertainties of the templates")
    fit.add_argument("--binByBinStatType", default="automatic",
                     choices=["automatic", "gamma", "normal-additive", "normal-multiplicative"],
                     help="their probability density (default: %(default)s, gamma, or normal with --covarianceFit)")
    fit.add_argument("--binByBinStatMode", default="lite", choices=["lite", "full"],
                     help="lite: one parameter per bin (default); full: one per bin and process")
    fit.add_argument("--minBBKstat", type=float, default=0.0, metavar="X",
                     help="hold the bin-by-bin parameters where the effective MC statistics are below this (default: 0)")
    fit.add_argument("--noHessian", action="store_true", help="no covariance, and so no uncertainties, impacts or scans")
    fit.add_argument("--noEDM", action="store_true",
                     help="rabbit skips the covariance and the EDM with it: fitlib's --noHessian, which computes neither")
    fit.add_argument("--doImpacts", action="store_true", help="impacts on the POIs and NOIs, per parameter and group")
    fit.add_argument("--globalImpacts", action="store_true", help="global impacts (shifted global observables)")
    fit.add_argument("--scan", nargs="*", default=None, metavar="NAME",
                     help="profile-likelihood scans of these parameters (no names: every free parameter)")
    fit.add_argument("--scan2D", nargs=2, action="append", default=None, metavar=("A", "B"),
                     help="a profile-likelihood scan over the grid of two parameters (repeatable)")
    fit.add_argument("--scanPoints", type=int, default=15, metavar="N", help="points per scan (default: %(default)s)")
    fit.add_argument("--scanRange", type=float, default=3.0, metavar="X", help="scan half-width in postfit σ (default: %(default)s)")
    fit.add_argument("--saveHists", action="store_true",
                     help="prefit and postfit histograms, summed and per process, with their variances")
    fit.add_argument("--saveHistsPerProcess", action="store_true", help="part of fitlib's --saveHists")
    fit.add_argument("--computeHistErrors", action="store_true", help="part of fitlib's --saveHists")
    fit.add_argument("--computeHistErrorsPerProcess", action="store_true",
                     help="with --saveHists: the variance of each process's yield")
    fit.add_argument("--computeHistCov", action="store_true", help="with --saveHists: the bins' covariance per channel")
    fit.add_argument("--computeVariations", action="store_true",
                     help="with --saveHists: the summed yields with each parameter moved by ±σ")
    fit.add_argument("--noChi2", action="store_true", help="with --saveHists: no χ² of the histograms against the data")
    fit.add_argument("-m", "--mapping", "--physicsModel", dest="mapping", nargs="+", action="append", default=[],
                     metavar="WORD",
                     help="with --saveHists, a mapping's histograms: Select, Project, Normalize or Ratio and their "
                          "arguments, as rabbit's (repeatable)")
    fit.add_argument("--unblind", nargs="*", action=_UnblindAction, default=[], metavar="NAME",
                     help="unblind the POIs and NOIs of data fits matching these names or regular expressions (none: all)")

    # rabbit's options that fitlib ignores or refuses: parsed with rabbit's shapes and defaults, so that a rabbit command
    # line parses as rabbit parses it, and listed in their groups' descriptions rather than one by one.
    hide = argparse.SUPPRESS
    ignored = p.add_argument_group(
        "rabbit_fit's options accepted and ignored (a note says so)",
        textwrap.fill(", ".join(flag for _, flag, _ in _IGNORED) + ", --contourLevels: TensorFlow's and the logger's "
                      "settings, and what fitlib always does", 78))
    ignored.add_argument("--noColorLogger", action="store_true", help=hide)
    ignored.add_argument("--eager", action="store_true", help=hide)
    ignored.add_argument("--diagnostics", action="store_true", help=hide)
    ignored.add_argument("--fullNll", action="store_true", help=hide)
    ignored.add_argument("--hvpMethod", default="revrev", choices=["fwdrev", "revrev"], help=hide)
    ignored.add_argument("--jitCompile", default="auto", choices=["auto", "on", "off"], help=hide)
    ignored.add_argument("--globalImpactsDisableJVP", action="store_true", help=hide)
    ignored.add_argument("--minimizerFtol", type=float, default=None, help=hide)
    ignored.add_argument("--contourLevels", type=float, nargs="+", default=None, help=hide)  # --contourScan's only

    refused = p.add_argument_group(
        "rabbit_fit's options fitlib does not have (refused, naming any alternative, unless at rabbit's default)",
        textwrap.fill(", ".join(flag for _, flag, _ in _REFUSED) + "; -m kinds other than " + ", ".join(_MAPPINGS) +
                      " and BaseMapping; --minimizerMethod BFGS, L-BFGS-B, CG, dogleg", 78))
    refused.add_argument("--earlyStopping", type=int, default=-1, help=hide)
    refused.add_argument("--forceLinear", action="store_true", help=hide)
    refused.add_argument("--prefitUnconstrainedNuisanceUncertainty", type=float, default=0.0, help=hide)
    refused.add_argument("--blindingGroup", nargs="*", default=[], help=hide)
    refused.add_argument("--toysRandomizeParameters", action="store_true", help=hide)
    refused.add_argument("--POIMode", default="mu", help=hide)  # rabbit 0.2.5's
    refused.add_argument("--paramModel", nargs="+", action="append", default=None, help=hide)  # Mu alone is accepted
    refused.add_argument("--compositeMapping", "--compositeModel", dest="compositeMapping", action="store_true", help=hide)
    refused.add_argument("-r", "--regularization", nargs="+", action="append", default=[], help=hide)
    refused.add_argument("--regularizationStrength", type=float, default=0.0, help=hide)
    refused.add_argument("--lCurveScan", action="store_true", help=hide)
    refused.add_argument("--lCurveOptimize", action="store_true", help=hide)
    refused.add_argument("--contourScan", nargs="*", default=None, help=hide)
    refused.add_argument("--contourScan2D", nargs="+", action="append", default=None, help=hide)
    refused.add_argument("--scanRangeUsePrefit", action="store_true", help=hide)
    refused.add_argument("--prefitOnly", action="store_true", help=hide)
    refused.add_argument("--computeHistImpacts", action="store_true", help=hide)
    refused.add_argument("--computeHistGaussianImpacts", action="store_true", help=hide)
    refused.add_argument("--computeSaturatedProjectionTests", action="store_true", help=hide)
    refused.add_argument("--externalPostfit", default=None, help=hide)
    refused.add_argument("--externalPostfitResult", default=None, help=hide)
    refused.add_argument("--noFit", action="store_true", help=hide)
    refused.add_argument("--noPostfitProfileBB", action="store_true", help=hide)
    refused.add_argument("--gaussianGlobalImpacts", action="store_true", help=hide)
    refused.add_argument("--nonProfiledImpacts", action="store_true", help=hide)
    refused.add_argument("--asymImpacts", action="store_true", help=hide)
    refused.add_argument("--asymImpactsInclude", nargs="+", default=None, help=hide)
    refused.add_argument("--asymImpactsExclude", nargs="+", default=None, help=hide)
    refused.add_argument("--asymImpactsHess", default="exact", help=hide)
    refused.add_argument("--asymImpactsTol", type=float, default=1e-6, help=hide)
    refused.add_argument("--globalAsymImpacts", action="store_true", help=hide)
    refused.add_argument("--globalAsymImpactsInclude", nargs="+", default=None, help=hide)
    refused.add_argument("--globalAsymImpactsExclude", nargs="+", default=None, help=hide)
    refused.add_argument("--globalAsymImpactsSigma", type=float, default=1.0, help=hide)
    refused.add_argument("--globalAsymImpactsLinearWarmstart", action="store_true", help=hide)

    own = p.add_argument_group("fitlib's own options (fitlib-fit --help)")
    own.add_argument("--noRabbitOutput", action="store_true",
                     help="write fitlib's results only (no conversion; wums, hist and h5py not needed)")
    own.add_argument("--json", action="store_true", help="also fitlib-fit's JSON summary, <DIR>/<stem>_fitlib.json")
    own.add_argument("-q", "--quiet", action="store_true", help="no per-iteration progress (as -v 2)")
    own.add_argument("--threads", type=int, default=None, metavar="N", help="threads, the bins split among them (fitlib's default, 0: every core)")
    own.add_argument("--replicaBatch", type=int, default=None, metavar="N", help="toys and --scan2D points minimised together")
    own.add_argument("--preconditioning", default=None, metavar="{none,diagonal,cholesky}",
                     help="change of variables from the prefit Hessian")
    own.add_argument("--minimizerEdmTol", type=float, default=None, metavar="X", help="stop when the EDM is below this")
    own.add_argument("--binByBinStatZeroVariance", default=None, metavar="{exclude,scale}",
                     help="lite mode, processes with sumw2 = 0: exclude (default, rabbit since 2026-04) or scale (rabbit 0.2.5)")
    own.add_argument("--systematicType", default=None, metavar="{log_normal,normal}",
                     help="how the tensor's logk act (default: what the tensor's meta says)")
    own.add_argument("--allowNegativeExpectation", action="store_true", help="accept negative nominal yields")
    own.add_argument("--hdf5PluginPath", default=None, metavar="DIR", help="directories of HDF5 filter plugins (Blosc2), searched first")
    own.add_argument("--maxMetaMiB", type=int, default=None, metavar="N", help="largest `meta` pickle read, in MiB")
    own.add_argument("--maxCompressionRatio", type=float, default=None, metavar="X", help="largest declared-to-stored size of a dataset")
    return p


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _rabbit_path(outdir: str, outname: str, postfix: Optional[str]) -> str:
    """The file rabbit_fit writes (rabbit's Workspace.get_file_path): DIR/NAME, .hdf5 added to a NAME without a dot,
    _POSTFIX before the extension."""
    path = os.path.join(outdir, outname)
    if "." not in outname:
        path += ".hdf5"
    if postfix is not None:
        head, ext = path.rsplit(".", 1)
        path = f"{head}_{postfix}.{ext}"
    return path


def tensor_signals(path: str) -> list:
    """The names of the tensor's signal processes (its POIs), for rabbit 0.2.5's --expectSignal VALUE."""
    try:
        import h5py

        with h5py.File(path, "r") as f:
            return [s.decode() if isinstance(s, bytes) else str(s) for s in f["hsignals"][...]]
    except Exception:  # h5py missing, or a dataset it cannot decode (a filter): fitlib reads the tensor itself
        import fitlib

        model = fitlib.read_rabbit(path)
        return list(model.parameter_names[: model.npoi])


def translate(argv: Optional[Sequence[str]] = None, *,
              signals: Optional[Callable[[str], list]] = None) -> tuple:
    """rabbit_fit's command line `argv` (without the program; sys.argv[1:] when None) as (fitlib-fit's arguments, Plan).

    Runs nothing and writes nothing; a malformed command line, or an option that fitlib does not have, exits through
    argparse (SystemExit 2, the message on stderr). `signals(tensor)` gives the POI names for rabbit 0.2.5's
    `--expectSignal VALUE` (default: tensor_signals, which reads the tensor; only called for a VALUE other than 1).
    """
    parser = build_parser()
    a = parser.parse_args(argv)
    notes = []

    # rabbit 0.2.5's --expectSignal VALUE takes one word and HEAD's NAME VALUE two; the tensor after either is
    # swallowed by the nargs="+" here, and given back.
    groups = []
    for g in a.expectSignal or []:
        if (len(g) > 1 and len(g) % 2 == 1) or (len(g) == 2 and _is_float(g[0]) and not _is_float(g[1])):
            if a.filename is not None:
                parser.error(f"unrecognized arguments: {g[-1]}")
            a.filename, g = g[-1], g[:-1]
        groups.append(g)
    if a.filename is None:
        parser.error("the following arguments are required: filename")

    # Refused: rabbit_fit's options that fitlib does not have, unless at their defaults.
    defaults = {d: parser.get_default(d) for d, _, _ in _REFUSED}
    for dest, flag, instead in _REFUSED:
        value = getattr(a, dest)
        if dest == "POIMode" and value == "mu":
            continue
        if dest == "paramModel" and value is not None and all(m == ["Mu"] for m in value):
            continue
        if value != defaults[dest]:
            parser.error(f"{flag}: fitlib does not have this option of rabbit_fit" + (f"; instead: {instead}" if instead else ""))
    if a.minimizerMethod not in ("auto", *_TRUST_METHODS):
        parser.error(f"--minimizerMethod {a.minimizerMethod}: fitlib minimises with trust-region methods only; instead: "
                     f"{', '.join(_TRUST_METHODS)} (trust-krylov is rabbit's default)")
    if a.minimizerMaxiter is not None and a.minimizerMaxiter < 1:
        parser.error(f"--minimizerMaxiter {a.minimizerMaxiter}: fitlib takes a positive iteration limit (its 0 is automatic)")

    # Accepted and ignored.
    for dest, flag, why in _IGNORED:
        if getattr(a, dest) != parser.get_default(dest):
            notes.append(f"{flag} ignored: {why}")
    if a.contourLevels is not None:
        notes.append("--contourLevels ignored: it is for --contourScan only")

    # The files, as rabbit_fit names its own.
    rabbit = _rabbit_path(a.output, a.outname, a.postfix)
    fitlib_output = pathlib.Path(os.path.splitext(rabbit)[0] + "_fitlib.hdf5")
    directory = pathlib.Path(os.path.dirname(rabbit) or ".")
    if a.output.endswith((".hdf5", ".h5")) and not os.path.isdir(a.output):
        notes.append(f"-o {a.output} is the directory of the results, as rabbit_fit's -o: they go to {rabbit}")

    out = [a.filename, "-o", str(fitlib_output)]
    if a.json:
        out.append("--json")
    if a.quiet or a.verbose <= 2:
        out.append("-q")
    if a.toys != [-1]:
        out += ["-t", *map(str, a.toys)]
    if a.pseudoData is not None:
        out += ["--pseudoData", *a.pseudoData]
    for dest in ("toysSystRandomize", "toysDataRandomize", "toysDataMode", "minimizerMethod", "binByBinStatType",
                 "binByBinStatMode"):
        if getattr(a, dest) != parser.get_default(dest):
            out += [f"--{dest}", getattr(a, dest)]
    if a.seed != 123456789:
        out += ["--seed", str(a.seed)]

    expect = []
    for g in groups:
        if len(g) == 1:  # rabbit 0.2.5: every POI
            if not _is_float(g[0]):
                parser.error(f"--expectSignal {g[0]}: give NAME VALUE, or rabbit 0.2.5's single VALUE for every POI")
            if float(g[0]) != 1.0 or expect:
                try:
                    names = (signals or tensor_signals)(a.filename)
                except Exception as e:
                    parser.error(f"--expectSignal {g[0]}: cannot read the POIs of '{a.filename}' ({e})")
                expect += [(name, g[0]) for name in names]
        else:  # NAME VALUE pairs
            for name, value in zip(g[::2], g[1::2]):
                if not _is_float(value):
                    parser.error(f"--expectSignal {name} {value}: VALUE '{value}' is not a number")
                expect.append((name, value))
    for name, value in expect:
        out += ["--expectSignal", name, value]
    for name, value in a.setConstraintMinimum:
        out += ["--setConstraintMinimum", name, value]
    if a.freezeParameters:
        out += ["--freezeParameters", *a.freezeParameters]
    if a.allowNegativePOI:
        out.append("--allowNegativePOI")
    if a.minimizerMaxiter is not None:
        out += ["--minimizerMaxiter", str(a.minimizerMaxiter)]
    if a.minimizerGtol is not None:
        out += ["--minimizerGtol", repr(a.minimizerGtol)]
    for flag in ("chisqFit", "covarianceFit", "noBinByBinStat", "doImpacts", "globalImpacts"):
        if getattr(a, flag):
            out.append(f"--{flag}")
    if a.minBBKstat != 0.0:
        out += ["--minBBKstat", repr(a.minBBKstat)]
    # rabbit HEAD's --noEDM skips the covariance with the EDM (with or without --noHessian): fitlib's --noHessian.
    if a.noHessian or a.noEDM:
        out.append("--noHessian")
    if a.scan is not None:
        out += ["--scan", *a.scan]
    for g in a.scan2D or []:
        out += ["--scan2D", *g]
    if a.scanPoints != 15:
        out += ["--scanPoints", str(a.scanPoints)]
    if a.scanRange != 3.0:
        out += ["--scanRange", repr(a.scanRange)]
    if a.unblind:
        out += ["--unblind"] if a.unblind == [".*"] else ["--unblind", *a.unblind]

    # The histograms: rabbit_fit ignores their options without --saveHists, and so does this.
    hist_given = [flag for dest, flag in _HIST_FLAGS if getattr(a, dest)]
    mappings = []
    for m in a.mapping:
        if m[0] in _BASE_MAPPINGS:
            if len(m) > 1:
                parser.error(f"-m {' '.join(m)}: {m[0]} takes no arguments")
            notes.append(f"-m {m[0]}: the channels' own histograms, which --saveHists always writes")
        elif m[0] in _MAPPINGS:
            mappings.append(m)
        else:
            parser.error(f"-m {m[0]}: fitlib does not have this mapping; it has {', '.join(_MAPPINGS)} (and the channels' "
                         "own histograms, rabbit's BaseMapping, with --saveHists)")
    if a.saveHists:
        out.append("--saveHists")
        out += hist_given
        for m in mappings:  # its words run to the next option in fitlib-fit: an option, or the end, follows
            out += ["-m", *m]
    else:
        dropped = hist_given + [f for f, on in (("--saveHistsPerProcess", a.saveHistsPerProcess),
                                                ("--computeHistErrors", a.computeHistErrors)) if on]
        dropped += ["-m " + " ".join(m) for m in mappings]
        if dropped:
            notes.append(f"{', '.join(dropped)} ignored without --saveHists, as rabbit_fit ignores them")

    # fitlib's own options.
    for dest in ("threads", "replicaBatch", "preconditioning", "minimizerEdmTol", "binByBinStatZeroVariance",
                 "systematicType", "hdf5PluginPath", "maxMetaMiB", "maxCompressionRatio"):
        value = getattr(a, dest)
        if value is not None:
            out += [f"--{dest}", repr(value) if isinstance(value, float) else str(value)]
    if a.allowNegativeExpectation:
        out.append("--allowNegativeExpectation")

    plan = Plan(
        tensor=a.filename,
        directory=directory,
        fitlib_output=fitlib_output,
        rabbit_output=None if a.noRabbitOutput else pathlib.Path(rabbit),
        json_output=fitlib_output.with_suffix(".json") if a.json else None,
        notes=tuple(notes),
    )
    return out, plan


def _same_file(a: pathlib.Path, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def main(argv: Optional[Sequence[str]] = None) -> int:
    """fitlib_fit's entry point: translate, run fitlib-fit, convert its results into rabbit's layout; the exit status."""
    fitlib_argv, plan = translate(argv)
    for note in plan.notes:
        print(f"{PROG}: note: {note}", file=sys.stderr)

    write_fitresults = None
    if plan.rabbit_output is not None:
        if _same_file(plan.rabbit_output, plan.tensor):
            print(f"{PROG}: error: the results file '{plan.rabbit_output}' is the input tensor; choose another -o or "
                  "--outname", file=sys.stderr)
            return 2
        # Checked before the fit, so that no fit's work is lost to a missing package (the packages too, in case
        # fitlib.rabbit imports them late).
        try:
            from fitlib.rabbit import write_fitresults

            missing = [m for m in _RABBIT_PACKAGES if importlib.util.find_spec(m) is None]
            if missing:
                raise ImportError(f"no module named {', '.join(missing)}")
        except ImportError as e:
            print(f"{PROG}: error: writing rabbit's fitresults layout needs fitlib.rabbit and the packages wums, hist and "
                  f"h5py ({e}): pip install 'fitlib[rabbit]', or pass --noRabbitOutput for fitlib's own results only",
                  file=sys.stderr)
            return 1
    try:
        from fitlib.program import executable

        program = executable()
    except Exception as e:  # not bundled (a build without the program), or not found
        print(f"{PROG}: error: the fitlib-fit program is missing ({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    try:
        plan.directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"{PROG}: error: -o/--output: cannot create the directory '{plan.directory}' ({e.strerror or e}); "
              "fitlib_fit's -o is a directory, as rabbit_fit's (the file's name is --outname)", file=sys.stderr)
        return 2

    try:
        rc = subprocess.call([os.fspath(program), *fitlib_argv])
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        print(f"{PROG}: error: cannot run fitlib-fit '{program}' ({e})", file=sys.stderr)
        return 1
    if rc < 0:  # killed by a signal: the shell's convention
        return 128 - rc
    if rc not in (0, 3) or write_fitresults is None:
        return rc
    fitlib_output, rabbit_output = os.fspath(plan.fitlib_output), os.fspath(plan.rabbit_output)
    try:
        try:  # rabbit's meta_info_input is the tensor's meta, which the tensor= copies
            import hdf5plugin  # noqa: F401  (h5py reads rabbit's Blosc-compressed meta with it)
        except ImportError:
            pass
        try:
            write_fitresults(fitlib_output, rabbit_output, tensor=plan.tensor)
        except Exception as e:
            print(f"{PROG}: note: the tensor's meta is not copied into rabbit's results ({type(e).__name__}: {e}); their "
                  "meta_info_input has the channels as fitlib's results describe them", file=sys.stderr)
            write_fitresults(fitlib_output, rabbit_output)
    except Exception as e:  # fitlib's results are complete: say where they are
        print(f"{PROG}: error: could not write rabbit's results '{rabbit_output}' ({type(e).__name__}: {e}); "
              f"fitlib's own results are in '{fitlib_output}'", file=sys.stderr)
        return 4
    print(f"{PROG}: rabbit's results written in file {plan.rabbit_output} (fitlib's: {plan.fitlib_output})")
    return rc


if __name__ == "__main__":
    sys.exit(main())
