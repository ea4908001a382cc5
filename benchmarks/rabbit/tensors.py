# SPDX-License-Identifier: MIT
"""Input tensors for the rabbit comparison, all written by rabbit's own `TensorWriter`.

Runs inside the `.venv-rabbit` environment (it imports rabbit, hist, h5py and hdf5plugin).

* `write_test_tensor` runs rabbit's own `tests/make_tensor.py`, which the rabbit-fit wheel installs
  as `site-packages/tests/make_tensor.py` (2 channels + 1 masked channel, processes sig/bkg/bkg_2,
  norm and shape systematics, asymmetric ones, NOIs, unconstrained ones).
* `write_synthetic` builds a one-channel analysis of `nbins` bins, 8 processes (1 signal) and
  `nsyst` log-normal systematics (every tenth a normalisation one, the others smooth shape
  variations, most of them confined to a window of the bins so that the sparse format pays off),
  with MC statistical variances large enough that the bin-by-bin term matters, and pseudo-data
  drawn from a shifted truth (signal strength 1.08, nuisances ~ N(0, 0.7²), MC-stat fluctuations).
* `recompress` rewrites a tensor's numeric datasets with Blosc2 (HDF5 filter 32026; LZ4, level 5,
  byte shuffle: what rabbit's current TensorWriter writes). rabbit-fit 0.2.5, the latest release on
  PyPI, still writes them with gzip level 4, so its own output is the "gzip" variant.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

NPROC = 8
SIGNAL_STRENGTH_TRUE = 1.08
THETA_TRUE_SIGMA = 0.7


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# rabbit's own test tensor.

def make_tensor_script() -> Path:
    """Path of rabbit's tests/make_tensor.py as installed by the rabbit-fit wheel."""
    import rabbit

    script = Path(rabbit.__file__).resolve().parent.parent / "tests" / "make_tensor.py"
    if not script.exists():
        raise FileNotFoundError(f"{script} not found: this rabbit-fit release does not ship tests/make_tensor.py")
    return script


def write_test_tensor(outdir: Path, name: str, sparse: bool = False, symmetrize_all: bool = False) -> Path:
    """Runs rabbit's tests/make_tensor.py (TensorWriter, fixed seed 42) and returns the file written."""
    outdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(make_tensor_script()), "-o", str(outdir), "--outname", name]
    if sparse:
        cmd.append("--sparse")
    if symmetrize_all:
        cmd.append("--symmetrizeAll")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}")
    return outdir / f"{name}.hdf5"


# --------------------------------------------------------------------------------------------
# Synthetic analyses.

def _smooth_variation(rng, x, window: bool):
    """A smooth relative log-variation r(x): a random Chebyshev series of degree 3 with an
    amplitude of 0.5-3 %, optionally multiplied by a sin² bump that is zero outside a random
    window of 10-50 % of the range (such variations leave most cells of the logk tensor zero)."""
    import numpy as np

    u = 2.0 * x - 1.0
    coef = rng.normal(size=4) / np.arange(1, 5)
    r = np.polynomial.chebyshev.chebval(u, coef)
    r *= rng.uniform(0.005, 0.03) / max(np.max(np.abs(r)), 1e-12)
    if window:
        width = rng.uniform(0.1, 0.5)
        lo = rng.uniform(0.0, 1.0 - width)
        t = (x - lo) / width
        r = np.where((t > 0) & (t < 1), r * np.sin(np.pi * np.clip(t, 0, 1)) ** 2, 0.0)
    return r


def synthetic_name(nbins: int, nsyst: int, sparse: bool) -> str:
    return f"synth_b{nbins}_s{nsyst}" + ("_sparse" if sparse else "")


