#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Runs rabbit (WMass/rabbit, PyPI rabbit-fit) and fitlib-fit on the same input tensors and prints them side by side.
"""Side-by-side comparison of fitlib-fit with rabbit, the TensorFlow fitter it replaces.

    python3 benchmarks/compare_rabbit.py [--quick] [--threads 1] [--fitlib build/apps/fitlib-fit/fitlib-fit]
                                         [--keep DIR [--reuse-rabbit]] [--only REGEX] [--out FILE]
                                         [--realistic 400,2000] [--realistic-sparse 400]
                                         [--fitlib-variant NAME=ARGS ...] [--skip-rabbit REGEX] [--repeat N]
    python3 benchmarks/compare_rabbit.py --write-fixture tests/data/rabbit_fixture
    python3 benchmarks/compare_rabbit.py --update-fixture-nllvalfull tests/data/rabbit_fixture
    python3 benchmarks/compare_rabbit.py --update-fixture-hists tests/data/rabbit_fixture

Creates (or reuses) the virtual environment `.venv-rabbit` in the repository root with the pinned
packages of benchmarks/rabbit/requirements.txt (rabbit-fit, TensorFlow, hdf5plugin, h5py, hist,
numpy, ...) and re-executes itself inside it. Then:

1. writes input tensors with rabbit's own TensorWriter: rabbit's test tensor (its
   tests/make_tensor.py, shipped in the wheel; dense asymmetric, plus --sparse and --symmetrizeAll
   variants) and a grid of synthetic analyses (bins x systematics, 8 processes, log-normal
   systematics, MC-stat variances), dense, plus one sparse variant, and realistic analyses
   (realistic_400, realistic_2000 dense, realistic_400_sparse: 3 channels incl. a 2-D 40 x 50 one and
   a masked one, 10 processes of which 2 signals, mostly asymmetric shape systematics on subsets of
   processes and channels, weighted MC; tensors.write_realistic; --realistic / --realistic-sparse
   choose the systematics counts, '' for none; not with --quick). Numeric datasets are stored
   with Blosc2 (filter 32026, as rabbit's current TensorWriter does; --compression gzip keeps
   rabbit-fit 0.2.5's own gzip output);
2. fits each tensor with rabbit and with fitlib-fit in two configurations, "bb" (default
   bin-by-bin statistics) and "nobb" (--noBinByBinStat), both on data (-t 0 --unblind), with the
   same thread count (TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS / OMP_NUM_THREADS for
   TensorFlow and BLAS, --threads for fitlib-fit), timing each whole process; fitlib-fit gets hdf5plugin's
   filter directory as FITLIB_HDF5_PLUGIN_PATH (HDF5_PLUGIN_PATH is kept from both);
3. compares fitlib's JSON summary (RESULT.json next to RESULT.hdf5) with rabbit's output and
   prints one line per (tensor, configuration): bins, systematics, max |dx|/sigma, max |dsigma|/sigma
   (sigma = rabbit's uncertainty), |dNLL|, both wall times and their ratio, PASS/FAIL against
   |dx|/sigma < 1e-4, |dsigma|/sigma < 1e-4, |dNLL| < 1e-6; a missing or failing fitlib-fit is a
   FAIL of that row with its error. The last line is `min_speedup_vs_rabbit=<number>`;
4. prints a second table, the passes over the templates per fit: fitlib-fit's iterations and its
   JSON `evaluations` (values, gradients, HVPs, dense Hessians), their weighted total in template
   reads (PASS_WEIGHTS: a value with its gradient 1, an HVP 1, a dense Hessian 2, see
   fitlib_passes), the Hessian's cost in passes measured on the same tensor, rejected trust-region
   steps (from fitlib-fit's progress log), the EDM and status at the stop, and the CPU seconds of
   both programs with rabbit's iterations.

--fitlib-variant NAME=ARGS (repeatable) also runs fitlib-fit with ARGS added (e.g.
exact="--minimizerMethod trust-exact") on every (tensor, configuration), as row TENSOR/CONFIG:NAME
compared with the same rabbit run. --skip-rabbit REGEX runs only fitlib-fit on the rows it matches
(e.g. realistic_2000, where rabbit takes many minutes): they are reported "fitlib only".
--repeat N runs both programs N times on every row, alternating (rabbit, fitlib-fit, rabbit, ...),
and reports each program's median CPU and wall seconds (every run's are kept in the JSON as
cpu_samples and wall_samples): on a shared machine one run's seconds vary by 10 % or more.

--write-fixture DIR writes the small test fixture instead: rabbit's test tensor (dense and sparse,
each Blosc2- and gzip-compressed) and rabbit_results.json with rabbit's fits of it (run with
--fullNll, so each fit also records rabbit's full NLL `nllvalfull`), plus README.md.

--update-fixture-nllvalfull DIR leaves the tensors in DIR as they are (rewriting them changes their
bytes: the meta pickle holds a time stamp) and only adds `nllvalfull` to each fit of DIR's
rabbit_results.json: it checks each tensor's SHA-256 against the JSON, refits it with the fit's
recorded command plus --fullNll, requires the recorded fit back (|dNLL| <= 1e-9, |dx| <= 1e-6 sigma),
and records rabbit's full NLL and the command that produced it.

--update-fixture-hists DIR also leaves the tensors as they are and writes DIR/rabbit_hists.json: it
refits every recorded (tensor, configuration) of DIR/rabbit_results.json with the fit's recorded
command plus --saveHists --saveHistsPerProcess --computeHistErrors, requires the recorded postfit
vector back (each parameter to 1e-12 relative), and stores rabbit's histograms of that fit (read
with rabbit.io_tools): per channel the observed data and its variance, the prefit and postfit
predictions summed over processes with their variances, and the prefit and postfit predictions of
each process, each flattened row-major like the tensor's bins, and rabbit's linear chi2 and ndf of
the prefit and postfit predictions against the data (Basemodel: all unmasked channels together). For
rabbit's test tensor (dense) in configuration "bb" only, a second refit adds --computeVariations (it
must give the same fit, histograms and chi2 bit for bit) and stores per channel rabbit's prefit and
postfit predictions with each parameter varied down and up by its uncertainty,
[bin][parameter][down, up].
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from markdown import markdown_table  # benchmarks/markdown.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
HELPERS = ROOT / "benchmarks" / "rabbit"
REQUIREMENTS = HELPERS / "requirements.txt"
DEFAULT_VENV = ROOT / ".venv-rabbit"
DEFAULT_FITLIB = "build/apps/fitlib-fit/fitlib-fit"
STAMP = ".compare_rabbit_requirements.sha256"

GRID_BINS = (100, 1000, 10000)
GRID_SYSTS = (10, 100, 1000)
SPARSE_POINT = (10000, 1000)
REALISTIC_SYSTS = (400, 2000)
REALISTIC_SPARSE_SYSTS = (400,)
CONFIGS = ("bb", "nobb")
TARGET_DX, TARGET_DSIGMA, TARGET_DNLL = 1e-4, 1e-4, 1e-6
THREAD_VARS = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "MKL_NUM_THREADS")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="See the module docstring (head of this file) for what is run.")
    p.add_argument("--quick", action="store_true", help="only rabbit's test tensor and the smallest grid point")
    p.add_argument("--threads", type=int, default=1, help="threads for both fitters (default 1)")
    p.add_argument("--fitlib", default=DEFAULT_FITLIB,
                   help=f"path of the fitlib-fit binary, relative to the repository root (default {DEFAULT_FITLIB})")
    p.add_argument("--keep", metavar="DIR", help="keep tensors and results in DIR (and reuse tensors found there)")
    p.add_argument("--reuse-rabbit", action="store_true",
                   help="with --keep: reuse rabbit results found in DIR for the same tensor and thread count")
    p.add_argument("--only", metavar="REGEX", default="",
                   help="run only rows whose name (e.g. rabbit_test/bb, synth_b1000_s100/nobb) matches REGEX (re.search)")
    p.add_argument("--out", metavar="FILE", help="write the table (and environment) as JSON to FILE")
    p.add_argument("--grid", metavar="BxS,...", default="",
                   help="grid points to run instead of the default bins {100,1000,10000} x systs {10,100,1000}")
    p.add_argument("--sparse-point", metavar="BxS", default=f"{SPARSE_POINT[0]}x{SPARSE_POINT[1]}",
                   help="grid point also written with sparse=True ('' for none; default %(default)s)")
    p.add_argument("--realistic", metavar="NSYST,...", default=",".join(map(str, REALISTIC_SYSTS)),
                   help="systematics counts of the realistic analyses, dense ('' for none; default %(default)s; "
                        "not with --quick)")
    p.add_argument("--realistic-sparse", metavar="NSYST,...", default=",".join(map(str, REALISTIC_SPARSE_SYSTS)),
                   help="realistic analyses also written with sparse=True ('' for none; default %(default)s)")
    p.add_argument("--fitlib-variant", metavar="NAME=ARGS", action="append", default=[],
                   help="also run fitlib-fit with ARGS (split like a shell) added, as row TENSOR/CONFIG:NAME against the "
                        "same rabbit fit; repeatable (e.g. exact='--minimizerMethod trust-exact')")
    p.add_argument("--skip-rabbit", metavar="REGEX", default="",
                   help="rows (TENSOR/CONFIG) on which only fitlib-fit runs, e.g. realistic_2000 (reported 'fitlib only')")
    p.add_argument("--compression", choices=("blosc2", "gzip"), default="blosc2",
                   help="numeric datasets of the tensors: blosc2 (rabbit's current writer, default) or gzip "
                        "(what rabbit-fit 0.2.5's TensorWriter writes)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run each fitter N times, alternating, and report the median CPU and wall seconds "
                        "(every run's seconds are kept in the JSON; default 1)")
    p.add_argument("--rabbit-timeout", type=float, default=1800, help="seconds before a rabbit run is abandoned")
    p.add_argument("--fitlib-timeout", type=float, default=1800, help="seconds before a fitlib-fit run is abandoned")
    p.add_argument("--write-fixture", metavar="DIR", help="write the rabbit fixture for `make test` into DIR and exit")
    p.add_argument("--update-fixture-nllvalfull", metavar="DIR",
                   help="add rabbit's full NLL (nllvalfull) to the fits of DIR/rabbit_results.json without rewriting "
                        "the tensors, and exit")
    p.add_argument("--update-fixture-hists", metavar="DIR",
                   help="refit the fits of DIR/rabbit_results.json with --saveHists and write rabbit's prefit/postfit "
                        "histograms to DIR/rabbit_hists.json (the tensors are left as they are), and exit")
    p.add_argument("--venv", default=str(DEFAULT_VENV), help="virtual environment to create/use (default %(default)s)")
    p.add_argument("--strict", action="store_true", help="exit with status 1 if any row FAILs")
    return p.parse_args()


# --------------------------------------------------------------------------------------------
# The virtual environment.

def in_venv(venv: Path) -> bool:
    return Path(sys.prefix).resolve() == venv.resolve()


def ensure_venv_and_reexec(args: argparse.Namespace) -> None:
    """Creates the venv and installs the pinned requirements if they changed since the last
    install (a hash of requirements.txt is stamped into the venv), then re-executes this script
    inside it."""
    venv = Path(args.venv).resolve()
    if in_venv(venv):
        return
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"== creating virtual environment {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = venv / STAMP
    if not stamp.exists() or stamp.read_text().strip() != want:
        print(f"== installing {REQUIREMENTS.relative_to(ROOT)} into {venv} (TensorFlow: a few minutes)", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True)
        stamp.write_text(want + "\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    sys.stdout.flush()
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env)


def versions() -> dict:
    """Versions of the packages that matter for the comparison."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for dist in ("rabbit-fit", "tensorflow", "tensorflow-probability", "tf-keras", "numpy", "scipy", "wums", "h5py",
                 "hdf5plugin", "hist", "boost-histogram"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def fitter_env(threads: int, plugin_path: bool) -> dict:
    """Environment of a fitter process: the thread counts and, for fitlib-fit, FITLIB_HDF5_PLUGIN_PATH =
    hdf5plugin's filter directory (Blosc2). Neither gets HDF5_PLUGIN_PATH: rabbit's h5py already
    registers hdf5plugin's filters on import, and the dynamically loaded second copy makes
    writing the Blosc-compressed result pickle fail ("error during user callback")."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1", CUDA_VISIBLE_DEVICES="")
    env.pop("HDF5_PLUGIN_PATH", None)
    if plugin_path:
        import hdf5plugin

        env["FITLIB_HDF5_PLUGIN_PATH"] = hdf5plugin.PLUGINS_PATH
    for var in THREAD_VARS:
        env[var] = str(threads)
    return env


def busy_cores(interval: float = 0.3) -> float | None:
    """Cores kept busy by other processes, from /proc/stat over `interval` seconds (None off Linux)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait

    try:
        t0, i0 = sample()
        time.sleep(interval)
        t1, i1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return (os.cpu_count() or 1) * (1.0 - (i1 - i0) / max(t1 - t0, 1))


