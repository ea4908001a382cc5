# SPDX-License-Identifier: MIT
"""fitlib-plot: the standard plots of a results file (fitlib-fit -o RESULTS.hdf5) into a directory.

    fitlib-plot RESULTS.hdf5 -o OUTDIR [--fit data] [--style CMS|ATLAS] [--format png pdf]
                [--pulls] [--impacts] [--hists] [--correlation] [--scans] [--toys]

Without a choice of plots, every plot the file has the data for. Files are named <fit>_<plot>[_<what>].<format>
(e.g. data_impacts_signal.png, data_hist_postfit_ch0.pdf) and toys_pulls_<parameter>.<format>; each is printed as
it is written. Exit status 2 for a usage error (a plot asked for whose data the file lacks, with the fitlib-fit
option that makes them), 1 for a file that cannot be read or a plot that fails. A NOI's toy pulls that the file
cannot give (Bayesian toys: each toy's truth is its draw) are skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

__all__ = ["main"]

_PLOTS = ("pulls", "impacts", "hists", "correlation", "scans", "toys")


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fitlib-plot",
        description="The standard plots of a fitlib results file: pulls and impacts, prefit and postfit histograms, "
                    "the correlation matrix, likelihood scans and toy pulls.",
        epilog="Without a choice of plots, all that the file has data for. POIs are shown as the signal strength mu "
               "(the fit's coordinate is sqrt(mu) unless --allowNegativePOI); --fit-coordinates keeps x.")
    p.add_argument("results", help="a results file written by fitlib-fit -o RESULTS.hdf5")
    p.add_argument("-o", "--outdir", required=True, help="directory for the plots (made if missing)")
    p.add_argument("--fit", default=None, help="the fit to plot: data, asimov, toy1, … (default: data, else asimov, "
                                               "else the first fit that is no toy)")
    p.add_argument("--style", choices=["CMS", "ATLAS"], type=str.upper, default=None, help="mplhep's style and label")
    p.add_argument("--label", default=None, help="text beside the experiment's name with --style (default: Internal)")
    p.add_argument("--format", nargs="+", choices=["png", "pdf"], default=["png"], help="file formats (default: png)")
    p.add_argument("--top", type=int, default=30, help="parameters in the impacts ranking (default: 30)")
    p.add_argument("--fit-coordinates", action="store_true", help="POIs in the fit's coordinates instead of mu")
    p.add_argument("--dpi", type=float, default=100, help="PNG resolution: 100 gives each plot's nominal size")
    g = p.add_argument_group("plots (default: all the file has data for)")
    g.add_argument("--pulls", action="store_true", help="pulls and constraints of the constrained nuisances")
    g.add_argument("--impacts", action="store_true",
                   help="pulls with impacts, and grouped impacts, on each POI and NOI")
    g.add_argument("--hists", action="store_true", help="prefit and postfit histograms of each channel")
    g.add_argument("--correlation", action="store_true", help="the parameters' correlation matrix")
    g.add_argument("--scans", action="store_true", help="1-D and 2-D likelihood scans")
    g.add_argument("--toys", action="store_true", help="the toys' pull distributions")
    return p


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(name)).strip("_") or "_"


def _choose_fit(results, name):
    if name is not None:
        if name not in results.fits:
            raise _UsageError(f"{results.path} has no fit {name!r}; its fits are {_fit_list(results)}")
        return results.fits[name]
    from .plot import _default_fit_name

    try:
        return results.fits[_default_fit_name(results)]
    except KeyError:
        return None


def _fit_list(results) -> str:
    names = list(results.fits)
    toys = [n for n in names if n.startswith("toy") and n[3:].isdigit()]
    shown = [n for n in names if n not in toys]
    if toys:
        shown.append(f"toy1 … toy{len(toys)}")
    return ", ".join(shown) or "none"


def _jobs(results, fit, asked, args):
    """The plots to make, as (file stem, function, args, kwargs); raises _UsageError for a plot asked for without
    its data."""
    from . import plot

    explicit = bool(asked)
    asked = set(asked) if asked else set(_PLOTS)
    common = {"style": args.style, "label": args.label, "dpi": args.dpi}
    mu = {"mu": not args.fit_coordinates}
    jobs = []

    def need(what, ok, why):
        if not ok and explicit and what in asked:
            raise _UsageError(why)
        return ok and what in asked

    per_fit = {"pulls", "impacts", "hists", "correlation", "scans"} & asked
    if fit is None and explicit and per_fit:
        raise _UsageError(f"{results.path} has toys only; choose a fit with --fit (its fits are {_fit_list(results)})")
    if fit is not None:
        f = fit.name
        if need("pulls", bool(results.model.constrained.any()), "the model has no constrained nuisances to pull"):
            jobs.append((f"{f}_pulls", plot.pulls_and_impacts, (results,),
                         {"fit_name": f, "kind": None, "top": args.top, **mu, **common}))
        has_imp = fit.impacts is not None or fit.global_impacts is not None
        if need("impacts", has_imp, f"the {f} fit has no impacts: fitlib-fit --doImpacts writes them "
                                    "(--globalImpacts the global ones)"):
            for kind in ("impacts", "global_impacts"):
                imp = getattr(fit, kind)
                if imp is None:
                    continue
                for t in imp.targets:
                    kw = {"fit_name": f, "kind": kind, "target": t, "top": args.top, **mu, **common}
                    jobs.append((f"{f}_{kind}_{_safe(t)}", plot.pulls_and_impacts, (results,), kw))
                    jobs.append((f"{f}_{kind}_grouped_{_safe(t)}", plot.pulls_and_impacts, (results,),
                                 {**kw, "grouped": True}))
        if need("hists", fit.histograms is not None, f"the {f} fit has no histograms: fitlib-fit --saveHists writes "
                                                     "them (not for toys)"):
            for stage in ("prefit", "postfit"):
                if getattr(fit.histograms, stage) is None:
                    print(f"fitlib-plot: the {f} fit has no {stage} histograms (a blinded data fit keeps the prefit "
                          "ones only; fitlib-fit --unblind)", file=sys.stderr)
                    continue
                for c in results.model.channels:
                    jobs.append((f"{f}_hist_{stage}_{_safe(c.name)}", plot.histogram, (results, c.name),
                                 {"fit_name": f, "stage": stage, **common}))
        if need("correlation", fit.covariance is not None, f"the {f} fit has no covariance (fitlib-fit without "
                                                           "--noHessian computes it)"):
            jobs.append((f"{f}_correlation", plot.correlation, (results,), {"fit_name": f, **common}))
        if need("scans", bool(fit.scans) or bool(fit.scans2D), f"the {f} fit has no likelihood scans: fitlib-fit "
                                                              "--scan NAME and --scan2D A B write them"):
            for p in fit.scans:
                jobs.append((f"{f}_scan_{_safe(p)}", plot.scan, (results, p), {"fit_name": f, **mu, **common}))
            for s in fit.scans2D:
                a, b = s.parameters
                jobs.append((f"{f}_scan2D_{_safe(a)}_{_safe(b)}", plot.scan2d, (results, (a, b)),
                             {"fit_name": f, **mu, **common}))
    if need("toys", results.toys is not None, f"{results.path} has no toys: fitlib-fit -t N writes them"):
        for p in results.toys.parameters:
            jobs.append((f"toys_pulls_{_safe(p)}", plot.toy_pulls, (results, p), {**common, "_skippable": True}))
    return jobs


def main(argv=None) -> int:
    """fitlib-plot's command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        import matplotlib  # noqa: F401  (fitlib.plot draws on plain Figures: no GUI backend is involved)
    except ImportError:
        print("fitlib-plot: needs matplotlib (pip install fitlib[plot])", file=sys.stderr)
        return 1
    from .results import ResultsError, read_results

    try:
        results = read_results(args.results)
    except (OSError, ResultsError) as e:
        print(f"fitlib-plot: {e}", file=sys.stderr)
        return 1
    asked = [p for p in _PLOTS if getattr(args, p)]
    try:
        fit = _choose_fit(results, args.fit)
        jobs = _jobs(results, fit, asked, args)
    except _UsageError as e:
        print(f"fitlib-plot: {e}", file=sys.stderr)
        return 2
    if not jobs:
        print(f"fitlib-plot: nothing to plot in {args.results}", file=sys.stderr)
        return 2
    os.makedirs(args.outdir, exist_ok=True)
    for stem, fn, a, kw in jobs:
        paths = [os.path.join(args.outdir, f"{stem}.{fmt}") for fmt in args.format]
        skippable = kw.pop("_skippable", False)
        try:
            fn(*a, path=paths, **kw)
        except (ValueError, KeyError) as e:
            print(f"fitlib-plot: {stem}: {'skipped: ' if skippable else ''}{e}", file=sys.stderr)
            if skippable:
                continue
            return 1
        for p in paths:
            print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
