#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Runs SciPy's trust-ncg, trust-krylov and trust-exact and fitlib's counterparts on the same problems, and prints them side by side.
"""Side-by-side comparison of fitlib's trust-region minimizers with SciPy's.

    python3 benchmarks/compare_scipy.py [--build-dir build] [--repeats 3] [--max-seconds 60]
                                        [--blas-threads N] [--skip-build] [--only PROBLEM[/METHOD]]

Creates (if missing) a virtual environment `<build-dir>/venv-compare` with numpy and scipy and
re-executes itself inside it; configures and builds the C++ driver `fitlib_scipy_problems`
(benchmarks/scipy_problems.cpp) in `<build-dir>`; runs it and SciPy's `minimize` on the same
problems with SciPy's default options (initial_trust_radius 1, max_trust_radius 1000, eta 0.15,
gtol 1e-4); prints a table and, as its last line, `min_speedup_vs_scipy=<number>`.

Problems: rosen1000 (scipy.optimize.rosen, n = 1000, x0 = -1.2, 1, -1.2, 1, ...), quad50
(A, b, x0 from tests/data/scipy-trust-region/quad50_problem.json), quad2000 (1/2 x'Ax - b'x with
A_ij = 0.9^|i-j|, b_i = sin(i+1), x0 = 0). trust-ncg and trust-krylov get `hessp`, trust-exact
the dense `hess`. Each side's time is the best of `--repeats` complete minimisations, fewer when
the runs of one row have already taken `--max-seconds` (the slow trust-exact rows). NumPy's BLAS
runs on one thread unless `--blas-threads` says otherwise: fitlib's serial backend uses one core,
so the default compares like with like (and a multithreaded OpenBLAS slows down several-fold
whenever the other cores are busy).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from markdown import markdown_table  # benchmarks/markdown.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "scipy-trust-region"
DRIVER_TARGET = "fitlib_scipy_problems"
METHODS = ("trust-ncg", "trust-krylov", "trust-exact")
PROBLEMS = ("rosen1000", "quad50", "quad2000")
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default="build", help="CMake build directory, relative to the repository root (default: build)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per row and side; the best counts (default: 3)")
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="stop repeating a row once its runs on one side have taken this long (default: 60)")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="threads for NumPy's BLAS (sets OPENBLAS_NUM_THREADS etc.; default 1, as fitlib's serial "
                        "backend uses one core); 0 = the BLAS library's own default")
    p.add_argument("--skip-build", action="store_true", help="use the driver already built in the build directory")
    p.add_argument("--only", default="", help="run one problem or one problem/method, e.g. quad50 or quad50/trust-ncg")
    return p.parse_args()


# --------------------------------------------------------------------------------------------
# The virtual environment.

def in_venv(venv: Path) -> bool:
    return Path(sys.prefix).resolve() == venv.resolve()


def ensure_venv_and_reexec(args: argparse.Namespace) -> None:
    """Creates the venv with numpy and scipy if needed and re-executes this script inside it, with
    the BLAS thread count set in the environment (it must be set before numpy is imported)."""
    venv = (ROOT / args.build_dir / "venv-compare").resolve()
    env = dict(os.environ)
    if args.blas_threads > 0:
        for var in BLAS_THREAD_VARS:
            env[var] = str(args.blas_threads)
    if in_venv(venv) and all(os.environ.get(v) == env.get(v) for v in BLAS_THREAD_VARS):
        return
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"== creating virtual environment {venv}", flush=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if subprocess.run([str(python), "-c", "import numpy, scipy"], capture_output=True).returncode != 0:
        print("== installing numpy and scipy into the virtual environment", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "numpy", "scipy"], check=True)
    sys.stdout.flush()
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env)


# --------------------------------------------------------------------------------------------
# The fitlib side.

def build_driver(build_dir: Path) -> Path:
    jobs = str(os.cpu_count() or 2)
    print(f"== configuring and building {DRIVER_TARGET} in {build_dir}", flush=True)
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release", "-DFITLIB_BUILD_BENCHMARKS=ON"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build_dir), "--target", DRIVER_TARGET, "-j", jobs], check=True, stdout=subprocess.DEVNULL)
    return driver_path(build_dir)


def driver_path(build_dir: Path) -> Path:
    exe = build_dir / "benchmarks" / DRIVER_TARGET
    if not exe.exists():
        sys.exit(f"compare_scipy.py: {exe} not found; build the target {DRIVER_TARGET} (or drop --skip-build)")
    return exe


def run_driver(exe: Path, args: argparse.Namespace) -> dict[tuple[str, str], dict]:
    cmd = [str(exe), "--quad50", str(DATA / "quad50_problem.json"), "--repeats", str(args.repeats),
           "--max-seconds", str(args.max_seconds)]
    if args.only:
        cmd += ["--only", args.only]
    print("== running " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    rows = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            rows[(r["problem"], r["method"])] = r
        elif line:
            print("   driver: " + line, flush=True)
    return rows


# --------------------------------------------------------------------------------------------
# The SciPy side.

def problems():
    """(name, x0, minimize keyword arguments for trust-ncg/krylov, ... for trust-exact)."""
    import numpy as np
    from scipy.optimize import rosen, rosen_der, rosen_hess, rosen_hess_prod

    out = [("rosen1000", np.tile([-1.2, 1.0], 500),
            dict(fun=rosen, jac=rosen_der, hessp=rosen_hess_prod),
            dict(fun=rosen, jac=rosen_der, hess=rosen_hess))]

    def quadratic(A, b):
        def fun(x):  # one GEMV for f and g (jac=True)
            Ax = A @ x
            return 0.5 * (x @ Ax) - b @ x, Ax - b

        return (dict(fun=fun, jac=True, hessp=lambda x, p: A @ p),
                dict(fun=fun, jac=True, hess=lambda x: A))

    with open(DATA / "quad50_problem.json") as f:
        q = json.load(f)
    A = np.array(q["A"], dtype=float)
    b = np.array(q["b"], dtype=float)
    x0 = np.array(q.get("x0") or np.zeros(len(b)), dtype=float)
    out.append(("quad50", x0, *quadratic(A, b)))

    n = 2000
    idx = np.arange(n)
    A = np.ascontiguousarray(0.9 ** np.abs(idx[:, None] - idx[None, :]))
    b = np.sin(idx + 1.0)
    out.append(("quad2000", np.zeros(n), *quadratic(A, b)))
    return out


def run_scipy(name, x0, kw_hessp, kw_hess, args) -> dict[tuple[str, str], dict]:
    from scipy.optimize import minimize

    rows = {}
    for method in METHODS:
        if args.only and args.only not in (name, f"{name}/{method}"):
            continue
        kw = kw_hess if method == "trust-exact" else kw_hessp
        options = dict(initial_trust_radius=1.0, max_trust_radius=1000.0, eta=0.15, gtol=1e-4)
        best, spent, runs, res = float("inf"), 0.0, 0, None
        while runs < args.repeats and (runs == 0 or spent < args.max_seconds):
            t0 = time.perf_counter()
            res = minimize(x0=x0, method=method, options=options, **kw)
            dt = time.perf_counter() - t0
            best, spent, runs = min(best, dt), spent + dt, runs + 1
        rows[(name, method)] = dict(iterations=int(res.nit), f=float(res.fun), seconds=best, runs=runs, status=int(res.status),
                                    nfev=int(res.nfev), nhev=int(getattr(res, "nhev", 0) or 0), message=str(res.message))
        print(f"   scipy {name:9s} {method:12s} nit={res.nit:<6d} f={res.fun:.12g} t={best:.4g}s ({runs} run(s)) "
              f"status={res.status}", flush=True)
    return rows


# --------------------------------------------------------------------------------------------

def f_agree(a: float, b: float) -> bool:
    return abs(a - b) <= max(1e-6 * max(abs(a), abs(b)), 1e-10)


def fmt_seconds(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.3f} s"


def main() -> None:
    args = parse_args()
    ensure_venv_and_reexec(args)

    import numpy as np
    import scipy

    build_dir = (ROOT / args.build_dir).resolve()
    exe = driver_path(build_dir) if args.skip_build else build_driver(build_dir)

    threads = os.environ.get("OPENBLAS_NUM_THREADS", "the library's default")
    print(f"== python {sys.version.split()[0]}, numpy {np.__version__}, scipy {scipy.__version__}, "
          f"BLAS threads: {threads}, cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.2f}", flush=True)

    fitlib = run_driver(exe, args)
    print("== running SciPy", flush=True)
    scipy_rows = {}
    for name, x0, kw_hessp, kw_hess in problems():
        if args.only and not args.only.startswith(name):
            continue
        scipy_rows.update(run_scipy(name, x0, kw_hessp, kw_hess, args))

    header = ("problem", "method", "scipy iters", "fitlib iters", "scipy time", "fitlib time", "speedup", "f agree")
    table, speedups = [], []
    for problem in PROBLEMS:
        for method in METHODS:
            key = (problem, method)
            if key not in scipy_rows:
                continue
            s = scipy_rows[key]
            if key not in fitlib:
                table.append((problem, method, str(s["iterations"]), "skipped", fmt_seconds(s["seconds"]), "-", "-", "-"))
                continue
            fl = fitlib[key]
            speedup = s["seconds"] / fl["seconds"]
            speedups.append(speedup)
            table.append((problem, method, str(s["iterations"]), str(fl["iterations"]), fmt_seconds(s["seconds"]),
                          fmt_seconds(fl["seconds"]), f"{speedup:.1f}x", "yes" if f_agree(s["f"], fl["f"]) else "NO"))

    print()
    print("details: f (scipy | fitlib); scipy nfev/nhev; fitlib values/hvps (scipy-equivalent hessp)/hessians; runs timed")
    for problem in PROBLEMS:
        for method in METHODS:
            key = (problem, method)
            if key in scipy_rows and key in fitlib:
                s, fl = scipy_rows[key], fitlib[key]
                print(f"  {problem:9s} {method:12s} f {s['f']:.15g} | {fl['f']:.15g};  scipy {s['nfev']}/{s['nhev']};  "
                      f"fitlib {fl['values']}/{fl['hvps']} ({fl['scipy_hessp']})/{fl['hessians']};  runs {s['runs']}/{fl['runs']};  "
                      f"fitlib status: {fl['status']}")
    print()
    markdown_table(header, table)
    print()
    print(f"min_speedup_vs_scipy={min(speedups):.3g}" if speedups else "min_speedup_vs_scipy=nan")


if __name__ == "__main__":
    main()
