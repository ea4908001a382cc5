# SPDX-License-Identifier: MIT
"""fitlib-fit from Python: the program the package bundles (fitlib/bin/fitlib-fit), run on a tensor with its command
line, its results read back.

    results = fitlib.run("tensor.hdf5", "-t", "-1", "0", "--doImpacts", "--scan", "sig", "--saveHists")
    results.fits["data"].x

Everything fitlib-fit does is there: Asimov and data fits, toys and replica batches (`-t 1000 --replicaBatch 64`),
pseudodata, 2-D scans, mappings, blinding. fitlib.fit and the functions beside it do the common steps in-process.
"""

from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys
import tempfile

__all__ = ["FitlibFitError", "executable", "run"]


class FitlibFitError(RuntimeError):
    """fitlib-fit ended with bad input (exit status 2) or could not write its results (4); the message is its stderr."""

    def __init__(self, returncode: int, stderr: str):
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"fitlib-fit exited with status {returncode}: {stderr.strip()}")


def executable() -> pathlib.Path:
    """The fitlib-fit program installed with the package, built with it from the same headers."""
    exe = pathlib.Path(__file__).resolve().parent / "bin" / "fitlib-fit"
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        raise FileNotFoundError(
            f"fitlib-fit is not at {exe}: this installation of the fitlib package has no program; reinstall it from a "
            "clone of fitlib with `pip install ./python`")
    return exe


def run(tensor, *options: str, output=None, quiet: bool = True):
    """Runs fitlib-fit on `tensor` with the command-line `options` and returns its results (fitlib.results.Results).

    `output`: where the results file goes (kept); None: a temporary file, read and removed. fitlib-fit's stderr (its
    progress: each stage, and each iteration unless `quiet`) goes line by line to the logger "fitlib" at INFO. A fit that does not converge is a
    status in the results (exit status 3 is no error); any other exit status (2: bad input, 4: a failed write) raises
    FitlibFitError with fitlib-fit's message.
    """
    from .results import read_results

    for o in options:
        if o in ("-o", "--output") or o.startswith(("--output=", "--outname")):
            raise ValueError(f"run: pass the results file as output=..., not {o!r} among the options")
    with tempfile.TemporaryDirectory(prefix="fitlib-run-") as tmp:
        path = pathlib.Path(output) if output is not None else pathlib.Path(tmp) / "results.hdf5"
        argv = [str(executable()), os.fspath(tensor), *map(str, options), "-o", str(path)]
        if quiet and "-q" not in options and "--quiet" not in options:
            argv.append("-q")
        log = logging.getLogger("fitlib")
        said = []
        # This Python writes rabbit's layout for --rabbitOutput, whether or not its venv is on the PATH.
        env = {"FITLIB_PYTHON": sys.executable, **os.environ}
        with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace", env=env) as p:
            for line in p.stderr:
                said.append(line)
                log.info("%s", line.rstrip())
        if p.returncode not in (0, 3):
            raise FitlibFitError(p.returncode, "".join(said))
        return read_results(path)
