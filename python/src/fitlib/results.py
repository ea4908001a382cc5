# SPDX-License-Identifier: MIT
"""fitlib's results files (fitlib-fit -o RESULT.hdf5) read back into Python: numpy arrays and plain dataclasses.

    from fitlib.results import read_results
    results = read_results("results.hdf5")
    fit = results["data"]                    # also "asimov", "toy1", …, in results.fits
    print(fit.x, fit.uncertainties, fit.status, fit.impacts.of("signal"))
    h = fit.histograms.channel_hists("ch0")["postfit"]   # a hist.Hist with the channel's own axes (needs `hist`)

The layout is docs/results-format.md's (layout versions 3 to 5; the current one is 5). A StoredFit has the attribute
names of fitlib.FitResult (names, x, x0, uncertainties, covariance, nll, edm, status, converged, …), so code written
for a fit made in Python also takes a fit read from a file. Needs h5py (and `hist` only for the channel histograms);
not the compiled extension.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from ._channels import find as _find_channel

__all__ = [
    "FORMAT_VERSIONS",
    "Axis",
    "Channel",
    "Chi2",
    "Histograms",
    "Impacts",
    "Mapping",
    "ModelInfo",
    "Results",
    "ResultsError",
    "RunInfo",
    "SaturatedGof",
    "Scan",
    "Scan2D",
    "StoredFit",
    "ToysSummary",
    "read_results",
]

FORMAT_VERSIONS = (3, 4, 5)
"""Layout versions (the root attribute format_version) this reader understands; 5 is the one fitlib-fit writes now."""

_CATEGORY_KINDS = ("StrCategory", "IntCategory")


class ResultsError(ValueError):
    """A file that is not a fitlib results file, or one of a layout version this reader does not know."""


@dataclass(frozen=True, eq=False)
class RunInfo:
    """How the results were made: fitlib's version, the layout version, the input tensor and the command line."""

    fitlib_version: str
    format_version: int
    input_path: str  # the tensor as given on the command line
    input_sha256: str  # SHA-256 of the tensor file's bytes (hex)
    command_line: str
    options: dict  # the options as a JSON object (integers beyond 2**53, such as the seed, are strings)


@dataclass(frozen=True, eq=False, repr=False)
class Axis:
    """One axis of a channel's histogram, as hist describes it (the attributes of fitlib.Axis)."""

    kind: str  # hist's class: Regular, Variable, Integer, Boolean, StrCategory or IntCategory
    name: str
    label: str
    edges: np.ndarray  # the size + 1 bin edges (empty for the category kinds)
    categories: list  # one per bin (StrCategory; IntCategory in decimal); empty otherwise
    transform: str  # Regular: '', 'log', 'sqrt' or 'pow(p)'
    underflow: bool
    overflow: bool
    circular: bool
    growth: bool

    @property
    def size(self) -> int:
        """The bins inside the axis's range."""
        return len(self.categories) if self.kind in _CATEGORY_KINDS else len(self.edges) - 1

    @property
    def extent(self) -> int:
        """The bins with the underflow and overflow bins."""
        return self.size + int(self.underflow) + int(self.overflow)

    def __repr__(self) -> str:
        return f"Axis({self.kind} {self.name!r}, {self.size} bins)"


@dataclass(frozen=True, eq=False, repr=False)
class Channel:
    """A channel: `nbins` consecutive bins of the model from `start`, with its histogram's axes (fitlib.Channel's
    attributes). Its bins are the histogram's, row-major, flow bins included where `flow`."""

    name: str
    nbins: int
    start: int
    masked: bool  # predicted only: no data, not in the fit
    flow: bool  # the bins include the axes' underflow and overflow bins
    axes: list  # of Axis; empty: one run of bins

    @property
    def shape(self) -> tuple:
        """The bins along each axis."""
        return tuple(a.extent if self.flow else a.size for a in self.axes) if self.axes else (self.nbins,)

    def __repr__(self) -> str:
        masked = ", masked" if self.masked else ""
        return f"Channel({self.name!r}, {self.nbins} bins from {self.start}{masked}, axes {self.axes})"