def run_timed(cmd: list[str], env: dict, log: Path, timeout: float) -> tuple[int | None, float, float, str]:
    """Runs cmd with stdout+stderr to `log`; returns (exit code or None on timeout, wall seconds,
    CPU seconds (user+sys of the child), error text). CPU ≈ wall means one busy thread. Warns when
    other processes keep the cores busy just before the run (their timings would be disturbed)."""
    busy = busy_cores()
    if busy is not None and busy > 0.3:
        print(f"   (other processes busy on {busy:.1f} cores before {Path(cmd[0]).name}: timings may be disturbed)",
              flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc, err = None, ""
    try:
        with open(log, "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        err = f"timed out after {timeout:.0f} s"
    except OSError as ex:
        err = f"could not run {cmd[0]}: {ex}"
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if rc not in (None, 0):
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.exists() else []
        err = f"exit code {rc}: {lines[-1][:300] if lines else 'no output'} (log: {log})"
    return rc, wall, cpu, err


# --------------------------------------------------------------------------------------------
# Tensors.

def tensor_specs(args: argparse.Namespace) -> list[dict]:
    """The tensors to fit, in order: name, kind ("test" or "synthetic") and generation parameters."""
    specs = [dict(name="rabbit_test", kind="test", sparse=False, symmetrize_all=False)]
    if not args.quick:
        specs += [dict(name="rabbit_test_sparse", kind="test", sparse=True, symmetrize_all=False),
                  dict(name="rabbit_test_symmetric", kind="test", sparse=False, symmetrize_all=True)]
    if args.grid:
        points = [tuple(int(v) for v in item.lower().split("x")) for item in args.grid.split(",") if item]
    elif args.quick:
        points = [(GRID_BINS[0], GRID_SYSTS[0])]
    else:
        points = [(b, s) for b in GRID_BINS for s in GRID_SYSTS]
    for b, s in points:
        specs.append(dict(name=f"synth_b{b}_s{s}", kind="synthetic", nbins=b, nsyst=s, sparse=False))
    if args.sparse_point and not args.quick:
        b, s = (int(v) for v in args.sparse_point.lower().split("x"))
        specs.append(dict(name=f"synth_b{b}_s{s}_sparse", kind="synthetic", nbins=b, nsyst=s, sparse=True))
    if not args.quick:
        import tensors

        for counts, sparse in ((args.realistic, False), (args.realistic_sparse, True)):
            for s in (int(v) for v in counts.split(",") if v.strip()):
                specs.append(dict(name=tensors.realistic_name(s, sparse), kind="realistic", nsyst=s, sparse=sparse,
                                  seed=tensors.realistic_seed(s)))
    return specs


def produce_tensor(spec: dict, tensor_dir: Path, compression: str, rabbit_version: str) -> Path:
    """Writes (or, if an identical one is already there, reuses) the tensor of `spec`."""
    import tensors

    path = tensor_dir / f"{spec['name']}.hdf5"
    want = dict(spec, compression=compression, rabbit_fit=rabbit_version)
    if tensors.read_sidecar(path) == want:
        print(f"   reusing {path}", flush=True)
        return path
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=tensor_dir) as tmp:
        raw = Path(tmp) / "raw.hdf5"
        if spec["kind"] == "test":
            raw = tensors.write_test_tensor(Path(tmp), "raw", sparse=spec["sparse"], symmetrize_all=spec["symmetrize_all"])
        elif spec["kind"] == "realistic":
            info = tensors.write_realistic(raw, spec["nsyst"], sparse=spec["sparse"], seed=spec["seed"])
            print(f"   {spec['name']}: {info['unconstrained']} unconstrained, {info['norm']} normalisation "
                  f"({info['norm_asymmetric']} asymmetric), {info['shape']} shape ({info['shape_asymmetric']} asymmetric, "
                  f"{info['eta_slice']} on an eta slice) systematics; MC/data relative uncertainty per bin "
                  + ", ".join(f"{ch} {c['mean_mc_rel_unc']:.3f}/{c['mean_data_rel_unc']:.3f}"
                              for ch, c in info["channels"].items()), flush=True)
        else:
            tensors.write_synthetic(raw, spec["nbins"], spec["nsyst"], sparse=spec["sparse"])
        if compression == "gzip":
            shutil.move(raw, path)
        else:
            tensors.recompress(raw, path, compression)
    tensors.write_sidecar(path, want)
    print(f"   wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, {time.perf_counter() - t0:.1f} s)", flush=True)
    return path


def tensor_shape(path: Path) -> dict:
    """Unmasked bins, all bins, processes, systematics and storage of a tensor file."""
    import h5py

    with h5py.File(path, "r") as f:
        sparse = "hnorm" not in f
        norm_shape = f["hnorm_sparse"].attrs["dense_shape"] if sparse else f["hnorm"].attrs["original_shape"]
        return dict(bins=int(f["hdata_obs"].shape[0]), bins_full=int(norm_shape[0]), procs=int(norm_shape[1]),
                    systs=int(f["hsysts"].shape[0]), sparse=sparse)


# --------------------------------------------------------------------------------------------
# rabbit.

def rabbit_command(tensor: Path, outdir: Path, config: str, full_nll: bool = False) -> list[str]:
    """rabbit's command line for a data fit (-t 0 --unblind) with default options; -v 4 only adds
    debug logging, from which the per-fit time and the iterations are read. `full_nll` adds --fullNll:
    after the fit rabbit also evaluates and stores its full NLL (nllvalfull); the fit is the same."""
    exe = Path(sys.prefix) / "bin" / "rabbit_fit"
    cmd = [str(exe), str(tensor), "-t", "0", "--unblind", "-o", str(outdir), "--outname", "fitresults.hdf5",
           "-v", "4", "--noColorLogger"]
    if config == "nobb":
        cmd.append("--noBinByBinStat")
    if full_nll:
        cmd.append("--fullNll")
    return cmd


def read_rabbit_nllvalfull(path: Path, fit: str = "data") -> float | None:
    """rabbit's full NLL (`nllvalfull`, stored with --fullNll) of one fit in its output file, or None."""
    from rabbit import io_tools
    import results

    key = results.RABBIT_FIT_KEYS.get(fit, fit)
    res = io_tools.get_fitresult(str(path), result=key.removeprefix("results_") if key != "results" else None)
    return float(res["nllvalfull"]) if "nllvalfull" in res else None


def parse_rabbit_log(text: str) -> dict:
    """Timing and minimiser information from rabbit's debug log."""
    def number(pattern):
        m = re.search(pattern, text)
        return float(m.group(1)) if m else None

    losses = re.findall(r"Iteration (\d+): loss value (\S+)", text)
    msg = re.search(r"message: (.*)", text)
    # scipy's trust-krylov with gtol=0 may stop improving long before it stops iterating (NaN trial
    # steps are neither accepted nor end the loop, so it runs to maxiter = 200 * len(x)); the
    # iteration at which the final loss was first reached tells how long the real fit took
    reached = next((int(i) + 1 for i, v in losses if v == losses[-1][1]), None) if losses else None
    return dict(total_seconds=number(r"([\d.]+) seconds total time"),
                init_seconds=number(r"([\d.]+) seconds initialization time"),
                fit_seconds=number(r"([\d.]+) seconds for fit\b"),
                iterations=int(losses[-1][0]) + 1 if losses else None,
                iterations_to_final_loss=reached,
                minimizer_message=msg.group(1).strip() if msg else None,
                hit_maxiter=bool(msg and "Maximum number of iterations" in msg.group(1)))


def run_rabbit(tensor: Path, outdir: Path, config: str, threads: int, timeout: float, full_nll: bool = False) -> dict:
    """Runs rabbit once and extracts its data fit (with `full_nll`, also fit["nllvalfull"]); never
    raises (errors go to 'error')."""
    import results

    outdir.mkdir(parents=True, exist_ok=True)
    out = outdir / "fitresults.hdf5"
    if out.exists():
        out.unlink()
    cmd = rabbit_command(tensor, outdir, config, full_nll)
    rc, wall, cpu, err = run_timed(cmd, fitter_env(threads, plugin_path=False), outdir / "rabbit.log", timeout)
    row = dict(command=cmd, wall_seconds=wall, cpu_seconds=cpu, threads=threads, error=err or None)
    if (outdir / "rabbit.log").exists():
        row.update(parse_rabbit_log((outdir / "rabbit.log").read_text(errors="replace")))
    if rc == 0:
        try:
            row["fit"] = results.read_rabbit(out, "data")
            if full_nll:
                row["fit"]["nllvalfull"] = read_rabbit_nllvalfull(out, "data")
        except Exception as ex:  # noqa: BLE001 - report, don't crash
            row["error"] = f"reading {out}: {type(ex).__name__}: {ex}"
    return row


def rabbit_cached(outdir: Path, tensor_sha: str, config: str, threads: int) -> dict | None:
    summary = outdir / "summary.json"
    if not summary.exists():
        return None
    try:
        row = json.loads(summary.read_text())
    except json.JSONDecodeError:
        return None
    ok = row.get("tensor_sha256") == tensor_sha and row.get("config") == config and row.get("threads") == threads
    return row if ok and not row.get("error") else None


# --------------------------------------------------------------------------------------------
# fitlib.

def fitlib_command(exe: Path, tensor: Path, result: Path, config: str, threads: int, extra: list[str] = ()) -> list[str]:
    cmd = [str(exe), str(tensor), "-t", "0", "--unblind", "-o", str(result), "--json", "--threads", str(threads)]
    if config == "nobb":
        cmd.append("--noBinByBinStat")
    return cmd + list(extra)


# Template reads per counted evaluation of fitlib-fit's JSON `evaluations`, in its host shard
# (include/fitlib/likelihood/shard.hpp, likelihood.hpp; minimize/trust_region.hpp, fit.hpp):
# * a value streams the templates once (Shard::partials walks the bins once, the forward products
#   K·x of each bin's cells while its rows are in cache);
# * its gradient adds no read: the trust region only ever asks for value_grad, which runs the
#   backward products Kᵀu in the same walk, so `values` == `gradients` and the pair is one pass
#   (a gradient counted without a value would be one more pass: passes take max(values, gradients));
# * an HVP is one pass (forward K·v, the iterate's K·x reused from the forward cache, and the
#   backward products in the same walk); GLTR, Steihaug CG and the EDM's CG ask for one direction
#   per call, so one HVP = one pass;
# * a dense Hessian is two passes where it has a cell term (log-normal systematics, as in every tensor
#   here, or full-mode multiplicative β; one pass without): each shard's hessian() walks the bins for
#   the bin rows J_b (1 or 2 per bin × nparams columns, ~rows·n² flops for the lower triangle), then
#   each process's cells for their effective rows E = K + H·diag(g') over the m_p systematics that act
#   on the process (~cells·m_p² flops); those GEMMs, not the reads, are its cost at n in the hundreds,
#   which is why the table also gives the Hessian's measured cost in passes (hessian_weight). The
#   minimizer asks for the matrix alone at an iterate whose value and gradient it holds, and so does
#   the postfit covariance at the last iterate (objective_with_bare_hessian); only a prefit Hessian
#   (--preconditioning) comes with a value+gradient walk of its own, one pass more;
# * a Gauss–Newton matrix (--minimizerMethod trust-gauss-newton) reads as the dense Hessian's bin rows
#   do, one pass, and has no cell term: its measured cost is gauss_newton_weight.
# The counts include the postfit Hessian (1) and, with --preconditioning, the prefit one.
PASS_WEIGHTS = dict(value=1, gradient_with_its_value=0, gradient_alone=1, hvp=1, hessian=2, gauss_newton=1, prefit_hessian_value=1)
PASS_WEIGHTS_TEXT = ("passes = max(values, gradients) + HVPs + 2 x Hessians + Gauss-Newton matrices (+ 1 with --preconditioning) "
                     "(template reads: a value and its gradient share one pass, an HVP is one pass, a dense Hessian two (its "
                     "bin rows, then its cells by process), a Gauss-Newton matrix one; their GEMMs come on top: pass-equiv. "
                     "weighs each by its measured time in passes instead)")


def preconditioned(args) -> bool:
    """Whether fitlib-fit's arguments ask for a prefit Hessian (--preconditioning other than none)."""
    args = list(args)
    for i, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("--preconditioning=") else args[i + 1] if a == "--preconditioning" and i + 1 < len(args) else None
        if value is not None:
            return value != "none"
    return False


def fitlib_passes(fit: dict, prefit_hessian: bool = False) -> dict:
    """fitlib-fit's evaluation counts (JSON `evaluations`) and their weighted total in template reads."""
    ev = fit.get("evaluations") or {}
    v, g, h, H, G = (int(ev.get(k, 0)) for k in ("values", "gradients", "hvps", "hessians", "gauss_newton"))
    return dict(iterations=fit.get("iterations"), values=v, gradients=g, hvps=h, hessians=H, gauss_newton=G,
                passes=max(v, g) + PASS_WEIGHTS["hvp"] * h + PASS_WEIGHTS["hessian"] * H + PASS_WEIGHTS["gauss_newton"] * G
                + (PASS_WEIGHTS["prefit_hessian_value"] if prefit_hessian else 0))


def parse_fitlib_log(text: str) -> dict:
    """Rejected trust-region steps (lines marked '(rejected)' plus folded runs '… N more steps
    rejected') and the stop line of fitlib-fit's progress output on stderr."""
    rejected = len(re.findall(r"\(rejected\)", text))
    rejected += sum(int(n) for n in re.findall(r"(\d+) more steps? rejected", text))
    stop = re.findall(r"^stopped: (.*)$", text, re.M)
    return dict(rejected_steps=rejected, stop=stop[-1].strip() if stop else None)


def run_fitlib(exe: Path, tensor: Path, outdir: Path, config: str, threads: int, timeout: float,
               extra: list[str] = (), tag: str | None = None) -> dict:
    """Runs fitlib-fit once (with `extra` arguments; its files are named `tag`, default the config)
    and reads its JSON summary; never raises (errors go to 'error')."""
    import results

    tag = tag or config
    outdir.mkdir(parents=True, exist_ok=True)
    result = outdir / f"{tag}.hdf5"
    summary = result.with_suffix(".json")
    for stale in (result, summary):
        if stale.exists():
            stale.unlink()
    cmd = fitlib_command(exe, tensor, result, config, threads, extra)
    row = dict(command=cmd, error=None)
    if not exe.exists():
        row["error"] = f"fitlib-fit not found at {exe} (build it, or pass --fitlib)"
        return row
    log = outdir / f"{tag}.log"
    rc, wall, cpu, err = run_timed(cmd, fitter_env(threads, plugin_path=True), log, timeout)
    row.update(wall_seconds=wall, cpu_seconds=cpu)
    if log.exists():
        row.update(parse_fitlib_log(log.read_text(errors="replace")))
    if rc not in (0, 3):  # 3: a fit that did not converge, whose results are still written
        row["error"] = err
        return row
    try:
        fit = results.read_fitlib_json(summary, "data")
    except ValueError as ex:
        row["error"] = str(ex)
        return row
    timing = fit.get("timing") or {}
    row.update(fit=fit, status=fit.get("status"), converged=fit.get("converged"), edm=fit.get("edm"),
               total_seconds=timing.get("total_seconds"), minimize_seconds=timing.get("minimize_seconds"),
               postfit_seconds=timing.get("postfit_seconds"), passes=fitlib_passes(fit, preconditioned(extra)))
    if rc != 0:  # still a FAIL of the row, with its counts recorded
        row["error"] = f"{err}; status {fit.get('status')}"
    return row


def hessian_weights(rows: list[dict]) -> None:
    """The cost of one dense Hessian in passes, measured per (tensor, configuration) from the rows'
    minimisation times (fitlib-fit's `minimize_seconds`, which covers the minimiser and the
    covariance's Hessian and inversion, not reading or writing): a least-squares fit of
    minimize_seconds = P·t_pass + H·t_hessian + G·t_gauss_newton over the rows of that tensor, with
    P = max(values, gradients) + HVPs, H = Hessians and G = Gauss-Newton matrices (a column that is
    zero in every row is left out). It needs as many rows as unknowns, with independent (P, H, G),
    e.g. the default trust-krylov (one Hessian, the covariance's), trust-exact (one per iteration) and
    trust-gauss-newton: --fitlib-variant. Sets fitlib["hessian_weight"] = t_hessian / t_pass,
    fitlib["gauss_newton_weight"] = t_gauss_newton / t_pass and fitlib["pass_equivalents"] = P +
    hessian_weight x H + gauss_newton_weight x G. The time of the minimiser's own algebra
    (GLTR's tridiagonal solves, trust-exact's factorisations of the n x n model) is absorbed in t_pass
    and t_hessian, so this is an estimate; with two rows it is an exact solve that checks nothing itself."""
    import numpy as np

    groups = {}
    for r in rows:
        fl = r["fitlib"]
        p = fl.get("passes")
        if p and fl.get("minimize_seconds") and not fl.get("error"):
            groups.setdefault((r["tensor"], r["config"]), []).append(r)
    for members in groups.values():
        A = np.array([[max(r["fitlib"]["passes"]["values"], r["fitlib"]["passes"]["gradients"]) + r["fitlib"]["passes"]["hvps"],
                       r["fitlib"]["passes"]["hessians"], r["fitlib"]["passes"].get("gauss_newton", 0)] for r in members], dtype=float)
        b = np.array([r["fitlib"]["minimize_seconds"] for r in members])
        used = [0, 1] + ([2] if A[:, 2].any() else [])
        A = A[:, used]
        if len(members) < len(used) or np.linalg.matrix_rank(A / np.maximum(A.sum(axis=1, keepdims=True), 1)) < len(used):
            continue
        t, *_ = np.linalg.lstsq(A, b, rcond=None)
        if not all(t > 0):
            continue
        weights = t[1:] / t[0]
        for r, counts in zip(members, A):
            r["fitlib"].update(hessian_weight=weights[0], pass_equivalents=counts[0] + counts[1:] @ weights, seconds_per_pass=t[0])
            if len(weights) > 1:
                r["fitlib"]["gauss_newton_weight"] = weights[1]


# --------------------------------------------------------------------------------------------
# Rows and the table.

def median_run(runs: list[dict]) -> dict:
    """One program's row from its repeated runs: the first run's fit, the median CPU and wall seconds,
    and every run's seconds (`cpu_samples`, `wall_samples`); a run with an error makes the row's error.
    The result files left on disk are the last run's (the fits are deterministic: the same numbers)."""
    row = dict(runs[0])
    if len(runs) > 1:
        for key in ("cpu_seconds", "wall_seconds"):
            samples = [r.get(key) for r in runs]
            row[key.replace("seconds", "samples")] = samples
            row[key] = statistics.median(samples) if None not in samples else None
        row["error"] = next((r["error"] for r in runs if r.get("error")), None)
    return row


def repeat_text(run: dict) -> str:
    """', median of 0.91/0.87/0.95 s' for a repeated run's CPU seconds, else ''."""
    samples = run.get("cpu_samples")
    return f", median of {'/'.join(f'{s:.2f}' for s in samples)} s" if samples and None not in samples else ""

def judge(row: dict) -> None:
    """Fills row['cmp'], row['pass'] and row['failures'] from the two sides."""
    import results

    rb, fl = row["rabbit"], row["fitlib"]
    failures = []
    if rb.get("skipped"):  # fitlib only: judged by its own convergence
        if fl.get("error"):
            failures.append(f"fitlib: {fl['error']}")
        row["failures"] = failures
        row["pass"] = not failures
        return
    if rb.get("error"):
        failures.append(f"rabbit: {rb['error']}")
    if fl.get("error"):
        failures.append(f"fitlib: {fl['error']}")
    if not failures:
        try:
            c = results.compare(rb["fit"], fl["fit"])
            row["cmp"] = c
            if not c["max_dx_over_sigma"] < TARGET_DX:
                failures.append(f"|dx|/sigma={c['max_dx_over_sigma']:.2e} at {c['max_dx_param']}")
            if not c["max_dsigma_over_sigma"] < TARGET_DSIGMA:
                failures.append(f"|dsigma|/sigma={c['max_dsigma_over_sigma']:.2e} at {c['max_dsigma_param']}")
            if not c["abs_dnll"] < TARGET_DNLL:
                failures.append(f"|dNLL|={c['abs_dnll']:.2e}")
        except (ValueError, KeyError, TypeError) as ex:
            failures.append(f"compare: {ex}")
        if "cmp" in row and fl.get("wall_seconds"):
            row["speedup"] = rb["wall_seconds"] / fl["wall_seconds"]
    row["failures"] = failures
    row["pass"] = not failures


def fmt_num(v, spec=".1e") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def fmt_seconds(s) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s"


def rabbit_iterations(rb: dict) -> str:
    """'37', or '2800 (maxiter; final loss at 10)' when scipy spun on after the minimum."""
    if rb.get("iterations") is None:
        return "-"
    if rb.get("hit_maxiter"):
        return f"{rb['iterations']} (maxiter; final loss at {rb.get('iterations_to_final_loss')})"
    return str(rb["iterations"])


def row_line(row: dict) -> str:
    c = row.get("cmp", {})
    rb, fl = row["rabbit"], row["fitlib"]
    speed = f"{row['speedup']:.1f}x" if row.get("speedup") else "-"
    text = (f"{row['name']:<30s} bins={row['bins']:<6d} systs={row['systs']:<5d} "
            f"max|dx|/s={fmt_num(c.get('max_dx_over_sigma'))} max|ds/s|={fmt_num(c.get('max_dsigma_over_sigma'))} "
            f"|dNLL|={fmt_num(c.get('abs_dnll'))}  rabbit {fmt_seconds(rb.get('wall_seconds'))}  "
            f"fitlib {fmt_seconds(fl.get('wall_seconds'))}  ratio {speed}  {result_text(row)}")
    if row["failures"]:
        text += "  (" + "; ".join(f[:300] for f in row["failures"]) + ")"
    if fl.get("converged") is False:
        text += f"  [fitlib status {fl.get('status')}]"
    if rb.get("hit_maxiter"):
        text += f"  [rabbit ran to maxiter: {rabbit_iterations(rb)}]"
    return text


def result_text(row: dict) -> str:
    if row["rabbit"].get("skipped"):
        return "fitlib only" if row["pass"] else "FAIL (fitlib only)"
    return "PASS" if row["pass"] else "FAIL"


def print_passes_table(rows: list[dict]) -> None:
    """Passes over the templates per fit (fitlib_passes, hessian_weights) and CPU seconds of both programs."""
    print(PASS_WEIGHTS_TEXT)
    header = ("row", "fitlib args", "iters", "values", "gradients", "HVPs", "Hessians", "G-N matrices", "passes",
              "Hessian in passes", "G-N in passes", "pass-equiv.", "rejected", "EDM", "status", "fitlib CPU", "rabbit CPU", "rabbit iters", "rabbit/fitlib CPU",
              "max|dx|/σ")
    table = []
    for r in rows:
        fl, rb, c = r["fitlib"], r["rabbit"], r.get("cmp", {})
        p = fl.get("passes") or {}
        ratio = (rb["cpu_seconds"] / fl["cpu_seconds"]) if rb.get("cpu_seconds") and fl.get("cpu_seconds") and c else None
        table.append((r["name"], " ".join(r.get("fitlib_args") or []) or "(default)", str(p.get("iterations", "-")),
                      str(p.get("values", "-")), str(p.get("gradients", "-")), str(p.get("hvps", "-")),
                      str(p.get("hessians", "-")), str(p.get("gauss_newton", "-")), str(p.get("passes", "-")),
                      fmt_num(fl.get("hessian_weight"), ".1f"), fmt_num(fl.get("gauss_newton_weight"), ".1f"),
                      fmt_num(fl.get("pass_equivalents"), ".0f"), str(fl.get("rejected_steps", "-")),
                      fmt_num(fl.get("edm"), ".1e"), str(fl.get("status") or fl.get("error") or "-")[:60],
                      fmt_seconds(fl.get("cpu_seconds")),
                      "skipped" if rb.get("skipped") else fmt_seconds(rb.get("cpu_seconds")),
                      "-" if rb.get("skipped") else rabbit_iterations(rb),
                      f"{ratio:.1f}x" if ratio else "-", fmt_num(c.get("max_dx_over_sigma"))))
    markdown_table(header, table)


def print_table(rows: list[dict]) -> None:
    header = ("row", "bins", "systs", "max|dx|/σ", "max|dσ|/σ", "|ΔNLL|", "rabbit wall", "rabbit fit", "rabbit iters",
              "fitlib wall", "fitlib minimize", "rabbit/fitlib", "result")
    table = []
    for r in rows:
        c, rb, fl = r.get("cmp", {}), r["rabbit"], r["fitlib"]
        table.append((r["name"], str(r["bins"]), str(r["systs"]), fmt_num(c.get("max_dx_over_sigma")),
                      fmt_num(c.get("max_dsigma_over_sigma")), fmt_num(c.get("abs_dnll")),
                      fmt_seconds(rb.get("wall_seconds")), fmt_seconds(rb.get("fit_seconds")),
                      rabbit_iterations(rb), fmt_seconds(fl.get("wall_seconds")),
                      fmt_seconds(fl.get("minimize_seconds")),
                      f"{r['speedup']:.1f}x" if r.get("speedup") else "-", result_text(r)))
    markdown_table(header, table)


def strip_for_json(row: dict) -> dict:
    """The row without the bulky per-parameter arrays (kept: names of the worst parameters)."""
    out = json.loads(json.dumps(row, default=str))
    for side in ("rabbit", "fitlib"):
        fit = out.get(side, {}).pop("fit", None)
        if fit and side == "rabbit":
            out[side]["nllvalreduced"] = fit.get("nllvalreduced")
            out[side]["edmval"] = fit.get("edmval")
        if fit and side == "fitlib":
            out[side]["nll_reduced"] = fit.get("nll_reduced")
            out[side]["edm"] = fit.get("edm")
    return out


def compare_main(args: argparse.Namespace) -> None:
    import tensors

    vers = versions()
    threads = args.threads
    if args.repeat < 1:
        sys.exit(f"compare_rabbit.py: --repeat wants a count of at least 1, got {args.repeat}")
    print(f"== python {vers['python']}, rabbit-fit {vers['rabbit-fit']}, tensorflow {vers['tensorflow']}, "
          f"scipy {vers['scipy']}, threads {threads}, cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}",
          flush=True)
    workdir = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="compare_rabbit_"))
    tensor_dir = workdir / "tensors"
    tensor_dir.mkdir(parents=True, exist_ok=True)
    exe = (ROOT / args.fitlib).resolve() if not os.path.isabs(args.fitlib) else Path(args.fitlib)
    only = re.compile(args.only) if args.only else None
    skip_rabbit = re.compile(args.skip_rabbit) if args.skip_rabbit else None
    variants = [("", [])]
    for item in args.fitlib_variant:
        vname, sep, vargs = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", vname):
            sys.exit(f"compare_rabbit.py: --fitlib-variant wants NAME=ARGS with NAME of letters, digits, _ . -; got {item!r}")
        variants.append((vname, shlex.split(vargs)))

    rows = []
    try:
        for spec in tensor_specs(args):
            configs = [c for c in CONFIGS if not only or only.search(f"{spec['name']}/{c}")]
            if not configs:
                continue
            print(f"== {spec['name']}", flush=True)
            try:
                path = produce_tensor(spec, tensor_dir, args.compression, vers["rabbit-fit"])
            except Exception as ex:  # noqa: BLE001 - a row that cannot be written is reported, not fatal
                print(f"   could not write the tensor: {type(ex).__name__}: {ex}", flush=True)
                for config in configs:
                    row = dict(name=f"{spec['name']}/{config}", tensor=spec["name"], config=config, bins=0, systs=0,
                               rabbit=dict(error=f"tensor not written: {ex}"), fitlib=dict(error="tensor not written"))
                    judge(row)
                    rows.append(row)
                continue
            shape = tensor_shape(path)
            sha = tensors.sha256(path)
            for config in configs:
                name = f"{spec['name']}/{config}"
                rdir = workdir / "rabbit" / spec["name"] / config
                cached = rabbit_cached(rdir, sha, config, threads) if (args.keep and args.reuse_rabbit) else None
                if skip_rabbit and skip_rabbit.search(name):
                    rb = dict(skipped=True, error=None)
                    print(f"   rabbit {config}: skipped (--skip-rabbit)", flush=True)
                elif cached:
                    rb = cached
                    print(f"   rabbit {config}: reused {rdir}", flush=True)
                else:
                    rb = None  # run below, alternating with fitlib-fit
                runs = {vname: [] for vname, _ in variants}
                rabbit_runs = []
                for _ in range(args.repeat):  # alternating, so that a drift of the machine meets both fitters
                    if rb is None:
                        rabbit_runs.append(run_rabbit(path, rdir, config, threads, args.rabbit_timeout))
                    for vname, vargs in variants:
                        runs[vname].append(run_fitlib(exe, path, workdir / "fitlib" / spec["name"], config, threads,
                                                      args.fitlib_timeout, vargs, f"{config}_{vname}" if vname else config))
                if rabbit_runs:
                    rb = median_run(rabbit_runs)
                    rb.update(tensor_sha256=sha, config=config)
                    (rdir / "summary.json").write_text(json.dumps(rb, indent=1, default=str) + "\n")
                    print(f"   rabbit {config}: {fmt_seconds(rb['wall_seconds'])} wall ({fmt_seconds(rb['cpu_seconds'])} "
                          f"CPU{repeat_text(rb)}), fit {fmt_seconds(rb.get('fit_seconds'))}, {rabbit_iterations(rb)} iterations"
                          + (f", ERROR {rb['error']}" if rb.get("error") else ""), flush=True)
                for vname, vargs in variants:
                    fl = median_run(runs[vname])
                    row = dict(name=f"{name}:{vname}" if vname else name, tensor=spec["name"], config=config,
                               variant=vname or "default", fitlib_args=vargs, **shape, tensor_sha256=sha,
                               rabbit=rb, fitlib=fl)
                    judge(row)
                    rows.append(row)
                    print("   " + row_line(row), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print()
    for row in rows:
        print(row_line(row))
    print()
    print_table(rows)
    hessian_weights(rows)
    print()
    print_passes_table(rows)
    speedups = [r["speedup"] for r in rows if r.get("speedup")]
    if args.out:
        doc = dict(versions=vers, threads=threads, cores=os.cpu_count(), compression=args.compression,
                   targets=dict(dx_over_sigma=TARGET_DX, dsigma_over_sigma=TARGET_DSIGMA, dnll=TARGET_DNLL),
                   pass_weights=dict(PASS_WEIGHTS, text=PASS_WEIGHTS_TEXT),
                   rows=[strip_for_json(r) for r in rows],
                   min_speedup_vs_rabbit=min(speedups) if speedups else None)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"\nwrote {args.out}")
    print()
    print(f"min_speedup_vs_rabbit={min(speedups):.3g}" if speedups else "min_speedup_vs_rabbit=nan")
    if args.strict and not all(r["pass"] for r in rows):
        sys.exit(1)


