# SPDX-License-Identifier: MIT
"""Reading fit results: rabbit's output HDF5 (pickled dicts of hist objects) and fitlib-fit's JSON summary.

rabbit's output file (written by `rabbit.workspace.Workspace`) holds one pickle group per fit,
`results` for `-t 0` (data), `results_asimov` for `-t -1`, `results_toy<i>` for toys, plus `meta`.
Each group unpickles (wums.ioutils.pickle_load_h5py, wrapped by rabbit.io_tools.get_fitresult) to a
dict: `parms` / `parms_prefit` are `H5PickleProxy` objects around a `hist.Hist` with one StrCategory
axis named `parms` (values = raw fit vector x, POIs as √μ by default; variances = diag(cov)),
`cov` a 2-D hist (axes `parms_x`, `parms_y`), and plain numbers `nllvalreduced`, `edmval`,
`ndfsat`, `postfit_profile`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

RABBIT_FIT_KEYS = {"data": "results", "asimov": "results_asimov"}


def read_rabbit(path: Path, fit: str = "data") -> dict:
    """Extracts one fit from a rabbit output file: names, prefit and postfit x, uncertainties
    (sqrt of the variances of `parms`), covariance, nllvalreduced, edmval, ndfsat."""
    import numpy as np
    from rabbit import io_tools

    key = RABBIT_FIT_KEYS.get(fit, fit)
    res, meta = io_tools.get_fitresult(str(path), result=key.removeprefix("results_") if key != "results" else None,
                                       meta=True)
    h = res["parms"].get()
    names = [str(n) for n in h.axes["parms"]]
    values = np.asarray(h.values(), dtype=float)
    variances = h.variances()
    unc = np.sqrt(np.asarray(variances, dtype=float)) if variances is not None else np.full(len(names), np.nan)
    prefit = np.asarray(res["parms_prefit"].get().values(), dtype=float) if "parms_prefit" in res else None
    cov = np.asarray(res["cov"].get().values(), dtype=float) if "cov" in res else None
    edm = res.get("edmval")
    return dict(
        names=names,
        prefit=prefit.tolist() if prefit is not None else None,
        postfit=values.tolist(),
        uncertainty=unc.tolist(),
        covariance=cov.tolist() if cov is not None else None,
        nllvalreduced=float(res["nllvalreduced"]),
        edmval=float(edm) if edm is not None else None,
        ndfsat=int(res["ndfsat"]),
        signals=[str(s) for s in np.atleast_1d(meta.get("signals", []))],
        nois=[str(s) for s in np.atleast_1d(meta.get("nois", []))],
    )


def read_fitlib_json(path: Path, fit: str = "data") -> dict:
    """Reads fitlib-fit's JSON summary and returns the entry of `fits` named `fit`, with the
    parameters as {name: {"prefit", "postfit", "uncertainty"}}. Raises ValueError with a readable
    message if the file or the fit is missing or malformed."""
    if not path.exists():
        raise ValueError(f"fitlib JSON summary {path} was not written")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as ex:
        raise ValueError(f"{path} is not valid JSON: {ex}") from None
    fits = doc.get("fits")
    if not isinstance(fits, list):
        raise ValueError(f"{path} has no 'fits' list")
    for entry in fits:
        if entry.get("name") == fit:
            params = {p["name"]: p for p in entry.get("parameters", [])}
            return dict(entry, parameters_by_name=params, fitlib_version=doc.get("fitlib_version"))
    raise ValueError(f"{path} has no fit named {fit!r} (has {[e.get('name') for e in fits]})")


def compare(rabbit: dict, fitlib: dict) -> dict:
    """max |Δx|/σ and max |Δσ|/σ over rabbit's parameters (σ = rabbit's uncertainty), |ΔNLL|,
    and the parameter at which each maximum occurs. Parameters missing on the fitlib side are an
    error (ValueError)."""
    params = fitlib["parameters_by_name"]
    missing = [n for n in rabbit["names"] if n not in params]
    if missing:
        raise ValueError(f"fitlib result lacks {len(missing)} of rabbit's parameters, e.g. {missing[:3]}")
    dx, dsig = (0.0, None), (0.0, None)
    for name, x, sigma in zip(rabbit["names"], rabbit["postfit"], rabbit["uncertainty"]):
        p = params[name]
        scale = sigma if (sigma > 0 and math.isfinite(sigma)) else 1.0
        ex = abs(float(p["postfit"]) - x) / scale
        es = abs(float(p["uncertainty"]) - sigma) / scale
        if not math.isfinite(ex) or ex > dx[0]:
            dx = (ex, name)
        if not math.isfinite(es) or es > dsig[0]:
            dsig = (es, name)
    extra = sorted(set(params) - set(rabbit["names"]))
    return dict(max_dx_over_sigma=dx[0], max_dx_param=dx[1], max_dsigma_over_sigma=dsig[0], max_dsigma_param=dsig[1],
                abs_dnll=abs(float(fitlib["nll_reduced"]) - rabbit["nllvalreduced"]), extra_fitlib_params=extra[:5])