@dataclass(frozen=True, eq=False)
class ModelInfo:
    """What the results say of the model fitted (the group /model/): channels, processes, parameters, groups."""

    channels: list  # of Channel, in bin order (unmasked channels first)
    process_names: list
    signal: np.ndarray  # bool per process: scaled by a POI
    parameter_names: list  # the POIs (one per signal process), then the systematics
    parameter_kind: list  # per parameter 'poi', 'noi' (a nuisance of interest) or 'nuisance'
    constrained: np.ndarray  # bool per parameter: a nuisance with a Gaussian constraint
    prefit_uncertainty: np.ndarray  # 1/sqrt(w) of a constrained nuisance; 0 for POIs and unconstrained ones
    groups: dict  # systematic group name -> its members' names, in the tensor's order

    @property
    def nprocs(self) -> int:
        return len(self.process_names)

    @property
    def nparams(self) -> int:
        return len(self.parameter_names)

    @property
    def npoi(self) -> int:
        return self.parameter_kind.count("poi")

    @property
    def pois(self) -> list:
        return [n for n, k in zip(self.parameter_names, self.parameter_kind) if k == "poi"]

    @property
    def nois(self) -> list:
        return [n for n, k in zip(self.parameter_names, self.parameter_kind) if k == "noi"]

    @property
    def systematic_names(self) -> list:
        return self.parameter_names[self.npoi :]

    @property
    def nbins(self) -> int:
        """Bins that enter the data term (the unmasked channels')."""
        return sum(c.nbins for c in self.channels if not c.masked)

    @property
    def nbins_full(self) -> int:
        """All bins, masked channels included."""
        return sum(c.nbins for c in self.channels)

    def channel(self, which) -> Channel:
        """The channel named `which`, or the `which`-th."""
        return _find_channel(self.channels, which)[1]


@dataclass(frozen=True, eq=False)
class SaturatedGof:
    """Saturated goodness of fit: chi2 = 2·NLL_reduced, ndf = data bins − free unconstrained parameters."""

    chi2: float
    ndf: int
    p_value: float


@dataclass(frozen=True, eq=False)
class Impacts:
    """Impacts (traditional or global) of every source parameter and of each group on each target (POI, then NOI)."""

    targets: list
    sources: list  # every parameter
    values: np.ndarray  # [targets, sources]; 0 where a parameter is no source
    groups: list  # the tensor's systematic groups, then 'stat' and, with bin-by-bin statistics, 'binByBinStat'
    grouped: np.ndarray  # [targets, groups]

    def of(self, target: str) -> dict:
        """Impact of each source parameter on `target`, by name."""
        return dict(zip(self.sources, self.values[self._row(target)].tolist()))

    def grouped_of(self, target: str) -> dict:
        """Impact of each group on `target`, by name."""
        return dict(zip(self.groups, self.grouped[self._row(target)].tolist()))

    def _row(self, target: str) -> int:
        if target not in self.targets:
            raise KeyError(f"no impacts on {target!r}; the targets are {self.targets}")
        return self.targets.index(target)


@dataclass(frozen=True, eq=False)
class Scan:
    """A profile-likelihood scan of one parameter: its values, NLL − NLL̂ (not ×2) and each point's fit status."""

    parameter: str
    values: np.ndarray
    dnll: np.ndarray
    status: list

    @property
    def converged(self) -> np.ndarray:
        """Whether each point's fit converged."""
        return np.array([s.startswith("converged") for s in self.status], dtype=bool)


@dataclass(frozen=True, eq=False)
class Scan2D:
    """A two-parameter profile scan: the grid of a's and b's values, NLL − NLL̂ [a, b] and each point's status."""

    parameters: tuple  # (a, b)
    values_x: np.ndarray  # a's values
    values_y: np.ndarray  # b's values
    dnll: np.ndarray  # [len(values_x), len(values_y)]
    status: np.ndarray  # str, the shape of dnll

    @property
    def converged(self) -> np.ndarray:
        return np.char.startswith(self.status.astype(str), "converged")