# --------------------------------------------------------------------------------------------
# The fixture for `make test`.

FIXTURE_TENSORS = (
    ("test_tensor", False, "dense, asymmetric logk [70,3,2,12]"),
    ("test_tensor_sparse", True, "sparse (hnorm_sparse/hlogk_sparse), same model"),
)


def fixture_readme(doc: dict, sizes: dict) -> str:
    """README.md of the fixture directory."""
    lines = [
        "# rabbit reference fixture",
        "",
        "Produced by",
        "",
        "```sh",
        "python3 benchmarks/compare_rabbit.py --write-fixture tests/data/rabbit_fixture",
        "```",
        "",
        f"with rabbit-fit {doc['versions']['rabbit-fit']} (PyPI; = WMass/rabbit tag v{doc['versions']['rabbit-fit']}), "
        f"TensorFlow {doc['versions']['tensorflow']}, SciPy {doc['versions']['scipy']}, NumPy {doc['versions']['numpy']}, "
        f"on {doc['threads']} thread(s). Regenerating rewrites every file here (the tensors' `meta` pickle holds a "
        "time stamp, so the files change byte-wise, not in content).",
        "",
        "| file | what |",
        "|---|---|",
    ]
    for name, sparse, what in FIXTURE_TENSORS:
        lines.append(f"| `{name}.hdf5` | rabbit's test tensor ({what}) written by rabbit's own "
                     f"`tests/make_tensor.py`{' --sparse' if sparse else ''} (TensorWriter), numeric datasets "
                     f"re-stored with Blosc2 LZ4 (HDF5 filter 32026) as rabbit's current TensorWriter writes them"
                     f"{' (the sparse `values` uncompressed)' if sparse else ''}; {sizes[name + '.hdf5'] // 1024} KiB |")
        lines.append(f"| `{name}_gzip.hdf5` | the same content exactly as rabbit-fit "
                     f"{doc['versions']['rabbit-fit']}'s TensorWriter wrote it: numeric datasets gzip level 4 "
                     f"(filter 1); {sizes[name + '_gzip.hdf5'] // 1024} KiB |")
    lines += [
        "| `rabbit_results.json` | rabbit's fits of these tensors, see below |",
        "| `README.md` | this file |",
        "",
        "In every tensor, strings and `hnoiidxs` are gzip-compressed and `meta/pickle_data` (a Python pickle of",
        "the channel axes) uses Blosc v1 (filter 32001). Reading the Blosc2/Blosc files with plain libhdf5 needs",
        "the filter plugins of the `hdf5plugin` Python package (fitlib-fit finds them itself: `.deps/`,",
        "`--hdf5PluginPath`, `FITLIB_HDF5_PLUGIN_PATH`); the `_gzip` files need no plugin except for `meta/`.",
        "",
        "`rabbit_results.json`:",
        "",
        "```",
        "{ \"versions\": {...}, \"threads\": 1,",
        "  \"tensors\": { \"test_tensor\": { \"files\": {\"blosc2\": \"test_tensor.hdf5\", \"gzip\": \"test_tensor_gzip.hdf5\"},",
        "                                   \"sha256\": {...}, \"bins\": 60, \"bins_full\": 70, \"procs\": 3, \"systs\": 12,",
        "                                   \"channels\": [{\"name\", \"masked\", \"flow\", \"bins\", \"start\", \"stop\",",
        "                                                  \"axes\": [{\"name\", \"type\", \"edges\"}]}],",
        "                                   \"results\": { \"bb\":   { \"data\": FIT },",
        "                                                \"nobb\": { \"data\": FIT } } },",
        "               \"test_tensor_sparse\": {...} } }",
        "FIT = { \"command\": [argv of rabbit_fit], \"command_line\": str,",
        "        \"parameters\": [names], \"prefit\": [x0], \"postfit\": [x], \"uncertainty\": [sqrt(diag cov)],",
        "        \"covariance\": [[...]], \"nllvalreduced\": float, \"nllvalfull\": float, \"edmval\": float,",
        "        \"ndfsat\": int,",
        "        \"iterations\": int, \"iterations_to_final_loss\": int, \"minimizer_message\": str }",
        "```",
        "",
        "\"bb\" is rabbit's default (Barlow-Beeston lite, gamma, profiled analytically), \"nobb\" adds",
        "`--noBinByBinStat`; both fit the observed data (`-t 0 --unblind`) with the default minimiser",
        "(scipy trust-krylov, run to gtol=0). `postfit` is rabbit's raw fit vector: the POI `sig` is",
        "stored as sqrt(mu) (no `--allowNegativePOI`), nuisances as theta. Parameter order = rabbit's:",
        "POIs, then `hsysts`. The `-o <outdir>` in `command` was a temporary directory; `-v 4",
        "--noColorLogger` only change logging; `--fullNll` makes rabbit also store `nllvalfull`, its full NLL",
        "(the reduced NLL plus the constants it drops) at the postfit point, without changing the fit.",
        "`channels` is decoded from the tensor's `meta` pickle, in file",
        "order: rabbit-fit 0.2.5's TensorWriter puts the unmasked channels in *reverse* order of",
        "`add_channel` calls (ch1 = bins 0-49, ch0 = bins 50-59), then the masked ones (ch0_masked = 60-69).",
        "The dense and sparse tensors give the same fit up to rounding (|dNLL| ~ 1e-12).",
        "",
        "Fitted values (x, uncertainty):",
        "",
    ]
    for tname, t in doc["tensors"].items():
        for config, fits in t["results"].items():
            fit = fits["data"]
            lines.append(f"* `{tname}` {config}: nllvalreduced = {fit['nllvalreduced']!r}, "
                         f"nllvalfull = {fit.get('nllvalfull')!r}, edmval = {fit['edmval']:.3g}, "
                         f"{fit['iterations']} iterations (final loss first reached at {fit['iterations_to_final_loss']}; "
                         f"scipy: \"{fit['minimizer_message']}\")")
            lines.append("")
            lines.append("  | parameter | postfit | uncertainty |")
            lines.append("  |---|---|---|")
            for n, x, s in zip(fit["parameters"], fit["postfit"], fit["uncertainty"]):
                lines.append(f"  | {n} | {x:.10g} | {s:.10g} |")
            lines.append("")
    return "\n".join(lines) + "\n"


