# SPDX-License-Identifier: MIT
"""fitlib from Python: binned profile-likelihood fits of rabbit input tensors.

    import fitlib
    model = fitlib.read_rabbit("tensor.hdf5")
    result = fitlib.fit(model)              # fitlib-fit tensor.hdf5 -t 0 --unblind, to the last bit
    print(result.report())
    hists = fitlib.histograms(model, result)  # prefit and postfit yields of every bin, numpy arrays

Arrays are read-only numpy arrays that view the model or the result. Bad input raises fitlib.Error: a ModelError or
UsageError (both ValueErrors) or a FileError (an OSError), with fitlib's message. With `hist` installed,
fitlib.hist turns a channel's bins into a hist.Hist with the channel's axes. fitlib.impacts, global_impacts and scan
follow a fit in-process; fitlib.run runs the bundled fitlib-fit (toys, replica batches, …) and fitlib.read_results reads
its results files; fitlib.rabbit writes rabbit's fitresults layout, fitlib.plot draws the standard plots
(docs/python.md).
"""

_CORE = ("Axis", "Channel", "Error", "FileError", "FitResult", "Impacts", "Likelihood", "Model", "ModelError", "Scan", "UsageError",
         "__version__", "fit", "global_impacts", "histograms", "impacts", "scan")
__all__ = [*_CORE, "FitlibFitError", "read_rabbit", "read_results", "run"]


def _core_module():
    """The compiled extension, imported on first use, so that the pure-Python modules (fitlib.results, fitlib.rabbit,
    fitlib.hist, fitlib.plot) import without it, e.g. in rabbit's venv with PYTHONPATH=python/src. On its import HDF5's
    filter-plugin search path gains FITLIB_HDF5_PLUGIN_PATH's directories and PyPI's hdf5plugin's (where installed),
    whose Blosc2 filter rabbit's current tensors need: HDF5_PLUGIN_PATH need not be set."""
    from . import _core

    global _plugins_added
    if not _plugins_added:
        _plugins_added = True
        import importlib.util
        import os

        dirs = [d for d in os.environ.get("FITLIB_HDF5_PLUGIN_PATH", "").split(os.pathsep) if d]
        spec = importlib.util.find_spec("hdf5plugin")
        if spec is not None and spec.submodule_search_locations:
            dirs += [os.path.join(loc, "plugins") for loc in spec.submodule_search_locations]
        if dirs:
            _core._add_hdf5_plugin_paths(dirs)
    return _core


_plugins_added = False


def __getattr__(name: str):
    if name in _CORE:
        return getattr(_core_module(), name)
    if name == "read_rabbit":
        from ._meta import read_rabbit

        return read_rabbit
    if name == "read_results":
        from .results import read_results

        return read_results
    if name in ("run", "FitlibFitError"):
        from . import program as _program

        return getattr(_program, name)
    raise AttributeError(f"module 'fitlib' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
