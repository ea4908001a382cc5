#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Data preparation for the real-data NNPDF example (issue 20), first part: the data and its covariance.

Reads NNPDF's commondata (PyPI's nnpdf-data 4.1.5 wheel, GPL-3.0-or-later, downloaded at run time and never
committed) for the proton DIS sets of NNPDF4.0, applies NNPDF4.0's kinematic cuts, builds the experimental
covariance exactly as validphys does, checks it against validphys' own regression tables (nnpdf 4.1.5 wheel),
and writes one HDF5 file that the C++ side reads (no YAML there). Spec: shared/reference/nnpdf-example.md
sections 1.2-1.5, 1.9, D1 and 4.

Setup (once; binary wheels only, nothing is compiled):
    python3 -m venv .venv-nnpdf && .venv-nnpdf/bin/pip install --only-binary=:all: numpy pyyaml h5py
Run:
    .venv-nnpdf/bin/python examples/nnpdf/prepare.py [--out /tmp/nnpdf-prep] [--no-verify]

Outputs go to --out (default /tmp/nnpdf-prep), never into the repository: wheels/ (the downloaded wheels) and
nnpdf_dis.h5. Exit status 1 when any check FAILs.

HDF5 layout of nnpdf_dis.h5 (n = points after cuts, D = datasets, K = correlated systematic columns):
  attributes on /: source ("nnpdf-data 4.1.5"), source_sha256, license, q2min, w2min, cut
  /datasets/name [D] str, /datasets/variant [D] str, /datasets/process [D] str (DIS_NC, DIS_CC)
  /datasets/offset [D+1] int64    points of dataset d are rows offset[d] .. offset[d+1]-1
  /datasets/ndata_uncut [D] int64
  /points/x, /points/Q2, /points/y [n] float64   kinematics (bin mid values, as validphys reads them); y is NaN
                                  where the commondata gives none (SLAC: 0.0 in the file; F2 needs no y)
  /points/central [n] float64     experimental central values
  /points/dataset [n] int32       dataset index of each point
  /points/index_uncut [n] int32   the point's index in its dataset before cuts
  /covariance/experimental [n,n] float64   validphys' experimental covariance (MULT scaled by the data)
  /covariance/diag_add [n]        stat^2 + sum of squared ADD uncorrelated systematics (absolute)
  /covariance/diag_mult [n]       sum of squared MULT uncorrelated systematics, as fractions of the central value
  /covariance/sys_add [n,K]       correlated ADD systematics, absolute (zero where a column does not apply)
  /covariance/sys_mult [n,K]      correlated MULT systematics, as fractions of the central value
  /covariance/sys_name [K] str    the column's correlation name: "<dataset>:CORR<i>" for a systematic correlated
                                  within one dataset, the special name (e.g. HC_sys1) for one shared by datasets
  For central values c (the data, or t0 predictions for the t0 covariance), with S = sys_add + diag(c) sys_mult:
      C(c) = diag(diag_add + diag_mult * c^2) + S S^T
  C(data) equals /covariance/experimental to rounding (checked below).