def write_fixture(args: argparse.Namespace) -> None:
    """Writes rabbit's test tensor (dense and sparse; Blosc2 and gzip), rabbit's fits of it
    (rabbit_results.json) and README.md into the fixture directory."""
    import tensors

    outdir = Path(args.write_fixture).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    vers = versions()
    doc = dict(versions=vers, threads=args.threads, tensors={},
               note="rabbit data fits (-t 0 --unblind) of rabbit's own test tensor; see README.md")
    sizes = {}
    with tempfile.TemporaryDirectory(prefix="rabbit_fixture_") as tmpname:
        tmp = Path(tmpname)
        for name, sparse, _ in FIXTURE_TENSORS:
            print(f"== {name}", flush=True)
            raw = tensors.write_test_tensor(tmp, name, sparse=sparse)
            blosc2, gzip = outdir / f"{name}.hdf5", outdir / f"{name}_gzip.hdf5"
            shutil.copyfile(raw, gzip)
            tensors.recompress(raw, blosc2, "blosc2")
            if not tensors.same_content(blosc2, gzip):
                sys.exit(f"compare_rabbit.py: {blosc2} and {gzip} differ in content")
            for f in (blosc2, gzip):
                sizes[f.name] = f.stat().st_size
            entry = dict(files=dict(blosc2=blosc2.name, gzip=gzip.name),
                         sha256={blosc2.name: tensors.sha256(blosc2), gzip.name: tensors.sha256(gzip)},
                         **tensor_shape(blosc2), channels=tensors.channel_layout(blosc2), results={})
            for config in CONFIGS:
                rb = run_rabbit(blosc2, tmp / "out" / name / config, config, args.threads, args.rabbit_timeout,
                                full_nll=True)
                if rb.get("error"):
                    sys.exit(f"compare_rabbit.py: rabbit failed on {blosc2} ({config}): {rb['error']}")
                fit = rb["fit"]
                cmd = [Path(rb["command"][0]).name, blosc2.name, *rb["command"][2:]]
                cmd[cmd.index("-o") + 1] = "<outdir>"
                entry["results"][config] = {"data": dict(
                    command=cmd, command_line=" ".join(cmd),
                    environment={v: str(args.threads) for v in THREAD_VARS},
                    parameters=fit["names"], prefit=fit["prefit"], postfit=fit["postfit"],
                    uncertainty=fit["uncertainty"], covariance=fit["covariance"],
                    nllvalreduced=fit["nllvalreduced"], nllvalfull=fit["nllvalfull"], edmval=fit["edmval"],
                    ndfsat=fit["ndfsat"],
                    signals=fit["signals"], nois=fit["nois"], iterations=rb.get("iterations"),
                    iterations_to_final_loss=rb.get("iterations_to_final_loss"),
                    minimizer_message=rb.get("minimizer_message"))}
                print(f"   rabbit {config}: nllvalreduced={fit['nllvalreduced']!r} edmval={fit['edmval']:.3g} "
                      f"({fmt_seconds(rb['wall_seconds'])})", flush=True)
            doc["tensors"][name] = entry
    (outdir / "rabbit_results.json").write_text(json.dumps(doc, indent=1) + "\n")
    (outdir / "README.md").write_text(fixture_readme(doc, sizes))
    total = sum(f.stat().st_size for f in outdir.iterdir() if f.is_file())
    print(f"== wrote {outdir}: {total / 1024:.0f} KiB in {len(list(outdir.iterdir()))} files", flush=True)
    if total > 1 << 20:
        print("   WARNING: the fixture exceeds 1 MiB", flush=True)