@dataclass(frozen=True, eq=False)
class Chi2:
    """The linear chi2 of the summed yields against the data: per channel (NaN and 0 for masked ones) and in total."""

    chi2: np.ndarray  # per channel, in model.channels order
    ndf: np.ndarray
    total_chi2: float  # over every data bin (rabbit's chi2 / chi2_prefit)
    total_ndf: int
    note: str | None = None  # why a postfit chi2 is NaN

    def as_dict(self) -> dict:
        """As fitlib.histograms returns it."""
        d = {"chi2": self.chi2, "ndf": self.ndf, "total_chi2": self.total_chi2, "total_ndf": self.total_ndf}
        if self.note:
            d["note"] = self.note
        return d


@dataclass(frozen=True, eq=False, repr=False)
class Histograms:
    """Prefit and postfit yields of every bin in the model's bin order (fitlib-fit --saveHists). B: unmasked bins, Bf:
    all bins, p: processes, n: parameters. What the run did not compute is None; a blinded data fit has no postfit."""

    model: ModelInfo = field(repr=False)
    data: np.ndarray  # [B] the counts the fit used
    data_variance: np.ndarray  # [B]
    prefit: np.ndarray  # [Bf, p] each process's yield at the default parameters
    prefit_total: np.ndarray  # [Bf] their sum
    prefit_variance: np.ndarray  # [Bf] its variance from the prefit covariance
    postfit: np.ndarray | None = None  # [Bf, p] at the minimum
    postfit_total: np.ndarray | None = None
    postfit_variance: np.ndarray | None = None  # from the fit's covariance (NaN where unusable)
    prefit_process_variance: np.ndarray | None = None  # [Bf, p] (--computeHistErrorsPerProcess)
    postfit_process_variance: np.ndarray | None = None
    prefit_covariance: list | None = None  # per channel [bins_c, bins_c] (--computeHistCov); no cross-channel blocks
    postfit_covariance: list | None = None
    prefit_chi2: Chi2 | None = None
    postfit_chi2: Chi2 | None = None
    prefit_variations: np.ndarray | None = None  # [Bf, n, 2]: down, up by one sigma (--computeVariations)
    postfit_variations: np.ndarray | None = None

    def as_dict(self) -> dict:
        """The arrays under fitlib.histograms' keys (what it has), for fitlib.hist.channel_hists and the like."""
        d = {}
        for k in ("data", "data_variance", "prefit", "prefit_total", "prefit_variance", "postfit", "postfit_total",
                  "postfit_variance", "prefit_process_variance", "postfit_process_variance", "prefit_covariance",
                  "postfit_covariance", "prefit_variations", "postfit_variations"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        for k in ("prefit_chi2", "postfit_chi2"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k).as_dict()
        return d

    def channel_hists(self, which) -> dict:
        """One channel's histograms as hist.Hist objects with its axes (fitlib.hist.channel_hists; needs `hist`)."""
        from . import hist as _hist

        return _hist.channel_hists(self.model, self.as_dict(), which)

    def __repr__(self) -> str:
        return f"Histograms({len(self.prefit_total)} bins: {', '.join(self.as_dict())})"


@dataclass(frozen=True, eq=False, repr=False)
class Mapping:
    """The histograms of one mapping (-m KIND ARG…, rabbit's physics model): f(ν) over its own output channels."""

    key: str  # rabbit's key, e.g. 'Project ch0 pt'
    channels: list  # of Channel: the outputs, as the model's
    prefit: np.ndarray  # [m]
    prefit_variance: np.ndarray
    postfit: np.ndarray | None = None
    postfit_variance: np.ndarray | None = None
    data: np.ndarray | None = None  # f of the observed counts; only for a mapping that reads no masked bin
    data_variance: np.ndarray | None = None
    prefit_covariance: np.ndarray | None = None  # [m, m], across its channels too (--computeHistCov)
    postfit_covariance: np.ndarray | None = None
    prefit_chi2: float | None = None  # with data and unless --noChi2: the linear chi2 over all its outputs
    prefit_ndf: int | None = None  # outputs, less 1 for Normalize
    postfit_chi2: float | None = None
    postfit_ndf: int | None = None
    postfit_note: str | None = None  # why the postfit chi2 is NaN

    process_names = ()  # a mapping has the processes summed: no process axis (fitlib.hist.channel_hist duck type)

    def channel_hist(self, which, kind: str = "postfit"):
        """One output channel of 'prefit', 'postfit' or 'data' as a hist.Hist with variances (needs `hist`)."""
        from . import hist as _hist

        values = getattr(self, kind, None)
        if values is None:
            raise KeyError(f"mapping {self.key!r} has no {kind} histogram")
        return _hist.channel_hist(self, which, values, getattr(self, f"{kind}_variance"))

    def __repr__(self) -> str:
        return f"Mapping({self.key!r}: {len(self.prefit)} outputs in {[c.name for c in self.channels]})"


@dataclass(frozen=True, eq=False, repr=False)
class StoredFit:
    """One fit of a results file (the group /<fit name>/), under fitlib.FitResult's attribute names. What a run
    did not compute (impacts, scans, histograms, a Hessian, which the files do not store) is None or empty."""

    name: str  # 'data', 'asimov', 'toy1', 'pseudodata_<name>', …
    names: list  # parameter names
    x: np.ndarray  # fitted parameters (a POI is sqrt(mu) unless --allowNegativePOI)
    x0: np.ndarray  # the starting point
    uncertainties: np.ndarray  # sqrt(diag(covariance)); 0 for frozen parameters, NaN if unavailable
    gradient: np.ndarray
    covariance: np.ndarray  # [n, n]; zero rows and columns for frozen parameters
    correlation: np.ndarray
    frozen: np.ndarray  # bool
    blinded: list  # parameters reported in blinded coordinates
    nll: float  # the reduced NLL at the minimum (rabbit's nllvalreduced)
    nll_full: float  # reduced + the constants it drops (rabbit's nllvalfull)
    edm: float
    status: str  # how the minimisation ended, without the number that decided it
    converged: bool
    covariance_status: str
    iterations: int
    timing: dict  # minimize_seconds, postfit_seconds, total_seconds
    status_text: str | None = None  # the status with its number, where the file has it
    error: str | None = None  # where the fit or its postfit threw: the message
    hessian: np.ndarray | None = None
    bin_by_bin_beta: np.ndarray | None = None  # [bins, 1 or nprocs]
    saturated_gof: SaturatedGof | None = None
    impacts: Impacts | None = None  # traditional (--doImpacts)
    global_impacts: Impacts | None = None  # --globalImpacts
    scans: dict = field(default_factory=dict)  # parameter -> Scan
    scans2D: list = field(default_factory=list)  # of Scan2D, in the order given
    histograms: Histograms | None = None
    mappings: list = field(default_factory=list)  # of Mapping, in the order given

    @property
    def seconds(self) -> float:
        """Wall time of the minimisation (fitlib.FitResult.seconds)."""
        return self.timing.get("minimize_seconds", float("nan"))

    def __repr__(self) -> str:
        return f"StoredFit({self.name!r}: {self.status}, nll={self.nll!r}, {len(self.names)} parameters)"


@dataclass(frozen=True, eq=False)
class ToysSummary:
    """The toys together (/toys/): counts, timing and the mean and spread of each target's value and pull."""

    toys: int
    converged: int
    width: int  # toys minimised together
    seconds: float
    toys_per_second: float
    pull_reference: str  # 'generating_point' or 'observed_fit'
    parameters: list  # the POIs, then the NOIs
    value_mean: np.ndarray
    value_stddev: np.ndarray
    value_count: np.ndarray
    pull_mean: np.ndarray
    pull_stddev: np.ndarray
    pull_count: np.ndarray
    evaluations: int | None = None  # batched toys only
    columns: int | None = None
    active_fraction: float | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Results:
    """A results file: how it was made, the model, each fit by name (in the order they ran) and the toys' summary."""

    path: str
    run: RunInfo
    model: ModelInfo
    fits: dict  # name -> StoredFit
    toys: ToysSummary | None = None

    def __getitem__(self, name: str) -> StoredFit:
        try:
            return self.fits[name]
        except KeyError:
            raise KeyError(f"{self.path} has no fit {name!r}; its fits are {list(self.fits)}") from None

    def __iter__(self):
        return iter(self.fits.values())

    def __len__(self) -> int:
        return len(self.fits)

    def __repr__(self) -> str:
        return f"Results({self.path!r}: fits {list(self.fits)}{', toys' if self.toys else ''})"


def read_results(path) -> Results:
    """Reads a fitlib results file (fitlib-fit -o PATH). Raises ResultsError for a file that is not one, or of a
    layout version this reader does not know, and FileNotFoundError for a missing file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no results file {path!r}: fitlib-fit TENSOR -o {path} writes one")
    if not h5py.is_hdf5(path):
        raise ResultsError(f"{path!r} is not an HDF5 file, so not a fitlib results file (fitlib-fit TENSOR -o RESULT.hdf5 "
                           "writes one; the JSON summary beside it is read with json.load)")
    with h5py.File(path, "r") as f:
        version = _check_version(f, path)
        model = _model(f["model"], version)
        fits = {}
        for name in _strings(f["fits"]):
            if name not in f:
                raise ResultsError(f"{path!r} lists the fit {name!r} in 'fits' but has no group /{name}/: the file is "
                                   "damaged; rerun fitlib-fit (the command line is its attribute command_line)")
            fits[name] = _fit(f[name], name, model)
        run = RunInfo(
            fitlib_version=_attr(f, "fitlib_version", ""),
            format_version=version,
            input_path=_attr(f, "input_path", ""),
            input_sha256=_attr(f, "input_sha256", ""),
            command_line=_attr(f, "command_line", ""),
            options=json.loads(_attr(f, "options", "{}")),
        )
        toys = _toys(f["toys"]) if "toys" in f else None
    return Results(path=path, run=run, model=model, fits=fits, toys=toys)


def _check_version(f: h5py.File, path: str) -> int:
    if "format_version" not in f.attrs or "fitlib_version" not in f.attrs:
        raise ResultsError(f"{path!r} is an HDF5 file but not a fitlib results file (no root attribute format_version)"
                           f"{_what_else(f)}; fitlib-fit TENSOR -o RESULT.hdf5 writes one")
    version = int(f.attrs["format_version"])
    if version > max(FORMAT_VERSIONS):
        raise ResultsError(f"{path!r} has layout version {version}, written by fitlib {_attr(f, 'fitlib_version', '?')}; "
                           f"this reader knows versions {FORMAT_VERSIONS[0]} to {FORMAT_VERSIONS[-1]}: update fitlib's "
                           "Python package to the fitlib that wrote the file")
    if version < min(FORMAT_VERSIONS) or "model" not in f:
        raise ResultsError(f"{path!r} has layout version {version} (fitlib {_attr(f, 'fitlib_version', '?')}), before "
                           f"the /model/ group of version {FORMAT_VERSIONS[0]} that this reader needs: rerun the fit with "
                           "this fitlib's fitlib-fit (its command line is the file's attribute command_line)")
    return version


def _what_else(f: h5py.File) -> str:
    keys = set(f.keys())
    if "meta" in keys and any(k == "results" or k.startswith("results_") for k in keys):
        return " but rabbit's fitresults layout (read it with rabbit.io_tools.get_fitresult)"
    if {"hnorm", "hnorm_sparse"} & keys or "hdata_obs" in keys:
        return " but a rabbit input tensor (fit it with fitlib-fit TENSOR -o RESULT.hdf5)"
    return ""


def _attr(obj, name: str, default=None):
    v = obj.attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else v


def _strings(ds) -> list:
    return ds.asstr()[...].tolist()


def _array(group, name: str, dtype=float):
    return np.asarray(group[name][...], dtype=dtype) if name in group else None


def _bools(group, name: str, n: int) -> np.ndarray:
    return np.asarray(group[name][...], dtype=bool) if name in group else np.zeros(n, dtype=bool)


def _axis(ds) -> Axis:
    kind = _attr(ds, "kind")
    category = kind in _CATEGORY_KINDS
    return Axis(
        kind=kind,
        name=_attr(ds, "name", ""),
        label=_attr(ds, "label", ""),
        edges=np.empty(0) if category else np.asarray(ds[...], dtype=float),
        categories=_strings(ds) if category else [],
        transform=_attr(ds, "transform", ""),
        underflow=bool(_attr(ds, "underflow", 0)),
        overflow=bool(_attr(ds, "overflow", 0)),
        circular=bool(_attr(ds, "circular", 0)),
        growth=bool(_attr(ds, "growth", 0)),
    )


def _channels(g) -> list:
    """The channels of a group as the model's are written (model/, mappings/<i>/)."""
    names = _strings(g["channels"])
    bins = np.asarray(g["channel_bins"][...], dtype=np.int64)
    start = np.asarray(g["channel_start"][...], dtype=np.int64) if "channel_start" in g else np.cumsum(bins) - bins
    masked = _bools(g, "channel_masked", len(names))
    flow = _bools(g, "channel_flow", len(names))
    out = []
    for i, name in enumerate(names):
        axes = []
        if "channel_axes" in g and str(i) in g["channel_axes"]:
            ga = g["channel_axes"][str(i)]
            axes = [_axis(ga[str(k)]) for k in range(len(ga))]
        out.append(Channel(name=name, nbins=int(bins[i]), start=int(start[i]), masked=bool(masked[i]),
                           flow=bool(flow[i]), axes=axes))
    return out


def _model(m, version: int) -> ModelInfo:
    parameters = _strings(m["parameters"])
    n = len(parameters)
    groups = {}
    if "groups" in m:
        members = np.asarray(m["group_members"][...], dtype=np.int64)
        offsets = np.asarray(m["group_offsets"][...], dtype=np.int64)
        for k, g in enumerate(_strings(m["groups"])):
            groups[g] = [parameters[i] for i in members[offsets[k] : offsets[k + 1]]]
    return ModelInfo(
        channels=_channels(m),
        process_names=_strings(m["processes"]),
        signal=_bools(m, "process_signal", len(_strings(m["processes"]))),
        parameter_names=parameters,
        parameter_kind=_strings(m["parameter_kind"]),
        constrained=_bools(m, "parameter_constrained", n),
        prefit_uncertainty=_array(m, "prefit_uncertainty"),
        groups=groups,
    )


def _impacts(g) -> Impacts:
    return Impacts(targets=_strings(g["targets"]), sources=_strings(g["sources"]), values=_array(g, "values"),
                   groups=_strings(g["groups"]), grouped=_array(g, "grouped"))


def _chi2_group(g) -> Chi2:
    return Chi2(chi2=_array(g, "chi2"), ndf=_array(g, "ndf", np.int64), total_chi2=float(_attr(g, "total_chi2")),
                total_ndf=int(_attr(g, "total_ndf")), note=_attr(g, "note"))


def _histograms(h, model: ModelInfo) -> Histograms:
    def blocks(name):
        if name not in h:
            return None
        return [np.asarray(h[name][str(c)][...], dtype=float) for c in range(len(h[name]))]

    return Histograms(
        model=model,
        **{k: _array(h, k) for k in ("data", "data_variance", "prefit", "prefit_total", "prefit_variance", "postfit",
                                     "postfit_total", "postfit_variance", "prefit_process_variance",
                                     "postfit_process_variance", "prefit_variations", "postfit_variations")},
        prefit_covariance=blocks("prefit_covariance"),
        postfit_covariance=blocks("postfit_covariance"),
        prefit_chi2=_chi2_group(h["prefit_chi2"]) if "prefit_chi2" in h else None,
        postfit_chi2=_chi2_group(h["postfit_chi2"]) if "postfit_chi2" in h else None,
    )


def _mapping(g) -> Mapping:
    def attr(name, kind):
        return kind(g.attrs[name]) if name in g.attrs else None

    return Mapping(
        key=_attr(g, "key", ""),
        channels=_channels(g),
        **{k: _array(g, k) for k in ("prefit", "prefit_variance", "postfit", "postfit_variance", "data", "data_variance",
                                     "prefit_covariance", "postfit_covariance")},
        prefit_chi2=attr("prefit_chi2", float),
        prefit_ndf=attr("prefit_ndf", int),
        postfit_chi2=attr("postfit_chi2", float),
        postfit_ndf=attr("postfit_ndf", int),
        postfit_note=_attr(g, "postfit_note"),
    )


def _fit(g, name: str, model: ModelInfo) -> StoredFit:
    names = _strings(g["parameters"])
    scans = {}
    for p in g.get("scans", {}):
        s = g["scans"][p]
        scans[p] = Scan(parameter=p, values=_array(s, "values"), dnll=_array(s, "dnll"), status=_strings(s["status"]))
    scans2D = []
    if "scans2D" in g:
        for k in range(len(g["scans2D"])):
            s = g["scans2D"][str(k)]
            dnll = _array(s, "dnll")
            scans2D.append(Scan2D(parameters=tuple(_strings(s["parameters"])), values_x=_array(s, "values_x"),
                                  values_y=_array(s, "values_y"), dnll=dnll,
                                  status=np.array(_strings(s["status"]), dtype=object).reshape(dnll.shape)))
    gof = None
    if "saturated_gof" in g:
        a = g["saturated_gof"].attrs
        gof = SaturatedGof(chi2=float(a["chi2"]), ndf=int(a["ndf"]), p_value=float(a["p_value"]))
    mappings = [_mapping(g["mappings"][str(i)]) for i in range(len(g["mappings"]))] if "mappings" in g else []
    nan = float("nan")
    return StoredFit(
        name=name,
        names=names,
        x=_array(g, "postfit"),
        x0=_array(g, "prefit"),
        uncertainties=_array(g, "uncertainty"),
        gradient=_array(g, "gradient"),
        covariance=_array(g, "covariance"),
        correlation=_array(g, "correlation"),
        frozen=_bools(g, "frozen", len(names)),
        blinded=_strings(g["blinded"]) if "blinded" in g else [],
        nll=float(_attr(g, "nll_reduced", nan)),
        nll_full=float(_attr(g, "nll_full", nan)),
        edm=float(_attr(g, "edm", nan)),
        status=_attr(g, "status", ""),
        converged=bool(_attr(g, "converged", 0)),
        covariance_status=_attr(g, "covariance_status", ""),
        iterations=int(_attr(g, "iterations", 0)),
        timing={k: float(g.attrs[k]) for k in ("minimize_seconds", "postfit_seconds", "total_seconds") if k in g.attrs},
        status_text=_attr(g, "status_text"),
        error=_attr(g, "error"),
        hessian=_array(g, "hessian"),
        bin_by_bin_beta=_array(g, "bin_by_bin_beta"),
        saturated_gof=gof,
        impacts=_impacts(g["impacts"]) if "impacts" in g else None,
        global_impacts=_impacts(g["global_impacts"]) if "global_impacts" in g else None,
        scans=scans,
        scans2D=scans2D,
        histograms=_histograms(g["histograms"], model) if "histograms" in g else None,
        mappings=mappings,
    )


def _toys(t) -> ToysSummary:
    a = t.attrs

    def opt(name, kind):
        return kind(a[name]) if name in a else None

    return ToysSummary(
        toys=int(a["toys"]),
        converged=int(a["converged"]),
        width=int(a.get("width", 1)),
        seconds=float(a.get("seconds", np.nan)),
        toys_per_second=float(a.get("toys_per_second", np.nan)),
        pull_reference=_attr(t, "pull_reference", ""),
        parameters=_strings(t["parameters"]),
        value_mean=_array(t, "value_mean"),
        value_stddev=_array(t, "value_stddev"),
        value_count=_array(t, "value_count", np.int64),
        pull_mean=_array(t, "pull_mean"),
        pull_stddev=_array(t, "pull_stddev"),
        pull_count=_array(t, "pull_count", np.int64),
        evaluations=opt("evaluations", int),
        columns=opt("columns", int),
        active_fraction=opt("active_fraction", float),
    )