"""
import argparse
import hashlib
import os
import subprocess
import sys
import zipfile

try:
    import numpy as np
    import yaml
    import h5py
except ImportError as e:  # pragma: no cover
    sys.exit(f"prepare.py: {e}. Set up the venv first:\n"
             "  python3 -m venv .venv-nnpdf && .venv-nnpdf/bin/pip install --only-binary=:all: numpy pyyaml h5py")

# SHA-256 of the wheels, as PyPI's index publishes them (PEP 691 JSON of /simple/<name>/); they also equal the
# hashes recorded in nnpdf-example.md section 1.1.
NNPDF_DATA = ("nnpdf-data", "4.1.5", "nnpdf_data-4.1.5-py3-none-any.whl",
              "6ed209add4d162e3b9e4801c7b538a28867e479b6ffd4781e774526a3490269a")
NNPDF = ("nnpdf", "4.1.5", "nnpdf-4.1.5-py3-none-any.whl",
         "c8aec48c06543e35fedd17c1f204e4823dce82d76d0a5c1a2a23b46c21896afa")

# NNPDF4.0's proton DIS sets with the variants of nnpdf40-like.yml (section 1.3). Not used: BCDMS *-HEPDATA (broken
# norm column, section 1.9), NMC F2d/F2p (a ratio, not linear in the PDF), deuteron/nuclear targets, HERA charm/bottom.
DATASETS = [
    ("BCDMS_NC_NOTFIXED_P_EM-F2", "legacy_dw"),
    ("SLAC_NC_NOTFIXED_P_EM-F2", "legacy_dw"),
    ("NMC_NC_NOTFIXED_P_EM-SIGMARED", "legacy"),
    ("HERA_NC_318GEV_EP-SIGMARED", None),
    ("HERA_NC_318GEV_EM-SIGMARED", None),
    ("HERA_NC_300GEV_EP-SIGMARED", None),
    ("HERA_NC_251GEV_EP-SIGMARED", None),
    ("HERA_NC_225GEV_EP-SIGMARED", None),
    ("HERA_CC_318GEV_EP-SIGMARED", None),
    ("HERA_CC_318GEV_EM-SIGMARED", None),
]
# NNPDF's counts after cuts (nnpdf-example.md sections 1.3 and 4, item 3).
EXPECTED_CUT_COUNTS = {
    "BCDMS_NC_NOTFIXED_P_EM-F2": 333, "SLAC_NC_NOTFIXED_P_EM-F2": 33, "NMC_NC_NOTFIXED_P_EM-SIGMARED": 204,
    "HERA_NC_318GEV_EP-SIGMARED": 377, "HERA_NC_318GEV_EM-SIGMARED": 159, "HERA_NC_300GEV_EP-SIGMARED": 70,
    "HERA_NC_251GEV_EP-SIGMARED": 254, "HERA_NC_225GEV_EP-SIGMARED": 204, "HERA_CC_318GEV_EP-SIGMARED": 39,
    "HERA_CC_318GEV_EM-SIGMARED": 42,
}
# validphys/cuts/defaults.yaml and the DIS_ALL rule of filters.yaml: Q2 > q2min and Q2 (1 - x) / x > w2min (no M_P^2).
Q2MIN, W2MIN = 3.49, 12.5
INTRA = ("UNCORR", "CORR", "THEORYUNCORR", "THEORYCORR")  # validphys/covmats.py INTRA_DATASET_SYS_NAME

FAILED = []


def check(name, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(spec, cache):
    """pip download of one pinned wheel into cache (reused when present), then its SHA-256 checked."""
    name, version, filename, digest = spec
    path = os.path.join(cache, filename)
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--quiet", f"{name}=={version}", "-d", cache], check=True)
    got = sha256(path)
    check(f"sha256 {filename}", got == digest, got)
    if got != digest:
        sys.exit(1)
    return path


def load_yaml(zf, member):
    with zf.open(member) as f:
        return yaml.load(f, Loader=yaml.CSafeLoader)


def load_dataset(zf, fullname, variant):
    """One observable as validphys' load_commondata reads it, before cuts."""
    folder, obs = fullname.rsplit("_", 1)
    base = f"nnpdf_data/commondata/{folder}/"
    meta = load_yaml(zf, base + "metadata.yaml")
    (o,) = [o for o in meta["implemented_observables"] if o["observable_name"] == obs]
    o = dict(o)
    if variant is not None:
        o.update(o["variants"][variant])  # a variant swaps data_central and/or data_uncertainties
    data = np.asarray(load_yaml(zf, base + o["data_central"])["data_central"], dtype=float)
    n = o["ndata"]
    assert data.shape == (n,), (fullname, data.shape)

    kin = {}
    bins = load_yaml(zf, base + o["kinematics"]["file"])["bins"]
    assert len(bins) == n
    for var in ("x", "Q2", "y"):
        if var in bins[0]:
            vals = []
            for b in bins:
                d = b[var]
                vals.append(d["mid"] if d.get("mid") is not None else 0.5 * (d["max"] + d["min"]))
            kin[var] = np.asarray(vals, dtype=float)
    assert "x" in kin and "Q2" in kin and "y" in kin, fullname
    if not kin["y"].any():  # SLAC's file has y = 0.0 for every point: not given (its F2 needs no y)
        kin["y"] = np.full(n, np.nan)

    # Uncertainty columns (name, treatment, type, values), files concatenated in order as validphys does.
    stat = np.zeros(n)
    columns = []
    for ufile in o["data_uncertainties"]:
        u = load_yaml(zf, base + ufile)
        assert len(u["bins"]) == n
        for cname, d in u["definitions"].items():
            vals = np.asarray([b[cname] for b in u["bins"]], dtype=float)
            if cname.lower() == "stat":  # commondataparser._check_if_statistical
                assert d["treatment"] == "ADD" and d["type"] == "UNCORR"
                stat = vals
            else:
                columns.append((d["treatment"], d["type"], vals))
    return dict(name=fullname, variant=variant or "default", process=o["process_type"], ndata=n, data=data,
                stat=stat, columns=columns, **kin)