def update_fixture_nllvalfull(args: argparse.Namespace) -> None:
    """Adds rabbit's full NLL (`nllvalfull`) to every fit of DIR/rabbit_results.json, leaving the
    tensors untouched: refits each recorded (tensor, configuration) with --fullNll and keeps the value
    only if the refit reproduces the recorded fit."""
    import tensors

    outdir = Path(args.update_fixture_nllvalfull).resolve()
    path = outdir / "rabbit_results.json"
    doc = json.loads(path.read_text())
    vers = versions()
    if vers["rabbit-fit"] != doc["versions"]["rabbit-fit"]:
        sys.exit(f"compare_rabbit.py: the fixture is rabbit-fit {doc['versions']['rabbit-fit']}'s, this is {vers['rabbit-fit']}")
    if args.threads != doc["threads"]:
        sys.exit(f"compare_rabbit.py: the fixture was fitted on {doc['threads']} thread(s); pass --threads {doc['threads']}")
    with tempfile.TemporaryDirectory(prefix="rabbit_fixture_nll_") as tmpname:
        tmp = Path(tmpname)
        for name, entry in doc["tensors"].items():
            tensor = outdir / entry["files"]["blosc2"]
            if tensors.sha256(tensor) != entry["sha256"][tensor.name]:
                sys.exit(f"compare_rabbit.py: {tensor} is not the tensor rabbit_results.json was made from (SHA-256)")
            for config, fits in entry["results"].items():
                old = fits["data"]
                rb = run_rabbit(tensor, tmp / name / config, config, args.threads, args.rabbit_timeout, full_nll=True)
                if rb.get("error"):
                    sys.exit(f"compare_rabbit.py: rabbit failed on {tensor} ({config}): {rb['error']}")
                fit = rb["fit"]
                dnll = abs(fit["nllvalreduced"] - old["nllvalreduced"])
                dx = max(abs(a - b) / s for a, b, s in zip(fit["postfit"], old["postfit"], old["uncertainty"]))
                if fit["names"] != old["parameters"] or not dnll <= 1e-9 or not dx <= 1e-6 or fit["nllvalfull"] is None:
                    sys.exit(f"compare_rabbit.py: the refit of {name} {config} is not the recorded fit "
                             f"(|dNLL| = {dnll:.3g}, max |dx|/sigma = {dx:.3g}); regenerate with --write-fixture")
                cmd = [Path(rb["command"][0]).name, tensor.name, *rb["command"][2:]]
                cmd[cmd.index("-o") + 1] = "<outdir>"
                updated = {}
                for key, value in old.items():
                    if key == "nllvalfull":
                        continue
                    updated[key] = value
                    if key == "nllvalreduced":
                        updated["nllvalfull"] = fit["nllvalfull"]
                updated.update(command=cmd, command_line=" ".join(cmd))
                fits["data"] = updated
                print(f"   {name} {config}: nllvalfull={fit['nllvalfull']!r} (refit |dNLL| = {dnll:.3g}, "
                      f"max |dx|/sigma = {dx:.3g})", flush=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"== updated {path}; README.md is left as it is", flush=True)


