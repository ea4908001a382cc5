# SPDX-License-Identifier: MIT
"""What the Python package costs over fitlib-fit: the same fit in-process (fitlib.fit), through fitlib.run (the bundled
program and reading its results back), and fitlib-fit itself, each the median of --repeat runs; and the per-call
overhead of fitlib.Likelihood (a value and gradient from Python) against the fit's own passes per second.

    build/venv-python/bin/python benchmarks/bench_python.py [TENSOR] [--repeat 5] [--json out.json]

Runs in the venv scripts/python-venv.sh makes (make python); fitlib-fit from FITLIB_FIT or build/. Ratios, not times,
are the figures: in-process / fitlib-fit (reading and fitting, its start-up included) and the Likelihood call against
one pass of the fit.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import fitlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def median_seconds(f, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tensor", nargs="?", default=str(ROOT / "examples" / "data" / "demo_analysis.hdf5"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    exe = os.environ.get("FITLIB_FIT", str(ROOT / "build" / "apps" / "fitlib-fit" / "fitlib-fit"))

    def in_process():
        fitlib.fit(fitlib.read_rabbit(args.tensor))

    def program():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([exe, args.tensor, "-t", "0", "--unblind", "-q", "-o", f"{tmp}/r.hdf5"], check=True, stdout=subprocess.DEVNULL)

    def run():
        fitlib.run(args.tensor, "-t", "0", "--unblind")

    model = fitlib.read_rabbit(args.tensor)
    result = fitlib.fit(model)
    lik = fitlib.Likelihood(model)
    calls = 200
    call = median_seconds(lambda: [lik.value_and_gradient(result.x) for _ in range(calls)], max(1, args.repeat // 2)) / calls
    passes = sum(result.evaluations[k] for k in ("values", "gradients", "hvps"))
    figures = {
        "tensor": args.tensor,
        "fitlib_version": fitlib.__version__,
        "python": sys.version.split()[0],
        "seconds": {"fitlib.fit (read + fit)": median_seconds(in_process, args.repeat),
                    "fitlib-fit (program)": median_seconds(program, args.repeat),
                    "fitlib.run (program + read_results)": median_seconds(run, args.repeat)},
        "likelihood_call_seconds": call,
        "fit_seconds_per_evaluation": result.seconds / passes,
    }
    s = figures["seconds"]
    figures["ratios"] = {"fitlib.fit / fitlib-fit": s["fitlib.fit (read + fit)"] / s["fitlib-fit (program)"],
                         "fitlib.run / fitlib-fit": s["fitlib.run (program + read_results)"] / s["fitlib-fit (program)"],
                         "Likelihood.value_and_gradient / the fit's evaluation": call / figures["fit_seconds_per_evaluation"]}
    for k, v in figures["seconds"].items():
        print(f"{k:40s} {v * 1e3:9.2f} ms")
    for k, v in figures["ratios"].items():
        print(f"{k:55s} {v:6.2f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