def apply_cuts(ds):
    x, q2 = ds["x"], ds["Q2"]
    keep = (q2 > Q2MIN) & (q2 * (1 - x) / x > W2MIN)
    out = dict(ds)
    for k in ("x", "Q2", "y", "data", "stat"):
        out[k] = ds[k][keep]
    out["columns"] = [(t, ty, v[keep]) for t, ty, v in ds["columns"]]
    out["index_uncut"] = np.nonzero(keep)[0]
    return out


def systematics(ds, cv=None):
    """Absolute systematic columns (name, type, values), as CommonData.systematic_errors(cv): ADD as read, MULT
    turned into percent of the data (values * (100 / data), commondataparser) and back with cv (pct * cv / 100)."""
    data = ds["data"]
    cv = data if cv is None else cv
    out = []
    for treatment, ty, v in ds["columns"]:
        if ty == "SKIP":
            continue
        if treatment == "MULT":
            pct = v * (100 / data)
            out.append((ty, pct * cv / 100))
        else:
            assert treatment == "ADD"
            out.append((ty, v))
    return out


def covariance(datasets, cvs=None):
    """validphys' dataset_inputs_covmat_from_systematics (weights 1): per dataset diag(stat^2 + UNCORR^2) +
    CORR CORR^T, plus the special columns joined by name across datasets."""
    sizes = [len(d["data"]) for d in datasets]
    off = np.concatenate([[0], np.cumsum(sizes)])
    C = np.zeros((off[-1], off[-1]))
    special = {}  # name -> column over all points
    for k, ds in enumerate(datasets):
        sl = slice(off[k], off[k + 1])
        sys_ = systematics(ds, None if cvs is None else cvs[k])
        diag = ds["stat"] ** 2
        for ty, v in sys_:
            if ty in ("UNCORR", "THEORYUNCORR"):
                diag = diag + v ** 2
        corr = [v for ty, v in sys_ if ty in ("CORR", "THEORYCORR")]
        block = np.diag(diag)
        if corr:
            S = np.stack(corr, axis=1)
            block = block + S @ S.T
        C[sl, sl] = block
        for ty, v in sys_:
            if ty not in INTRA:
                col = special.setdefault(ty, np.zeros(off[-1]))
                assert not col[sl].any(), f"{ty} twice in {ds['name']}"
                col[sl] = v
    if special:
        S = np.stack(list(special.values()), axis=1)
        C = C + S @ S.T
    return C


def decomposition(datasets):
    """The covariance as diag_add, diag_mult and the correlated columns (see the layout in the docstring)."""
    sizes = [len(d["data"]) for d in datasets]
    off = np.concatenate([[0], np.cumsum(sizes)])
    n = off[-1]
    diag_add, diag_mult = np.zeros(n), np.zeros(n)
    cols = {}  # name -> (add column, mult column)
    for k, ds in enumerate(datasets):
        sl = slice(off[k], off[k + 1])
        diag_add[sl] += ds["stat"] ** 2
        ncorr = 0
        for treatment, ty, v in ds["columns"]:
            if ty == "SKIP":
                continue
            frac = v / ds["data"] if treatment == "MULT" else v
            if ty in ("UNCORR", "THEORYUNCORR"):
                (diag_mult if treatment == "MULT" else diag_add)[sl] += frac ** 2
                continue
            if ty in ("CORR", "THEORYCORR"):
                name = f"{ds['name']}:CORR{ncorr}"
                ncorr += 1
            else:
                name = ty
            a, m = cols.setdefault(name, (np.zeros(n), np.zeros(n)))
            (m if treatment == "MULT" else a)[sl] = frac
    names = list(cols)
    sys_add = np.stack([cols[c][0] for c in names], axis=1)
    sys_mult = np.stack([cols[c][1] for c in names], axis=1)
    return diag_add, diag_mult, sys_add, sys_mult, names