HISTS_EXTRA = ["--saveHists", "--saveHistsPerProcess", "--computeHistErrors"]
# rabbit's --computeVariations (prefit and postfit predictions with each parameter varied down and up
# by its uncertainty), for these fits only: (tensor, configuration) of rabbit_results.json
VARIATIONS_EXTRA = ["--computeVariations"]
VARIATIONS_FITS = (("test_tensor", "bb"),)


def read_rabbit_hists(path: Path, channels: list[dict], fit: str = "data") -> list[dict]:
    """rabbit's saved histograms (--saveHists, --saveHistsPerProcess, --computeHistErrors) of one fit
    in its output file, read as rabbit_plot_hists reads them (rabbit.io_tools.get_fitresult, then
    fitresult["physics_models"]["Basemodel"]["channels"][<channel>]). One entry per channel of
    `channels` (the fixture's list: name, start, stop, masked, flow), in that order; every histogram
    is flattened row-major (values(flow=flow).ravel()), as the tensor stores the channel's bins."""
    import hist
    import numpy as np
    from rabbit import io_tools

    # group "results" for the data fit (-t 0), "results_<fit>" otherwise
    res, meta = io_tools.get_fitresult(str(path), result=None if fit == "data" else fit, meta=True)
    if "physics_models" not in res or "Basemodel" not in res["physics_models"]:
        raise ValueError(f"{path} holds no Basemodel histograms (keys {sorted(res)})")
    model = res["physics_models"]["Basemodel"]["channels"]
    if list(model) != [c["name"] for c in channels]:
        raise ValueError(f"rabbit's channels {list(model)} are not the fixture's {[c['name'] for c in channels]}")
    procs = [str(p) for p in np.asarray(meta["procs"]).astype(str)]

    def flat(a, n: int) -> list[float] | None:
        if a is None:
            return None
        a = np.asarray(a, dtype=float).ravel()
        if a.size != n:
            raise ValueError(f"histogram with {a.size} bins where the channel has {n}")
        if not np.all(np.isfinite(a)):
            raise ValueError("histogram with a non-finite value")
        return [float(v) for v in a]

    def variances(h, flow: bool):
        # rabbit stores histograms without errors as Double storage; boost-histogram would report
        # their values as Poisson "variances", so only Weight storage has variances here
        return h.variances(flow=flow) if h.storage_type is hist.storage.Weight else None

    out = []
    for ch in channels:
        name, flow, n = ch["name"], bool(ch["flow"]), ch["stop"] - ch["start"]
        hs = model[name]
        row = dict(name=name, start=ch["start"], stop=ch["stop"], masked=bool(ch["masked"]))
        if "hist_nobs" in hs:
            # hist_nobs: the data the fit used (rabbit_plot_hists' default --dataHist), its variance as
            # the fit sees it (Poisson: = nobs, unless --covarianceFit/--chisqFit). hist_data_obs: the
            # tensor's hdata_obs, its variance from the tensor's hdata_cov_inv if it has one (diag of
            # the inverse), whatever the fit does with it. rabbit's add_observed_hists slices both by
            # the axes' .size (flow bins not counted)
            h = hs["hist_nobs"].get()
            obs = hs["hist_data_obs"].get()
            if not np.array_equal(h.values(flow=flow), obs.values(flow=flow)):
                raise ValueError(f"{name}: rabbit's hist_nobs (fitted data) differs from hist_data_obs")
            row["data"] = flat(h.values(flow=flow), n)
            row["data_variance"] = flat(variances(h, flow), n)
            row["data_obs_variance"] = flat(variances(obs, flow), n)
        elif ch["masked"]:
            row["data"] = row["data_variance"] = row["data_obs_variance"] = None
        else:
            raise ValueError(f"{name}: no data histogram for an unmasked channel")
        for kind in ("prefit", "postfit"):
            h = hs[f"hist_{kind}_inclusive"].get()
            row[kind] = flat(h.values(flow=flow), n)
            row[f"{kind}_variance"] = flat(variances(h, flow), n)
            if row[f"{kind}_variance"] is None:
                raise ValueError(f"{name}: rabbit wrote no variances for hist_{kind}_inclusive")
        for kind in ("prefit", "postfit"):
            h = hs[f"hist_{kind}"].get()
            if [str(p) for p in h.axes["processes"]] != procs:
                raise ValueError(f"{name}: processes {list(h.axes['processes'])} are not meta's {procs}")
            per = {p: h[{"processes": p}] for p in procs}
            row[f"{kind}_per_process"] = {p: flat(hp.values(flow=flow), n) for p, hp in per.items()}
            if variances(h, False) is not None:
                row[f"{kind}_per_process_variance"] = {p: flat(variances(hp, flow), n) for p, hp in per.items()}
            total = np.sum([row[f"{kind}_per_process"][p] for p in procs], axis=0)
            incl = np.asarray(row[kind])
            if not np.all(np.abs(total - incl) <= 1e-12 * np.maximum(np.abs(incl), 1e-300)):
                raise ValueError(f"{name}: the sum of rabbit's per-process {kind} yields is not its inclusive one "
                                 f"(max |diff| = {np.max(np.abs(total - incl)):.3g})")
        out.append(row)
    return out


