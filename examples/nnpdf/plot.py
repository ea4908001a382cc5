#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws the gluon and the singlet of a fit by nnpdf_dis_fit (examples/nnpdf/dis_fit.cpp): x*g and x*Sigma at
Q0 = 1.65 GeV over log x, every kept replica as a thin line, their mean and their 68 % band (16th to 84th
percentile over the kept replicas, as the fit wrote them to /pdf/<name>/{replicas,central,lower_68,upper_68}).

Run in the venv prepare.py makes (it has matplotlib):
    .venv-nnpdf/bin/python examples/nnpdf/plot.py [/tmp/nnpdf-prep/nnpdf_dis_fit.h5] [--out FILE.png]
The PNG goes beside the input (same name, .png) unless --out says otherwise: it shows a fit of GPL data, so keep it
out of the repository as the data are.
"""
import argparse
import os
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", default="/tmp/nnpdf-prep/nnpdf_dis_fit.h5", help="nnpdf_dis_fit's --out file")
    parser.add_argument("--out", help="the PNG to write (default: the input with .png)")
    args = parser.parse_args()

    # The modules first, with the remedy: prepare.py's venv has them.
    try:
        import numpy as np
        import h5py
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit(
            f"plot.py: {e.name} is missing in {sys.executable}; it needs numpy, h5py and matplotlib.\n"
            "run it in the venv prepare.py makes (python3 examples/nnpdf/prepare.py sets it up):\n"
            "    .venv-nnpdf/bin/python examples/nnpdf/plot.py FILE"
        )

    if not os.path.exists(args.file):
        sys.exit(f"plot.py: no file {args.file}; run nnpdf_dis_fit first (its --out)")
    out = args.out or os.path.splitext(args.file)[0] + ".png"

    panels = [("g", r"$x\,g(x, Q_0)$"), ("Sigma", r"$x\,\Sigma(x, Q_0)$")]
    with h5py.File(args.file, "r") as f:
        if "pdf" not in f or any(name not in f["pdf"] for name, _ in panels):
            sys.exit(f"plot.py: {args.file} has no /pdf/g or /pdf/Sigma: it is not an output of nnpdf_dis_fit")
        x = f["pdf/x"][:]
        kept = len(f["pdf/kept"])
        replicas = int(f["settings"].attrs["replicas"]) if "settings" in f else kept
        q0 = float(f["pdf"].attrs.get("Q0", 1.65))
        fig, axes = plt.subplots(1, len(panels), figsize=(11, 4.5))
        for ax, (name, label) in zip(axes, panels):
            g = f["pdf"][name]
            reps, central = g["replicas"][:], g["central"][:]
            lower, upper = g["lower_68"][:], g["upper_68"][:]
            for r in reps:
                ax.plot(x, r, color="tab:blue", alpha=0.15, lw=0.5)
            ax.fill_between(x, lower, upper, color="tab:orange", alpha=0.4, lw=0, label="68 % band (16th-84th percentile)")
            ax.plot(x, central, color="tab:red", lw=1.5, label="mean of the replicas")
            # The band sets the scale: single replicas may run far off at small x, where no data constrain them.
            span = upper.max() - lower.min()
            ax.set_ylim(min(0.0, lower.min() - 0.1 * span), upper.max() + 0.1 * span)
            ax.set_xscale("log")
            ax.set_xlim(x[0], x[-1])
            ax.set_xlabel("$x$")
            ax.set_ylabel(label)
            ax.axhline(0, color="grey", lw=0.5)
            ax.legend(loc="best", fontsize=8)
        fig.suptitle(f"NNPDF-style fit of proton DIS data at $Q_0$ = {q0:g} GeV: {kept} of {replicas} replicas kept")
        fig.tight_layout()
        fig.savefig(out, dpi=150)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