def read_regression(zf, name):
    """A validphys regression table (tab separated, 3 header rows, 3 index columns) as
    (row datasets, column datasets, values)."""
    with zf.open(f"validphys/tests/regressions/{name}") as f:
        lines = f.read().decode().splitlines()
    header = [line.split("\t") for line in lines[:3]]
    rows = [line.split("\t") for line in lines[3:] if line and line.split("\t")[0] not in ("group", "")]
    coldatasets = np.array(header[1][3:])
    rowdatasets = np.array([r[1] for r in rows])
    values = np.array([[float(v) for v in r[3:]] for r in rows])
    return rowdatasets, coldatasets, values


def read_predictions(zf, name):
    with zf.open(f"validphys/tests/regressions/{name}") as f:
        lines = f.read().decode().splitlines()
    rows = [line.split("\t") for line in lines[1:] if line]
    return np.array([[float(v) for v in r[1:]] for r in rows])


def max_rel(A, B):
    """max |A - B| scaled by sqrt(B_ii B_jj), and max |A - B| / max |B|."""
    d = np.sqrt(np.diag(B))
    return np.max(np.abs(A - B) / np.outer(d, d)), np.max(np.abs(A - B)) / np.max(np.abs(B))


def verify(datasets_uncut, datasets, wheel_nnpdf):
    zf = zipfile.ZipFile(wheel_nnpdf)
    hera = "HERA_NC_318GEV_EP-SIGMARED"
    k = [d["name"] for d in datasets].index(hera)

    # 1. Experimental covariance of HERA NC e+p 920 without cuts against test_expcovmat.csv (use_cuts nocuts).
    rowds, colds, table = read_regression(zf, "test_expcovmat.csv")
    ref = table[np.ix_(rowds == hera, colds == hera)]
    mine = covariance([datasets_uncut[k]])
    ok = mine.shape == ref.shape
    r1, r2 = max_rel(mine, ref) if ok else (np.inf, np.inf)
    check("HERA 920 experimental covariance vs validphys test_expcovmat.csv", ok and r2 <= 1e-15 and r1 <= 1e-14,
          f"{mine.shape[0]}x{mine.shape[1]} vs {ref.shape}; max|dC|/max|C| = {r2:.2e} (tolerance 1e-15), "
          f"max|dC|/sqrt(CiiCjj) = {r1:.2e} (tolerance 1e-14)")

    # 2. The same block inside the covariance of all sets (special names must not leak into it).
    allcov = covariance(datasets_uncut)
    off = np.concatenate([[0], np.cumsum([d["ndata"] for d in datasets_uncut])])
    blk = allcov[off[k]:off[k + 1], off[k]:off[k + 1]]
    r1, r2 = max_rel(blk, ref)
    check("HERA 920 block of the joint covariance vs test_expcovmat.csv", r2 <= 1e-15 and r1 <= 1e-14,
          f"max|dC|/max|C| = {r2:.2e}, max|dC|/sqrt(CiiCjj) = {r1:.2e}")

    # 3. Cut central values against test_cv.csv (rows 0-376 are HERA 920 after cuts).
    with zf.open("validphys/tests/regressions/test_cv.csv") as f:
        cv = np.array([float(line.split("\t")[1]) for line in f.read().decode().splitlines()[1:] if line])
    n = len(datasets[k]["data"])
    same = len(cv) >= n and np.array_equal(cv[:n], datasets[k]["data"])
    check("HERA 920 cut central values vs test_cv.csv", same, f"{n} points")

    # 4. t0 covariance after cuts against test_t0covmat.csv, t0 = mean of the 100 NNPDF4.0 replicas in
    #    test_predictions.csv rows 0-376 (the table is printed to ~7 digits, hence the tolerance).
    pred = read_predictions(zf, "test_predictions.csv")[:n]
    t0 = pred.mean(axis=1)
    rowds, colds, table = read_regression(zf, "test_t0covmat.csv")
    ref = table[np.ix_(rowds == hera, colds == hera)]
    mine = covariance([datasets[k]], [t0])
    ok = mine.shape == ref.shape
    r1, r2 = max_rel(mine, ref) if ok else (np.inf, np.inf)
    check("HERA 920 t0 covariance (cuts) vs test_t0covmat.csv", ok and r1 <= 1e-8,
          f"{mine.shape} vs {ref.shape}; max|dC|/sqrt(CiiCjj) = {r1:.2e} (tolerance 1e-8)")
    e = datasets[k]["data"] - t0
    chi2 = e @ np.linalg.solve(mine, e) / n
    check("chi2/n of NNPDF4.0 at HERA 920, t0 covariance", abs(chi2 - 1.3931376) < 5e-6,
          f"{chi2:.7f} (test_datasetchi2.csv: 1.3931376)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/nnpdf-prep", help="output folder, outside the repository")
    ap.add_argument("--no-verify", action="store_true", help="skip the checks against the nnpdf wheel")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    cache = os.path.join(out, "wheels")

    zf = zipfile.ZipFile(fetch_wheel(NNPDF_DATA, cache))
    uncut = [load_dataset(zf, name, variant) for name, variant in DATASETS]
    cut = [apply_cuts(d) for d in uncut]
    for d in cut:
        want = EXPECTED_CUT_COUNTS[d["name"]]
        check(f"cut count {d['name']}", len(d["data"]) == want, f"{d['ndata']} -> {len(d['data'])} (NNPDF: {want})")
    ntot = sum(len(d["data"]) for d in cut)
    check("total points after cuts", ntot == sum(EXPECTED_CUT_COUNTS.values()),
          f"{ntot} (NNPDF: {sum(EXPECTED_CUT_COUNTS.values())})")

    C = covariance(cut)
    diag_add, diag_mult, sys_add, sys_mult, names = decomposition(cut)
    central = np.concatenate([d["data"] for d in cut])
    S = sys_add + central[:, None] * sys_mult
    C2 = np.diag(diag_add + diag_mult * central ** 2) + S @ S.T
    r1, _ = max_rel(C2, C)
    check("stored decomposition rebuilds the experimental covariance", r1 <= 1e-13, f"{r1:.2e} (tolerance 1e-13)")
    evmin = np.linalg.eigvalsh(C / np.sqrt(np.outer(np.diag(C), np.diag(C))))[0]
    check("correlation matrix positive definite", evmin > 0, f"smallest eigenvalue {evmin:.3g}")

    if not args.no_verify:
        verify(uncut, cut, fetch_wheel(NNPDF, cache))

    path = os.path.join(out, "nnpdf_dis.h5")
    off = np.concatenate([[0], np.cumsum([len(d["data"]) for d in cut])]).astype(np.int64)
    with h5py.File(path, "w") as f:
        f.attrs["source"] = "nnpdf-data 4.1.5 (PyPI), commondata YAML"
        f.attrs["source_sha256"] = NNPDF_DATA[3]
        f.attrs["license"] = "derived from GPL-3.0-or-later data: do not commit"
        f.attrs["q2min"], f.attrs["w2min"] = Q2MIN, W2MIN
        f.attrs["cut"] = "Q2 > q2min and Q2 (1 - x) / x > w2min"
        s = h5py.string_dtype()
        g = f.create_group("datasets")
        g["name"] = np.array([d["name"] for d in cut], dtype=object).astype(s)
        g["variant"] = np.array([d["variant"] for d in cut], dtype=object).astype(s)
        g["process"] = np.array([d["process"] for d in cut], dtype=object).astype(s)
        g["offset"] = off
        g["ndata_uncut"] = np.array([d["ndata"] for d in cut], dtype=np.int64)
        g = f.create_group("points")
        for k in ("x", "Q2", "y"):
            g[k] = np.concatenate([d[k] for d in cut])
        g["central"] = central
        g["dataset"] = np.concatenate([np.full(len(d["data"]), i, np.int32) for i, d in enumerate(cut)])
        g["index_uncut"] = np.concatenate([d["index_uncut"] for d in cut]).astype(np.int32)
        g = f.create_group("covariance")
        g["experimental"] = C
        g["diag_add"], g["diag_mult"] = diag_add, diag_mult
        g["sys_add"], g["sys_mult"] = sys_add, sys_mult
        g["sys_name"] = np.array(names, dtype=object).astype(s)
    print(f"wrote {path}: {ntot} points, {len(cut)} datasets, {len(names)} correlated columns")
    if FAILED:
        print(f"{len(FAILED)} check(s) FAILED")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