def read_rabbit_chi2(path: Path, fit: str = "data", model: str = "Basemodel") -> dict:
    """rabbit's linear chi2 of its prefit and postfit predictions against the data of one fit in its
    output file, of physics model `model` (Basemodel: all unmasked channels together). With --saveHists
    and without --noChi2, rabbit_fit.py's save_hists stores them through Workspace.add_chi2 as values of
    fitresult["physics_models"][<model>]: "chi2_prefit", "ndf_prefit" (profile=False, before the fit)
    and "chi2", "ndf" (postfit, profile=True). Returns {"prefit": {"chi2", "ndf"}, "postfit": {...}}
    with the kinds rabbit stored (a missing or non-finite one is left out, so the JSON never holds NaN)."""
    import numpy as np
    from rabbit import io_tools

    res = io_tools.get_fitresult(str(path), result=None if fit == "data" else fit)
    values = res.get("physics_models", {}).get(model, {})
    out = {}
    for kind, postfix in (("prefit", "_prefit"), ("postfit", "")):
        if f"chi2{postfix}" not in values or f"ndf{postfix}" not in values:
            continue
        chi2 = float(np.asarray(values[f"chi2{postfix}"]).item())
        ndf = np.asarray(values[f"ndf{postfix}"]).item()
        if not math.isfinite(chi2) or int(ndf) != ndf:
            print(f"   note: rabbit's {kind} chi2 in {path} is {chi2!r} with ndf {ndf!r}; not recorded", flush=True)
            continue
        out[kind] = dict(chi2=chi2, ndf=int(ndf))
    return out


def read_rabbit_variations(path: Path, channels: list[dict], parameters: list[str],
                            fit: str = "data") -> tuple[list[str], list[dict]]:
    """rabbit's --computeVariations histograms of one fit (hist_{prefit,postfit}_inclusive_variations
    of Basemodel, axes: the channel's axes, `vars` (a StrCategory of rabbit's parameters), `downUpVar`
    (2 bins: down, up)). Returns the names on the `vars` axis, which must be `parameters` (the fit's
    parameter order), and per channel of `channels` {"prefit_variations", "postfit_variations"}, each
    a nested list [bin][parameter][down, up], the bins flattened row-major like read_rabbit_hists'."""
    import hist
    import numpy as np
    from rabbit import io_tools

    res = io_tools.get_fitresult(str(path), result=None if fit == "data" else fit)
    model = res["physics_models"]["Basemodel"]["channels"]
    if list(model) != [c["name"] for c in channels]:
        raise ValueError(f"rabbit's channels {list(model)} are not the fixture's {[c['name'] for c in channels]}")
    names = None
    out = []
    for ch in channels:
        name, flow, n = ch["name"], bool(ch["flow"]), ch["stop"] - ch["start"]
        row = {}
        for kind in ("prefit", "postfit"):
            key = f"hist_{kind}_inclusive_variations"
            if key not in model[name]:
                raise ValueError(f"{name}: rabbit wrote no {key}")
            h = model[name][key].get()
            if [a.name for a in h.axes][-2:] != ["vars", "downUpVar"] or len(h.axes["downUpVar"]) != 2:
                raise ValueError(f"{name}: {key} has axes {[a.name for a in h.axes]}")
            if h.storage_type is not hist.storage.Double:
                raise ValueError(f"{name}: {key} has storage {h.storage_type}, not Double")
            axis = [str(p) for p in h.axes["vars"]]
            if names is None:
                names = axis
            elif axis != names:
                raise ValueError(f"{name}: {key}'s parameters differ from the other histograms'")
            v = np.asarray(h.values(flow=flow), dtype=float)
            if flow:
                # with flow rabbit appends a slice of ones as the StrCategory's overflow bin
                v = v[..., : len(axis), :]
            v = v.reshape(n, len(axis), 2)
            if not np.all(np.isfinite(v)):
                raise ValueError(f"{name}: {key} holds a non-finite value")
            row[f"{kind}_variations"] = v.tolist()
        out.append(row)
    if names != list(parameters):
        raise ValueError(f"the variations' parameter axis {names} is not the fit's parameter order {list(parameters)}")
    return names, out


