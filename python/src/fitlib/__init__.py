# SPDX-License-Identifier: MIT
"""fitlib from Python: binned profile-likelihood fits of rabbit input tensors.

    import fitlib
    model = fitlib.read_rabbit("tensor.hdf5")
    result = fitlib.fit(model)              # fitlib-fit tensor.hdf5 -t 0 --unblind, to the last bit
    print(result.report())
    hists = fitlib.histograms(model, result)  # prefit and postfit yields of every bin, numpy arrays

Arrays are read-only numpy arrays that view the model or the result. Bad input raises fitlib.Error: a ModelError or
UsageError (both ValueErrors) or a FileError (an OSError), with fitlib's message. With `hist` installed,
fitlib.hist turns a channel's bins into a hist.Hist with the channel's axes.
"""

_CORE = ("Axis", "Channel", "Error", "FileError", "FitResult", "Impacts", "Model", "ModelError", "Scan", "UsageError",
         "__version__", "fit", "global_impacts", "histograms", "impacts", "read_rabbit", "scan")
__all__ = [*_CORE, "FitlibFitError", "read_results", "run"]


def __getattr__(name: str):
    # The compiled extension is imported on first use, so that the pure-Python modules (fitlib.results, fitlib.rabbit,
    # fitlib.hist, fitlib.plot) import without it, e.g. in rabbit's venv with PYTHONPATH=python/src.
    if name in _CORE:
        from . import _core

        return getattr(_core, name)
    if name == "read_results":
        from .results import read_results

        return read_results
    if name in ("run", "FitlibFitError"):
        from . import program as _program

        return getattr(_program, name)
    raise AttributeError(f"module 'fitlib' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
