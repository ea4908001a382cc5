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

from ._core import (
    Axis,
    Channel,
    Error,
    FileError,
    FitResult,
    Model,
    ModelError,
    UsageError,
    __version__,
    fit,
    histograms,
    read_rabbit,
)

__all__ = [
    "Axis",
    "Channel",
    "Error",
    "FileError",
    "FitResult",
    "Model",
    "ModelError",
    "UsageError",
    "__version__",
    "fit",
    "histograms",
    "read_rabbit",
]