def update_fixture_hists(args: argparse.Namespace) -> None:
    """Writes DIR/rabbit_hists.json: rabbit's prefit and postfit histograms of every recorded fit of
    DIR/rabbit_results.json, from a refit with the recorded command plus HISTS_EXTRA that must give
    the recorded postfit vector back (each parameter to 1e-12 relative); the tensors are untouched.
    Each fit also gets rabbit's prefit and postfit linear chi2 and ndf (read_rabbit_chi2) as "chi2".
    For the fits of VARIATIONS_FITS a second refit adds VARIATIONS_EXTRA (--computeVariations): it
    must give the same fit, histograms and chi2 bit for bit, and its variation histograms are
    added to that fit's channels."""
    import numpy as np
    import results
    import tensors

    outdir = Path(args.update_fixture_hists).resolve()
    doc = json.loads((outdir / "rabbit_results.json").read_text())
    vers = versions()
    if vers["rabbit-fit"] != doc["versions"]["rabbit-fit"]:
        sys.exit(f"compare_rabbit.py: the fixture is rabbit-fit {doc['versions']['rabbit-fit']}'s, this is {vers['rabbit-fit']}")
    if args.threads != doc["threads"]:
        sys.exit(f"compare_rabbit.py: the fixture was fitted on {doc['threads']} thread(s); pass --threads {doc['threads']}")
    exe = Path(sys.prefix) / "bin" / "rabbit_fit"
    out = dict(versions=vers, threads=doc["threads"], command_extra=list(HISTS_EXTRA), tensors={},
               note="rabbit's prefit/postfit histograms of the fits in rabbit_results.json; see README.md")
    missing = [f for f in VARIATIONS_FITS if f[0] not in doc["tensors"] or f[1] not in doc["tensors"][f[0]]["results"]]
    if missing:
        sys.exit(f"compare_rabbit.py: VARIATIONS_FITS {missing} are not fits of rabbit_results.json")

    def refit(name: str, config: str, tensor: Path, rec: list[str], old: dict, run_dir: Path, extra: list[str]):
        """Reruns the recorded command `rec` plus `extra` into run_dir; returns (result file, the command
        as shown in the JSON, max relative |dx|, |dNLL|, wall seconds) if it is the recorded fit."""
        run_dir.mkdir(parents=True)
        cmd = [str(exe), str(tensor), *rec[2:], *extra]
        cmd[cmd.index("-o") + 1] = str(run_dir)
        rc, wall, _, err = run_timed(cmd, fitter_env(args.threads, plugin_path=False), run_dir / "rabbit.log",
                                     args.rabbit_timeout)
        if rc != 0:
            sys.exit(f"compare_rabbit.py: rabbit failed on {tensor} ({config}, {' '.join(extra)}): {err}")
        result = run_dir / rec[rec.index("--outname") + 1] if "--outname" in rec else run_dir / "fitresults.hdf5"
        fit = results.read_rabbit(result, "data")
        bad = [(n, a, b) for n, a, b in zip(fit["names"], fit["postfit"], old["postfit"])
               if not abs(a - b) <= 1e-12 * abs(b)]
        if fit["names"] != old["parameters"] or bad:
            sys.exit(f"compare_rabbit.py: the refit of {name} {config} with {' '.join(extra)} is not the "
                     f"recorded fit (parameters {fit['names'] == old['parameters'] and 'equal' or 'differ'}; "
                     f"postfit beyond 1e-12 relative: {bad[:3]}); not writing rabbit_hists.json")
        maxrel = max((abs(a - b) / abs(b) if b else 0.0) for a, b in zip(fit["postfit"], old["postfit"]))
        dnll = abs(fit["nllvalreduced"] - old["nllvalreduced"])
        shown = [Path(cmd[0]).name, tensor.name, *cmd[2:]]
        shown[shown.index("-o") + 1] = "OUTDIR"
        return result, shown, maxrel, dnll, wall

    with tempfile.TemporaryDirectory(prefix="rabbit_fixture_hists_") as tmpname:
        tmp = Path(tmpname)
        for name, entry in doc["tensors"].items():
            out["tensors"][name] = {}
            for config, fits in entry["results"].items():
                old = fits["data"]
                rec = list(old["command"])
                if Path(rec[0]).name != "rabbit_fit" or rec[1] not in entry["files"].values() or "-o" not in rec:
                    sys.exit(f"compare_rabbit.py: unexpected recorded command of {name} {config}: {rec}")
                tensor = outdir / rec[1]
                if tensors.sha256(tensor) != entry["sha256"][tensor.name]:
                    sys.exit(f"compare_rabbit.py: {tensor} is not the tensor rabbit_results.json was made from (SHA-256)")
                result, shown, maxrel, dnll, wall = refit(name, config, tensor, rec, old, tmp / name / config,
                                                          HISTS_EXTRA)
                try:
                    chans = read_rabbit_hists(result, entry["channels"])
                except (ValueError, KeyError) as ex:
                    sys.exit(f"compare_rabbit.py: reading rabbit's histograms of {name} {config} from {result}: {ex}")
                chi2 = read_rabbit_chi2(result)
                out["tensors"][name][config] = dict(command=shown, channels=chans)
                if chi2:
                    out["tensors"][name][config]["chi2"] = chi2
                shown_chi2 = ", ".join(f"{k} chi2 = {v['chi2']:.6g}/{v['ndf']}" for k, v in chi2.items()) or "no chi2"
                print(f"   {name} {config}: refit max |dx|/|x| = {maxrel:.3g}, |dNLL| = {dnll:.3g}; "
                      f"{len(chans)} channels; {shown_chi2} ({fmt_seconds(wall)})", flush=True)
                if (name, config) not in VARIATIONS_FITS:
                    continue
                vresult, vshown, vmaxrel, vdnll, vwall = refit(name, config, tensor, rec, old,
                                                               tmp / name / f"{config}_variations",
                                                               HISTS_EXTRA + VARIATIONS_EXTRA)
                try:
                    if read_rabbit_hists(vresult, entry["channels"]) != chans:
                        raise ValueError(f"with {' '.join(VARIATIONS_EXTRA)} rabbit's other histograms are not "
                                         "bit for bit those of the run without it")
                    vchi2 = read_rabbit_chi2(vresult)
                    if vchi2 != chi2:
                        raise ValueError(f"with {' '.join(VARIATIONS_EXTRA)} rabbit's chi2 {vchi2} is not bit for bit "
                                         f"that of the run without it, {chi2}")
                    vnames, variations = read_rabbit_variations(vresult, entry["channels"], old["parameters"])
                    # the variations are expected -/+ a shift: their midpoint is the prediction (postfit:
                    # evaluated with beta held at its profiled value, which is the profiled prediction)
                    for ch, var in zip(chans, variations):
                        for kind in ("prefit", "postfit"):
                            v = np.asarray(var[f"{kind}_variations"])
                            mid, ref = v.mean(axis=-1), np.asarray(ch[kind])[:, None]
                            if not np.all(np.abs(mid - ref) <= 1e-12 * np.abs(ref)):
                                raise ValueError(f"{ch['name']}: the midpoint of the {kind} variations is not rabbit's "
                                                 f"{kind} prediction (max |diff| = {np.max(np.abs(mid - ref)):.3g})")
                except (ValueError, KeyError) as ex:
                    sys.exit(f"compare_rabbit.py: reading rabbit's variation histograms of {name} {config} from "
                             f"{vresult}: {ex}")
                for ch, var in zip(chans, variations):
                    ch.update(var)
                out["tensors"][name][config].update(variations_command=vshown, variation_parameters=vnames)
                print(f"   {name} {config} {' '.join(VARIATIONS_EXTRA)}: refit max |dx|/|x| = {vmaxrel:.3g}, "
                      f"|dNLL| = {vdnll:.3g}; variations of {len(vnames)} parameters ({fmt_seconds(vwall)})",
                      flush=True)
    path = outdir / "rabbit_hists.json"
    path.write_text(json.dumps(out, indent=1, allow_nan=False) + "\n")
    print(f"== wrote {path} ({path.stat().st_size / 1024:.0f} KiB); README.md is left as it is", flush=True)


def main() -> None:
    args = parse_args()
    if args.reuse_rabbit and not args.keep:
        sys.exit("compare_rabbit.py: --reuse-rabbit needs --keep DIR")
    ensure_venv_and_reexec(args)
    # rabbit's TensorWriter and rabbit_fit store `git log -1` and the whole `git diff` of the
    # directory above their installation (wums.output_tools.make_meta_info_dict) in every file's
    # meta pickle; with the venv inside this repository that would be fitlib's working tree.
    # A GIT_DIR that does not exist makes them record "Not a git repository" instead.
    os.environ["GIT_DIR"] = str(Path(sys.prefix) / "no-git-repository")
    sys.path.insert(0, str(HELPERS))
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    if args.write_fixture:
        write_fixture(args)
    elif args.update_fixture_nllvalfull:
        update_fixture_nllvalfull(args)
    elif args.update_fixture_hists:
        update_fixture_hists(args)
    else:
        compare_main(args)


if __name__ == "__main__":
    main()