def write_synthetic(path: Path, nbins: int, nsyst: int, sparse: bool = False, seed: int | None = None) -> dict:
    """Writes one synthetic analysis with rabbit's TensorWriter to `path` and returns a summary.

    The model does not depend on `sparse` (same seed), so the dense and sparse files of one grid
    point describe the same likelihood."""
    import hist
    import numpy as np
    from rabbit import tensorwriter

    if seed is None:
        seed = 1_000_003 * nbins + nsyst
    rng = np.random.default_rng(seed)
    x = (np.arange(nbins) + 0.5) / nbins
    axis = hist.axis.Regular(nbins, 0.0, 1.0, name="x")

    procs = ["sig"] + [f"bkg{i}" for i in range(1, NPROC)]
    norm = np.empty((nbins, NPROC))
    norm[:, 0] = 15.0 + 200.0 * np.exp(-0.5 * ((x - 0.45) / 0.08) ** 2)
    for p in range(1, NPROC):
        a, c, d = rng.uniform(20, 150), rng.uniform(0, 3), rng.uniform(0, 1)
        norm[:, p] = a * np.exp(-c * x) * (1.0 + d * x * x)
    # MC statistics: r_p simulated events per expected event, weight 1/r_p, sumw2 = N / r_p
    mc_events_per_event = np.concatenate([[2.0], rng.uniform(0.5, 4.0, NPROC - 1)])
    sumw2 = norm / mc_events_per_event

    writer = tensorwriter.TensorWriter(sparse=sparse)
    writer.add_channel([axis], "ch0")
    for p, name in enumerate(procs):
        h = hist.Hist(axis, storage=hist.storage.Weight())
        h.view().value = norm[:, p]
        h.view().variance = sumw2[:, p]
        writer.add_process(h, name, "ch0", signal=(p == 0))

    # systematics; the true log-variation of each cell accumulates theta_true * logk
    theta_true = rng.normal(0.0, THETA_TRUE_SIGMA, nsyst)
    logvar_true = np.zeros_like(norm)
    n_norm = n_shape = n_windowed = 0
    for s in range(nsyst):
        name = f"syst{s:04d}"
        if s % 10 == 0:
            chosen = sorted(rng.choice(NPROC, size=rng.integers(1, 4), replace=False).tolist())
            kappas = [1.0 + rng.uniform(0.01, 0.08) for _ in chosen]
            writer.add_norm_systematic(name, [procs[p] for p in chosen], "ch0", kappas)
            for p, k in zip(chosen, kappas):
                logvar_true[:, p] += theta_true[s] * np.log(k)
            n_norm += 1
            continue
        chosen = [p for p in range(NPROC) if rng.random() < 0.3] or [int(rng.integers(NPROC))]
        window = rng.random() < 0.6
        n_windowed += window
        for p in chosen:
            r = _smooth_variation(rng, x, window)
            writer.add_systematic(norm[:, p] * np.exp(r), name, procs[p], "ch0")
            logvar_true[:, p] += theta_true[s] * r
        n_shape += 1

    # pseudo-data: shifted truth, MC-statistical fluctuation of the templates, Poisson
    nu = norm * np.exp(logvar_true)
    nu[:, 0] *= SIGNAL_STRENGTH_TRUE
    nu_b = nu.sum(axis=1)
    mc_rel = np.sqrt(sumw2.sum(axis=1)) / norm.sum(axis=1)
    nu_b *= np.clip(1.0 + mc_rel * rng.normal(size=nbins), 0.05, None)
    data = rng.poisson(nu_b).astype(float)
    hdata = hist.Hist(axis, storage=hist.storage.Double())
    hdata.view()[...] = data
    writer.add_data(hdata, "ch0")

    path.parent.mkdir(parents=True, exist_ok=True)
    writer.write(outfolder=str(path.parent), outfilename=path.name)
    return dict(nbins=nbins, nsyst=nsyst, nproc=NPROC, sparse=sparse, seed=seed, norm_systs=n_norm,
                shape_systs=n_shape, windowed_shape_systs=n_windowed,
                mean_yield_per_bin=float(norm.sum(axis=1).mean()),
                mean_mc_rel_unc=float(mc_rel.mean()), mean_data_rel_unc=float(np.mean(1 / np.sqrt(np.maximum(data, 1)))))


# --------------------------------------------------------------------------------------------
# Compression.

def _is_pickle_group(obj) -> bool:
    return "narf_h5py_pickle_protocol_version" in obj.attrs


def recompress(src: Path, dst: Path, codec: str = "blosc2") -> None:
    """Copies the tensor `src` to `dst`, rewriting every flat numeric dataset written by
    TensorWriter (those with chunks and an `original_shape` attribute) with `codec`:
    "blosc2" (Blosc2 LZ4 level 5 + byte shuffle, filter 32026; sparse `values` uncompressed, as
    rabbit's current writer does) or "gzip" (deflate level 4). Only chunks holding a non-zero are
    written (unwritten chunks read back as 0), attributes are kept, string datasets, `hnoiidxs` and
    the pickled `meta` group are copied unchanged."""
    import h5py
    import hdf5plugin
    import numpy as np

    def filter_kwargs(parent_name: str, name: str) -> dict:
        if codec == "gzip":
            return dict(compression="gzip", compression_opts=4)
        if codec == "blosc2":
            if parent_name.endswith("_sparse") and name == "values":
                return {}
            return dict(hdf5plugin.Blosc2(cname="lz4", clevel=5, filters=hdf5plugin.Blosc2.SHUFFLE))
        raise ValueError(f"unknown codec {codec!r}")

    def copy_group(gi, go):
        for key, value in gi.attrs.items():
            go.attrs[key] = value
        for name, obj in gi.items():
            if isinstance(obj, h5py.Group):
                if _is_pickle_group(obj):
                    gi.copy(obj, go, name=name)
                else:
                    copy_group(obj, go.create_group(name))
                continue
            numeric = obj.dtype.kind in "fiu" and obj.chunks is not None and "original_shape" in obj.attrs
            if not numeric or obj.size == 0:
                gi.copy(obj, go, name=name)
                continue
            out = go.create_dataset(name, shape=obj.shape, dtype=obj.dtype, chunks=obj.chunks,
                                    **filter_kwargs(gi.name, name))
            step = obj.chunks[0]
            for start in range(0, obj.shape[0], step):
                block = obj[start:start + step]
                if np.count_nonzero(block):
                    out[start:start + step] = block
            for key, value in obj.attrs.items():
                out.attrs[key] = value

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    with h5py.File(src, "r") as fi, h5py.File(tmp, "w") as fo:
        copy_group(fi, fo)
    tmp.replace(dst)


def same_content(a: Path, b: Path) -> bool:
    """True if two tensor files hold the same datasets with the same values (filters aside)."""
    import h5py
    import numpy as np

    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names_a, names_b = [], []
        fa.visit(names_a.append)
        fb.visit(names_b.append)
        if sorted(names_a) != sorted(names_b):
            return False
        for name in names_a:
            oa, ob = fa[name], fb[name]
            if isinstance(oa, h5py.Dataset):
                va, vb = oa[()], ob[()]
                if oa.dtype.kind == "O":
                    if [list(np.atleast_1d(v)) for v in va] != [list(np.atleast_1d(v)) for v in vb]:
                        return False
                elif not np.array_equal(va, vb):
                    return False
    return True


def channel_layout(path: Path) -> list[dict]:
    """The channels of a tensor in file order, decoded from its `meta` pickle (rabbit's
    `channel_info`): name, masked, flow, bins, global start/stop bin and the axes (name, type,
    edges; with `flow` the bins include under/overflow)."""
    import h5py
    import numpy as np
    from wums import ioutils

    with h5py.File(path, "r") as f:
        meta = ioutils.pickle_load_h5py(f["meta"])
    out, start = [], 0
    for name, info in meta["channel_info"].items():
        flow = bool(info.get("flow", False))
        axes = [dict(name=str(a.name), type=type(a).__name__, edges=np.asarray(a.edges, dtype=float).tolist())
                for a in info["axes"]]
        nbins = int(np.prod([a.extent if flow else a.size for a in info["axes"]]))
        out.append(dict(name=str(name), masked=bool(info.get("masked", False)), flow=flow, bins=nbins,
                        start=start, stop=start + nbins, axes=axes))
        start += nbins
    return out


def write_sidecar(path: Path, info: dict) -> None:
    """Stores the generation parameters next to a tensor, so that `--keep` can reuse it."""
    path.with_suffix(".params.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")


def read_sidecar(path: Path) -> dict | None:
    side = path.with_suffix(".params.json")
    if not (path.exists() and side.exists()):
        return None
    try:
        return json.loads(side.read_text())
    except json.JSONDecodeError:
        return None
