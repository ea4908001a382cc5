#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Data and theory preparation for the real-data NNPDF example (issue 20): data, covariance and FK tables.

Reads NNPDF's commondata (PyPI's nnpdf-data 4.1.5 wheel, GPL-3.0-or-later, downloaded at run time and never
committed) for the proton DIS sets of NNPDF4.0, applies NNPDF4.0's kinematic cuts, builds the experimental
covariance exactly as validphys does, checks it against validphys' own regression tables (nnpdf 4.1.5 wheel),
builds NNLO ZM-VFNS FK tables with HOPPET 2.3.0 (GPL-3.0-or-later, run here as a separate program, never linked)
for the data, NNPDF's positivity sets and its integrability sets, and writes one HDF5 file that the C++ side reads
(no YAML there). Spec: shared/reference/nnpdf-example.md sections 1.2-1.9, D1, 3 and 4.

Run (the whole command; binary wheels only, nothing is compiled):
    python3 examples/nnpdf/prepare.py [--out /tmp/nnpdf-prep] [--no-verify]
A Python without numpy, pyyaml, h5py or hoppet makes the venv .venv-nnpdf at the repository root (python3 -m venv;
pip install --only-binary=:all: of the pinned versions in REQUIREMENTS, hoppet by its PyPI SHA-256 in pip's
hash-checking mode) and re-executes the script there. About 60 s; on a first run 80 s and 125 MB of downloads.

Outputs go to --out (default /tmp/nnpdf-prep), never into the repository: wheels/ (the downloaded wheels),
hoppet.log (HOPPET's own messages) and nnpdf_dis.h5. Exit status 1 when any check FAILs.

HDF5 layout of nnpdf_dis.h5 (n = points after cuts, D = datasets, K = correlated systematic columns):
  attributes on /: source ("nnpdf-data 4.1.5"), source_sha256, license, q2min, w2min, cut
  /datasets/name [D] str, /datasets/variant [D] str, /datasets/process [D] str (DIS_NC, DIS_CC)
  /datasets/observable [D] str    what the FK table computes for the dataset (THEORY section below):
                                  F2_NC_EM (F~2, e- couplings), SIGMARED_NC_EP / _EM (e+p / e-p),
                                  SIGMARED_CC_EP / _EM
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

  FK tables. Every table T [m, nx, 8] comes with its own grid_x [nx] and gives m predictions
      prediction_i = sum_a sum_k T[i, a, k] * xf_k(grid_x[a], Q0)
  where xf_k (k = 0..7: Sigma, g, V, V3, V8, T3, T8, T15, the order of /fk/basis) is x times the PDF at
  Q0 = 1.65 GeV in NNPDF4.0's fitting (EVOL) basis: the network's eight outputs, as in examples/nnpdf/lo_dis.hpp
  (enum Evol, flavour_rotation: Sigma = sum q+, T3 = u+ - d+, T8 = u+ + d+ - 2s+, T15 = u+ + d+ + s+ - 3c+,
  V = sum q-, V3 = u- - d-, V8 = u- + d- - 2s-, with q+- = q +- qbar, c- = 0 (V15 = V), b = t = 0 at Q0 and no
  photon). Row-major, the grid index a slow and k fast, as lo_dis.hpp's fk_table(). Only this 8-function
  basis is stored: it is n3fit's 14-flavour FK table already contracted with the EVOL -> 14 rotation (V15 = V24
  = V35 = V, T24 = T35 = Sigma, photon 0). The table assumes the PDF between grid nodes is lo_dis.hpp's
  interpolation: cubic Lagrange in ln x on the four nodes around x (the first or last four at the ends), and 0
  below grid_x[0]; column (a, k) is the observable of the basis function "xf_k = that interpolation's weight of
  node a, every other xf_j = 0", evolved with HOPPET.
  attributes on /fk: the theory settings (THEORY below), hoppet version, HOPPET grid settings
  /fk/basis [8] str
  /fk/grid_x [50] float64          NNPDF's 50-point interpolation grid (pineko's opcard template): the points
                                   with ln(1/x) + 5 (1 - x) equally spaced from x = 2e-7 to 1 (nnpdf_xgrid)
  /fk/table [n, 50, 8] float64     one row per data point, rows in /points order
  /fk/benchmark_pdf [50, 8]        the check PDF (Les Houches toy at Q0 = 1.65 GeV, below) on the grid
  /fk/benchmark_direct [n]         HOPPET's direct prediction with that PDF (not from the FK table)
  /positivity/name [P] str         NNPDF_POS_2P24GEV_<OBS>: F2U F2D F2S FLL XUQ XUB XDQ XDB XSQ XSB XGL
  /positivity/offset [P+1] int64   rows of set p: offset[p] .. offset[p+1]-1
  /positivity/x, /positivity/Q2 [mp] float64     (Q2 = 5 GeV^2 for all)
  /positivity/grid_x [50], /positivity/table [mp, 50, 8], /positivity/benchmark_direct [mp]
  /integrability/name [2] str      NNPDF_INTEG_3GEV_XT3, _XT8: x T3 and x T8 at x = 1e-9, Q = Q0
  /integrability/x, /integrability/Q2 [2]
  /integrability/grid_x [1] (= 1e-9), /integrability/table [2, 1, 8]   (the network itself at x = 1e-9, no
                                   interpolation: that x lies below the 50-point grid)

THEORY (the FK tables): NNLO (3-loop evolution, HOPPET's exact NNLO coefficient functions), ZM-VFNS
with pole-mass thresholds m_c = 1.51, m_b = 4.92, m_t = 172.5 GeV, alpha_s(91.2 GeV) = 0.118 (theory card
40000000's Qref), Q0 = 1.65 GeV, mu_R = mu_F = Q; no target-mass corrections, no heavy-quark mass effects, no QED;
DGLAP solved numerically by HOPPET (the card's ModEv TRN truncates instead: a difference beyond NNLO).
With Y+- = 1 +- (1 - y)^2, kappa = Q^2 / (Q^2 + M_Z^2) / (4 s_W^2 (1 - s_W^2)), s_W^2 = 0.23126, M_Z = 91.1876
(card 40000000; yadism's eta_gammaZ), v_e = -1/2 + 2 s_W^2, a_e = -1/2, and HOPPET's F2, FL = F2 - 2xF1, xF3 for
photon (gamma), gamma-Z and Z exchange (quark couplings e_q, v_q = T3_q - 2 e_q s_W^2, a_q = T3_q):
  F~2 = F2^g - v_e kappa F2^gZ + (v_e^2 + a_e^2) kappa^2 F2^Z   (F~L likewise)
  xF~3 = -a_e kappa xF3^gZ + 2 v_e a_e kappa^2 xF3^Z
  F2_NC_EM (BCDMS, SLAC):   F~2 (NNPDF's yadism cards: "F2_total", NC, electron)
  SIGMARED_NC_EP / _EM:     F~2 - (y^2/Y+) F~L -+ (Y-/Y+) xF~3   (- for e+p, + for e-p; NMC is e-p as in NNPDF)
  SIGMARED_CC_EP / _EM:     (Y+ F2^W -+ Y- xF3^W - y^2 FL^W) / 2 with HOPPET's W+ (e+p: d, s, ubar, cbar) or
                            W- (e-p: u, c, dbar, sbar) structure functions, normalised so that at LO
                            F2^W(e+p) = x (d + s + ubar + cbar): HERA's sigma_r,CC, which is yadism's XSHERACC
                            (1/4 of that sum with F2^W = 2x(...)); CKM = 1, b -> t absent.
  Positivity at Q^2 = 5 GeV^2 (nf = 4): F2U = e_u^2 [C_ns x u+ + C_ps Sigma + C_g g] (the photon coupling to u alone;
  F2D, F2S likewise for d, s), FLL = FL of u, d, s (the photon not coupling to c); XUQ, XUB, ... = x u, x ubar,
  x d, x dbar, x s, x sbar, x g. HOPPET gives flavour-decomposed structure functions only to NLO, so these are
  obtained at NNLO from F2/FL of the photon: for the singlet basis functions (Sigma, g) every flavour evolves
  alike and F2^X = (sum_q c^X_q / sum_q e_q^2) F2; for T3, T8, T15 (non-singlet: no gluon or pure-singlet part)
  F2^X = (sum_q c^X_q r_qk / sum_q e_q^2 r_qk) F2 with r_qk the flavour_rotation column; V, V3, V8 give 0 (F2, FL
  see only q+). Checked at NLO against HOPPET's flavour-decomposed structure functions.
Numerical accuracy (measured with the toy PDF at the 1,715 data points): the 50-point grid's interpolation, FK x
toy on the grid against the toy evolved directly, 7.8e-4 at most (BCDMS, x = 0.75), 7e-6 median (checked below);
HOPPET's own grids, dy = 0.1 against 0.05: 2.2e-7, dlnlnQ halved: 3.8e-8; its parametrised NNLO coefficient
functions would differ from the exact ones by up to 1.0e-4 (x = 8e-4, Q^2 = 3.5).
"""
import argparse
import hashlib
import multiprocessing
import os
import subprocess
import sys
import time
import zipfile

# Pinned binary wheels of the venv this script makes for itself (REQUIREMENTS) and the SHA-256 of every hoppet
# 2.3.0 wheel on PyPI (PEP 691 JSON of /simple/hoppet/), which pip's hash-checking mode verifies.
REQUIREMENTS = ["numpy==2.4.6", "pyyaml==6.0.4", "h5py==3.16.0", "matplotlib==3.11.2"]  # matplotlib: plot.py
HOPPET_VERSION = "2.3.0"
HOPPET_SHA256 = [
    "eb9b68cc1d41afe7f01e3d89176bf8256df0f9019a542b5416a83c972a576b08",  # cp39 manylinux2014 x86_64
    "85466841963e170bda5457f221e7ad31aa28ae66842d6736dbb88c0dff188d01",  # cp310 manylinux2014 x86_64
    "c782ca226f10ab7ffc3ce102c9e71bad011651669d85d03e43ae038ebf7b8671",  # cp311 manylinux2014 x86_64
    "06b18da1eb1421bea5592f0fbddb251ba53a984f09e5ad29d87f5099b242b1e4",  # cp312 manylinux2014 x86_64
    "fb06a6dc7d4e4668bd00ee02d4c21529fbbf00d0199302808d227794245581ba",  # cp313 manylinux_2_28 x86_64
    "ee0b6bced101ddaa7e5c4e86c3212f74c23e13f24987104dbbf465984f059294",  # cp314 manylinux_2_28 x86_64
    "dfbd7f90f62836c7a4439f1fe8f549568f0aec8d1dba51491b7260864ecaec82",  # cp39 macOS arm64
    "29fec8fc917e4ae017272dded87d4a9d04542fb3458d1a7ecb234b5ccb692098",  # cp310 macOS arm64
    "55e3d8fa10cf22ea92d99272fb18d973bb9c0f6b5370b8ca049ad8b2810caa3a",  # cp311 macOS arm64
    "ec0519fb1f63aa1676c52ca6eb29a9be73e9991bb6d9389c309c2b01c3f4f6e0",  # cp312 macOS arm64
    "71c87d8d5a75f9646a0c59df2a210814e5764344e7ac52460d5f21da1faa4093",  # cp313 macOS arm64
    "d1dc7de5aa17562b956ae87aed501ed7134da5e8e342b8e52953e56d89f975c0",  # cp314 macOS arm64
]


def ensure_environment():
    """Re-execute in .venv-nnpdf (made and filled here when needed) unless this Python has every module."""
    try:
        import numpy, yaml, h5py, hoppet, matplotlib  # noqa: F401
        return
    except ImportError as e:
        missing = e.name
    if os.environ.get("NNPDF_PREPARE_REEXEC"):
        sys.exit(f"prepare.py: {missing} still missing in {sys.executable} after setting up the venv")
    venv = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".venv-nnpdf")
    python = os.path.join(venv, "bin", "python")
    ready = os.path.exists(python) and subprocess.run(
        [python, "-c", "import numpy, yaml, h5py, hoppet, matplotlib"], capture_output=True).returncode == 0
    if not ready:
        print(f"prepare.py: {missing} is missing here; setting up {venv}", flush=True)
        if not os.path.exists(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        pip = [python, "-m", "pip", "install", "--quiet", "--only-binary=:all:"]
        subprocess.run(pip + REQUIREMENTS, check=True)
        req = os.path.join(venv, "hoppet-requirement.txt")
        with open(req, "w") as f:
            f.write(f"hoppet=={HOPPET_VERSION} " + " ".join(f"--hash=sha256:{h}" for h in HOPPET_SHA256) + "\n")
        subprocess.run(pip + ["--no-deps", "--require-hashes", "-r", req], check=True)
    print(f"prepare.py: running in {venv}", flush=True)
    os.environ["NNPDF_PREPARE_REEXEC"] = "1"
    sys.stdout.flush()
    os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])


os.environ.setdefault("GFORTRAN_UNBUFFERED_PRECONNECTED", "y")  # so HOPPET's Fortran output can go to hoppet.log
ensure_environment()
import numpy as np  # noqa: E402
import yaml  # noqa: E402
import h5py  # noqa: E402
import hoppet  # noqa: E402

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

# ----------------------------------------------------------------------------------------------------------------
# Theory: FK tables with HOPPET (nnpdf-example.md D1; conventions in the docstring's THEORY section)

# Theory card 40000000 (nnpdf_data/theory_cards/40000000.yaml), with ZM-VFNS for its FONLL-C, no TMC, no ModEv TRN.
THEORY = dict(order="NNLO", scheme="ZM-VFNS", nloop=3, mc=1.51, mb=4.92, mt=172.5, alphas=0.118, Qref=91.2, Q0=1.65,
              sin2tw=0.23126, MZ=91.1876)
# HOPPET's grid: ln(1/x) up to 16 (x >= 1.1e-7), spacing 0.1 (its default nested grids), order -6 interpolation;
# Q from 1 GeV to above the data's largest, spacing 0.025 in ln ln Q.
HOPPET_GRID = dict(ymax=16.0, dy=0.1, Qmin=1.0, dlnlnQ=0.025, order=-6)
EVOL_BASIS = ["Sigma", "g", "V", "V3", "V8", "T3", "T8", "T15"]  # lo_dis.hpp enum Evol
# lo_dis.hpp flavour_rotation(): rows u+ d+ s+ c+ u- d- s- c-, columns EVOL_BASIS; xq = ROTATION @ xf_evol.
ROTATION = np.array([
    [1 / 4, 0, 0, 0, 0, 1 / 2, 1 / 6, 1 / 12],
    [1 / 4, 0, 0, 0, 0, -1 / 2, 1 / 6, 1 / 12],
    [1 / 4, 0, 0, 0, 0, 0, -1 / 3, 1 / 12],
    [1 / 4, 0, 0, 0, 0, 0, 0, -1 / 4],
    [0, 0, 1 / 3, 1 / 2, 1 / 6, 0, 0, 0],
    [0, 0, 1 / 3, -1 / 2, 1 / 6, 0, 0, 0],
    [0, 0, 1 / 3, 0, -1 / 3, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0]])
# Its inverse on c- = 0: the evolution basis from (u+ d+ s+ c+ u- d- s- c-); the gluon is passed separately.
EVOL_FROM_QPM = np.array([
    [1, 1, 1, 1, 0, 0, 0, 0],     # Sigma
    [0, 0, 0, 0, 0, 0, 0, 0],     # g
    [0, 0, 0, 0, 1, 1, 1, 1],     # V
    [0, 0, 0, 0, 1, -1, 0, 0],    # V3
    [0, 0, 0, 0, 1, 1, -2, 0],    # V8
    [1, -1, 0, 0, 0, 0, 0, 0],    # T3
    [1, 1, -2, 0, 0, 0, 0, 0],    # T8
    [1, 1, 1, -3, 0, 0, 0, 0]])   # T15
# HOPPET's flavour order (Evolve/Eval): tbar bbar cbar sbar ubar dbar g d u s c b t.
H_SBAR, H_UBAR, H_DBAR, H_G, H_D, H_U, H_S, H_CBAR, H_C = 3, 4, 5, 6, 7, 8, 9, 2, 10
# NNPDF observable of each dataset (docstring THEORY): (kind, lepton charge, short label).
OBSERVABLE = {
    "BCDMS_NC_NOTFIXED_P_EM-F2": ("F2_NC_EM", -1, "BCDMS"), "SLAC_NC_NOTFIXED_P_EM-F2": ("F2_NC_EM", -1, "SLAC"),
    "NMC_NC_NOTFIXED_P_EM-SIGMARED": ("SIGMARED_NC_EM", -1, "NMC"),
    "HERA_NC_318GEV_EP-SIGMARED": ("SIGMARED_NC_EP", +1, "NC920e+"),
    "HERA_NC_318GEV_EM-SIGMARED": ("SIGMARED_NC_EM", -1, "NC920e-"),
    "HERA_NC_300GEV_EP-SIGMARED": ("SIGMARED_NC_EP", +1, "NC820e+"),
    "HERA_NC_251GEV_EP-SIGMARED": ("SIGMARED_NC_EP", +1, "NC575e+"),
    "HERA_NC_225GEV_EP-SIGMARED": ("SIGMARED_NC_EP", +1, "NC460e+"),
    "HERA_CC_318GEV_EP-SIGMARED": ("SIGMARED_CC_EP", +1, "CCe+"),
    "HERA_CC_318GEV_EM-SIGMARED": ("SIGMARED_CC_EM", -1, "CCe-"),
}
# Positivity (NNPDF4.0's DIS-type and PDF-type sets) and integrability sets.
POSITIVITY = ["F2U", "F2D", "F2S", "FLL", "XUQ", "XUB", "XDQ", "XDB", "XSQ", "XSB", "XGL"]
POS_PDF = {"XUQ": H_U, "XUB": H_UBAR, "XDQ": H_D, "XDB": H_DBAR, "XSQ": H_S, "XSB": H_SBAR, "XGL": H_G}
E2 = np.array([4 / 9, 1 / 9, 1 / 9, 4 / 9])  # photon couplings of u, d, s, c
POS_COUPLING = {"F2U": np.array([4 / 9, 0, 0, 0]), "F2D": np.array([0, 1 / 9, 0, 0]),
                "F2S": np.array([0, 0, 1 / 9, 0]), "FLL": np.array([4 / 9, 1 / 9, 1 / 9, 0])}
INTEGRABILITY = ["XT3", "XT8"]


def nnpdf_xgrid(n=50, xmin=2e-7):
    """NNPDF's interpolation grid (pineko's opcard template): ln(1/x) + 5 (1 - x) equally spaced from xmin to 1.
    Agrees with the template's printed list to 4.4e-13 relative."""
    target = (-np.log(xmin) + 5 * (1 - xmin)) * (1 - np.arange(n) / (n - 1))
    t = np.log(xmin) * (1 - np.arange(n) / (n - 1))  # t = ln x; Newton on -t + 5 (1 - e^t) = target
    for _ in range(60):
        t = t - (-t + 5 * (1 - np.exp(t)) - target) / (-1 - 5 * np.exp(t))
    x = np.exp(t)
    x[0], x[-1] = xmin, 1.0
    return x


class Interpolation:
    """lo_dis.hpp interpolation_weights(): cubic Lagrange in ln x on the four nodes around x (the first or last
    four at the ends); here 0 below the first node instead of extrapolating (no observable looks there)."""

    def __init__(self, grid):
        self.grid, self.lng = np.asarray(grid), np.log(grid)
        self.cache = {}

    def weights(self, x):
        """(first node, its 4 weights)."""
        hit = self.cache.get(x)
        if hit is not None:
            return hit
        n = len(self.grid)
        if x < self.grid[0]:
            hit = (0, np.zeros(4))
        else:
            j = max(0, int(np.searchsorted(self.grid, x, side="right")) - 1)
            first = max(0, min(n - 4, j - 1))
            t, lg = np.log(x), self.lng[first:first + 4]
            w = np.ones(4)
            for a in range(4):
                for b in range(4):
                    if b != a:
                        w[a] *= (t - lg[b]) / (lg[a] - lg[b])
            hit = (first, w)
        self.cache[x] = hit
        return hit


def hoppet_flavours(evol):
    """HOPPET's 13 x f (tbar .. t) from x f in EVOL_BASIS (8,)."""
    qpm = ROTATION @ evol
    q, qbar = (qpm[:4] + qpm[4:]) / 2, (qpm[:4] - qpm[4:]) / 2  # u d s c
    f = np.zeros(13)
    f[H_U], f[H_D], f[H_S], f[H_C] = q
    f[H_UBAR], f[H_DBAR], f[H_SBAR], f[H_CBAR] = qbar
    f[H_G] = evol[1]
    return f


def evol_from_hoppet(f):
    """x f in EVOL_BASIS from HOPPET's 13 (c- and b, t must vanish)."""
    q = np.array([f[H_U], f[H_D], f[H_S], f[H_C]])
    qbar = np.array([f[H_UBAR], f[H_DBAR], f[H_SBAR], f[H_CBAR]])
    e = EVOL_FROM_QPM @ np.concatenate([q + qbar, q - qbar])
    e[1] = f[H_G]
    return e


def benchmark_hoppet(x):
    """The Les Houches toy PDF (HOPPET's BenchmarkPDFunpol) as HOPPET's 13 x f, used as the input at Q0 = 1.65 GeV."""
    return np.asarray(hoppet.BenchmarkPDFunpol(x, THEORY["Q0"]))


def flavour_decomposed_nlo(xs, Q, Qmax, log_path):
    """HOPPET's flavour-decomposed NLO FL, F2, F3 of the evolved toy at (xs, Q), per flavour -4..4 (not 0). Run in a
    fresh process: in HOPPET 2.3.0 InitStrFctFlav after InitStrFct deallocates tables it never allocated, and once
    InitStrFctFlav has run, the Python StrFct returns 3 values instead of 14."""
    with open(log_path, "a") as log:
        H = Hoppet(Qmax, log, exact_coefficients=False)  # 10 s faster to start; they differ at NNLO only
        H.evolve(benchmark_hoppet, cached=False)
        H.init_sf(order=2, flavour=True)
        return {i: np.array([hoppet.StrFctNoMuFlav(x, Q, i) for x in xs]) for i in range(-4, 5) if i}


class Hoppet:
    """HOPPET set up once (streamlined interface); its Fortran messages go to log."""

    SF = ("F2gZ", "F2EM", "F1EM", "F3Wm", "F2Wm", "F1Wm", "F1gZ", "F1Wp", "F2Wp", "F3Wp", "F1Z", "F2Z", "F3Z", "F3gZ")

    def __init__(self, Qmax, log, exact_coefficients=True):
        self.log, self.Qmax = log, Qmax
        # StrFct returns HOPPET's res(-6:7) as a 14-list; the module's iF* constants are its Python indices.
        self.idx = {name: getattr(hoppet, "i" + name) for name in self.SF}
        assert sorted(self.idx.values()) == list(range(14))
        g, T = HOPPET_GRID, THEORY
        with self.quiet():
            hoppet.SetPoleMassVFN(T["mc"], T["mb"], T["mt"])
            hoppet.StartExtended(g["ymax"], g["dy"], g["Qmin"], Qmax, g["dlnlnQ"], T["nloop"], g["order"],
                                 hoppet.factscheme_MSbar)
            # M_W only sets HOPPET's sin^2(theta_W) = 1 - (M_W/M_Z)^2; W structure functions carry no propagator.
            mw = T["MZ"] * np.sqrt(1 - T["sin2tw"])
            hoppet.StartStrFctExtended(T["nloop"], -1, hoppet.scale_choice_Q, 1.0, not exact_coefficients, mw, T["MZ"])
        self.cached = False

    def quiet(self):
        outer = self

        class Redirect:
            def __enter__(self):
                sys.stdout.flush()
                sys.stderr.flush()
                self.saved = [os.dup(1), os.dup(2)]
                os.dup2(outer.log.fileno(), 1)
                os.dup2(outer.log.fileno(), 2)

            def __exit__(self, *exc):
                sys.stdout.flush()
                sys.stderr.flush()
                for fd, saved in ((1, self.saved[0]), (2, self.saved[1])):
                    os.dup2(saved, fd)
                    os.close(saved)

        return Redirect()

    def evolve(self, pdf, cached=True):
        """pdf(x) -> HOPPET's 13 x f at Q0. Cached: PreEvolve once, then CachedEvolve (the FK loop)."""
        T = THEORY
        cb = lambda x, Q: pdf(x)  # noqa: E731
        with self.quiet():
            if cached:
                if not self.cached:
                    hoppet.PreEvolve(T["alphas"], T["Qref"], T["nloop"], 1.0, T["Q0"])
                    self.cached = True
                hoppet.CachedEvolve(cb)
            else:
                hoppet.Evolve(T["alphas"], T["Qref"], T["nloop"], 1.0, cb, T["Q0"])

    def init_sf(self, order=3, flavour=False):
        with self.quiet():
            (hoppet.InitStrFctFlav if flavour else hoppet.InitStrFct)(order, False, 1.0, 1.0)

    def sf(self, xQ):
        """[len(xQ), 14] structure functions (HOPPET's StrFct order) at (x, Q) pairs."""
        return np.array([hoppet.StrFctNoMu(x, Q) for x, Q in xQ])

    def pdf(self, xs, Q):
        return np.array([hoppet.Eval(x, Q) for x in xs])


def observable_coefficients(kind, charge, x, Q2, y, idx):
    """a [14] such that the observable = a . (HOPPET's 14 structure functions at x, Q): docstring THEORY."""
    T = THEORY
    a = np.zeros(14)
    s2 = T["sin2tw"]
    if kind.startswith("SIGMARED_CC"):
        yp, ym = 1 + (1 - y) ** 2, 1 - (1 - y) ** 2
        w = "Wp" if charge > 0 else "Wm"
        a[idx["F2" + w]] += (yp - y * y) / 2      # Y+ F2 - y^2 (F2 - 2x F1) - charge Y- x F3, over 2
        a[idx["F1" + w]] += y * y * x
        a[idx["F3" + w]] += -charge * ym * x / 2
        return a
    kappa = Q2 / (Q2 + T["MZ"] ** 2) / (4 * s2 * (1 - s2))
    ve, ae = -0.5 + 2 * s2, -0.5
    if kind == "F2_NC_EM":
        rL, r3 = 0.0, 0.0
    else:
        yp, ym = 1 + (1 - y) ** 2, 1 - (1 - y) ** 2
        rL, r3 = y * y / yp, ym / yp
    for ex, c in (("EM", 1.0), ("gZ", -ve * kappa), ("Z", (ve * ve + ae * ae) * kappa ** 2)):
        a[idx["F2" + ex]] += c * (1 - rL)         # F2 - rL (F2 - 2x F1)
        a[idx["F1" + ex]] += c * rL * 2 * x
    for ex, d in (("gZ", -ae * kappa), ("Z", 2 * ve * ae * kappa ** 2)):
        a[idx["F3" + ex]] += -charge * r3 * d * x  # -+ (Y-/Y+) xF~3
    return a


def positivity_factors():
    """[4 sets F2U F2D F2S FLL, 8 basis functions]: F2^X (or FL^X) of a basis function = factor * F2 (FL) of the
    photon, exact when the basis function is a pure singlet (Sigma, g) or a pure non-singlet (T3, T8, T15) and
    nf = 4 (docstring THEORY); V, V3, V8 give neither F2 nor FL."""
    out = np.zeros((4, 8))
    for s, name in enumerate(["F2U", "F2D", "F2S", "FLL"]):
        c = POS_COUPLING[name]
        out[s, 0] = out[s, 1] = c.sum() / E2.sum()
        for k in (5, 6, 7):
            r = ROTATION[:4, k]
            out[s, k] = (c @ r) / (E2 @ r)
    return out


def load_positivity(zf):
    """(name, x, Q2) of the positivity and integrability sets, from their commondata kinematics."""
    def sets(folder, observables):
        meta = load_yaml(zf, f"nnpdf_data/commondata/{folder}/metadata.yaml")
        out = []
        for obs in observables:
            (o,) = [o for o in meta["implemented_observables"] if o["observable_name"] == obs]
            bins = load_yaml(zf, f"nnpdf_data/commondata/{folder}/{o['kinematics']['file']}")["bins"]
            x, q2 = (np.array([b[v]["mid"] for b in bins], dtype=float) for v in ("x", "Q2"))
            out.append((f"{folder}_{obs}", x, q2))
        return out
    pos = sets("NNPDF_POS_2P24GEV", POSITIVITY)
    assert all(np.all(q2 == 5.0) for _, _, q2 in pos)
    integ = sets("NNPDF_INTEG_3GEV", INTEGRABILITY)
    assert all(np.allclose(q2, THEORY["Q0"] ** 2, rtol=1e-12) for _, _, q2 in integ)  # Q = Q0: no evolution
    return pos, integ


def fk_tables(cut, pos, out_dir):
    """FK tables of the data and positivity sets (docstring layout), and their check against HOPPET's direct
    computation with the Les Houches PDF at Q0. Returns a dict of arrays for the HDF5 file."""
    t_start = time.time()
    grid = nnpdf_xgrid()
    interp = Interpolation(grid)
    x = np.concatenate([d["x"] for d in cut])
    q2 = np.concatenate([d["Q2"] for d in cut])
    y = np.concatenate([d["y"] for d in cut])
    kinds = [OBSERVABLE[d["name"]][:2] for d in cut for _ in d["x"]]
    n = len(x)
    xpos = np.concatenate([p[1] for p in pos])
    qpos = np.sqrt(5.0)
    names_pos = np.concatenate([[p[0].rsplit("_", 1)[1]] * len(p[1]) for p in pos])
    mp = len(xpos)

    log_path = os.path.join(out_dir, "hoppet.log")
    open(log_path, "w").close()
    log = open(log_path, "a")  # appended to by flavour_decomposed_nlo's process too
    H = Hoppet(1.05 * np.sqrt(q2.max()), log)
    idx = H.idx
    A = np.array([observable_coefficients(k, c, xi, qi, yi, idx) for (k, c), xi, qi, yi in zip(kinds, x, q2, y)])
    # structure functions are needed at the unique (x, Q) of the data and at the DIS-type positivity points
    pos_sf = np.isin(names_pos, list(POS_COUPLING))
    xQ = sorted(set(zip(x, np.sqrt(q2))) | set((xi, qpos) for xi in xpos[pos_sf]))
    where = {p: i for i, p in enumerate(xQ)}
    u_data = np.array([where[(xi, np.sqrt(qi))] for xi, qi in zip(x, q2)])
    u_pos = np.array([where[(xi, qpos)] if s else 0 for xi, s in zip(xpos, pos_sf)])
    factors = positivity_factors()
    set_of = {"F2U": 0, "F2D": 1, "F2S": 2, "FLL": 3}
    f2em = lambda S: S[:, idx["F2EM"]]  # noqa: E731
    flem = lambda S, xs: S[:, idx["F2EM"]] - 2 * xs * S[:, idx["F1EM"]]  # noqa: E731

    def positivity_row(S, P, k):
        """Positivity observables of an evolved PDF: S = its structure functions on xQ, P = its PDF at xpos, Q^2 = 5;
        F2U, F2D, F2S, FLL with the flavour factors of basis function k (exact for a PDF of k's group only)."""
        v = np.zeros(mp)
        for j, name in enumerate(names_pos):
            if name in POS_PDF:
                v[j] = P[j, POS_PDF[name]]
            else:
                Sj = S[u_pos[j]:u_pos[j] + 1]
                base = flem(Sj, xpos[j:j + 1])[0] if name == "FLL" else f2em(Sj)[0]
                v[j] = factors[set_of[name], k] * base
        return v

    bench = benchmark_hoppet
    groups = {0: [0, 1], 5: [5], 6: [6], 7: [7]}  # singlet and non-singlet parts; V, V3, V8 give no F2, FL

    def split_evolutions(order):
        """Positivity F2U, F2D, F2S, FLL of the toy at Q0, each part evolved on its own (the factor of each group
        is that of its first member)."""
        v = np.zeros(mp)
        for k0, members in groups.items():
            mask = np.zeros(8)
            mask[members] = 1
            H.evolve(lambda xv, mask=mask: hoppet_flavours(mask * evol_from_hoppet(bench(xv))), cached=False)
            H.init_sf(order=order)
            v += positivity_row(H.sf(xQ), np.zeros((mp, 13)), k0)
        return np.where(pos_sf, v, 0.0)

    # 1. The positivity flavour factors against HOPPET's flavour-decomposed structure functions, which exist only
    #    to NLO, computed in a fresh process (flavour_decomposed_nlo).
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        fl = pool.apply(flavour_decomposed_nlo, (xpos[pos_sf], qpos, H.Qmax, log.name))
    ref = {"F2U": 4 / 9 * (fl[2][:, 1] + fl[-2][:, 1]), "F2D": 1 / 9 * (fl[1][:, 1] + fl[-1][:, 1]),
           "F2S": 1 / 9 * (fl[3][:, 1] + fl[-3][:, 1]),
           "FLL": sum(e * (fl[i][:, 0] + fl[-i][:, 0]) for i, e in ((1, 1 / 9), (2, 4 / 9), (3, 1 / 9)))}
    want = np.zeros(int(pos_sf.sum()))
    for name in POS_COUPLING:
        sel = names_pos[pos_sf] == name
        want[sel] = ref[name][sel]
    nlo = split_evolutions(2)[pos_sf]
    frel = np.abs(nlo - want) / np.abs(want)
    w = frel.argmax()
    check("positivity flavour factors vs HOPPET's flavour-decomposed NLO F2, FL (F2U, F2D, F2S, FLL)",
          frel[w] <= 1e-6,
          f"max |rel| = {frel[w]:.1e} ({names_pos[pos_sf][w]} at x = {xpos[pos_sf][w]:.3g}), median "
          f"{np.median(frel):.1e}, over {len(want)} points (tolerance 1e-6)")

    # 2. The FK tables: one cached evolution and one NNLO structure-function initialisation per basis function.
    table = np.zeros((n, len(grid), 8))
    ptable = np.zeros((mp, len(grid), 8))
    unit = np.eye(8)
    flav = [hoppet_flavours(unit[k]) for k in range(8)]
    t0 = time.time()
    for a in range(len(grid)):
        for k in range(8):
            def basis(xv, a=a, k=k):
                first, w = interp.weights(xv)
                return flav[k] * w[a - first] if first <= a < first + 4 else np.zeros(13)
            H.evolve(basis)
            H.init_sf()
            S = H.sf(xQ)
            table[:, a, k] = np.einsum("ij,ij->i", A, S[u_data])
            ptable[:, a, k] = positivity_row(S, H.pdf(xpos, qpos), k)
    t_fk = time.time() - t0
    print(f"FK tables: {len(grid) * 8} evolutions in {t_fk:.1f} s ({n} data points, {mp} positivity points)",
          flush=True)

    # 3. The check: the Les Houches PDF at Q0 on the grid through the FK tables, against HOPPET's direct
    #    computation with that PDF evolved normally (not cached).
    bench_grid = np.array([evol_from_hoppet(bench(xa)) for xa in grid])
    bench_grid[-1] = 0.0  # x = 1
    for xa in grid[:-1]:  # the EVOL basis holds the toy PDF exactly (c- = b = t = 0)
        f = bench(xa)
        assert np.abs(hoppet_flavours(evol_from_hoppet(f)) - f).max() <= 1e-14 * np.abs(f).max()
    H.evolve(bench, cached=False)
    H.init_sf()
    S = H.sf(xQ)
    direct = np.einsum("ij,ij->i", A, S[u_data])
    pdirect = positivity_row(S, H.pdf(xpos, qpos), 0)  # the PDF-type sets; then F2U, F2D, F2S, FLL:
    pdirect = np.where(pos_sf, split_evolutions(3), pdirect)
    fk = table.reshape(n, -1) @ bench_grid.reshape(-1)
    pfk = ptable.reshape(mp, -1) @ bench_grid.reshape(-1)

    rel = np.abs(fk / direct - 1)
    check("FK tables x Les Houches PDF on the grid vs HOPPET direct (NNLO), data", rel.max() <= 1e-3,
          f"max |rel| = {rel.max():.2e} at x = {x[rel.argmax()]:.3g}, Q2 = {q2[rel.argmax()]:.4g}; "
          f"median {np.median(rel):.2e} (tolerance 1e-3)")
    off = np.concatenate([[0], np.cumsum([len(d["x"]) for d in cut])])
    print("    per dataset, max |rel|: " + ", ".join(
        f"{OBSERVABLE[d['name']][2]} {rel[off[k]:off[k + 1]].max():.1e}" for k, d in enumerate(cut)), flush=True)
    prel = np.abs(pfk - pdirect) / np.abs(pdirect)
    inner = xpos <= 0.75
    poff = np.concatenate([[0], np.cumsum([len(p[1]) for p in pos])])
    scale = np.concatenate([np.full(poff[i + 1] - poff[i], np.abs(pdirect[poff[i]:poff[i + 1]]).max())
                            for i in range(len(pos))])
    pabs = np.abs(pfk - pdirect) / scale
    check("positivity FK tables x Les Houches PDF vs HOPPET direct, |diff| / the set's largest |value|",
          pabs.max() <= 1e-3, f"max {pabs.max():.2e} ({names_pos[pabs.argmax()]} at x = {xpos[pabs.argmax()]:.3g}), "
          f"median {np.median(pabs):.1e} (tolerance 1e-3); |rel| median {np.median(prel):.1e}")
    print("    per set, max |rel| at x <= 0.74 / at x = 0.82, 0.9: " + ", ".join(
        f"{name} {prel[inner & (names_pos == name)].max():.1e} / {prel[~inner & (names_pos == name)].max():.1e}"
        for name in POSITIVITY), flush=True)
    log.close()
    print(f"FK tables and their checks: {time.time() - t_start:.1f} s", flush=True)
    return dict(grid=grid, table=table, ptable=ptable, bench_grid=bench_grid, direct=direct, pdirect=pdirect,
                xpos=xpos, q2pos=np.full(mp, 5.0))


def sanity_chi2(cut, C, central, pred):
    """chi2/n of the Les Houches toy's predictions per dataset (experimental covariance, the dataset's block):
    the toy is not a fit, so these are printed only, with the median data/prediction as a normalisation check."""
    off = np.concatenate([[0], np.cumsum([len(d["data"]) for d in cut])])
    parts = []
    for k, d in enumerate(cut):
        sl = slice(off[k], off[k + 1])
        e = central[sl] - pred[sl]
        chi2 = e @ np.linalg.solve(C[sl, sl], e) / len(e)
        parts.append(f"{OBSERVABLE[d['name']][2]} {chi2:.3g} ({np.median(central[sl] / pred[sl]):.3f})")
    print("Les Houches toy at Q0 = 1.65 GeV vs the data, chi2/n per dataset (median data/prediction), not a fit: "
          + ", ".join(parts), flush=True)
    # The sign and size of the Z terms: e-p / e+p at the same (x, Q2) grows with Q2 through xF3.
    names = [d["name"] for d in cut]
    ep, em = (names.index(f"HERA_NC_318GEV_{c}-SIGMARED") for c in ("EP", "EM"))
    at = {(xi, qi): off[em] + i for i, (xi, qi) in enumerate(zip(cut[em]["x"], cut[em]["Q2"]))}
    pairs = [(off[ep] + i, at[(xi, qi)]) for i, (xi, qi) in enumerate(zip(cut[ep]["x"], cut[ep]["Q2"]))
             if qi >= 3000 and (xi, qi) in at]
    i, j = np.array(pairs).T
    print(f"HERA 920 e-p / e+p at Q2 >= 3000 GeV2, {len(pairs)} matched bins, median: data "
          f"{np.median(central[j] / central[i]):.3f}, toy {np.median(pred[j] / pred[i]):.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/nnpdf-prep", help="output folder, outside the repository")
    ap.add_argument("--no-verify", action="store_true", help="skip the checks against the nnpdf wheel")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    cache = os.path.join(out, "wheels")
    t_start = time.time()

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
    print(f"data and covariance: {time.time() - t_start:.1f} s", flush=True)

    pos, integ = load_positivity(zf)
    fk = fk_tables(cut, pos, out)
    sanity_chi2(cut, C, central, fk["direct"])

    path = os.path.join(out, "nnpdf_dis.h5")
    off = np.concatenate([[0], np.cumsum([len(d["data"]) for d in cut])]).astype(np.int64)
    s = h5py.string_dtype()
    strings = lambda v: np.array(v, dtype=object).astype(s)  # noqa: E731
    with h5py.File(path, "w") as f:
        f.attrs["source"] = "nnpdf-data 4.1.5 (PyPI), commondata YAML"
        f.attrs["source_sha256"] = NNPDF_DATA[3]
        f.attrs["license"] = "derived from GPL-3.0-or-later data and HOPPET output: do not commit"
        f.attrs["q2min"], f.attrs["w2min"] = Q2MIN, W2MIN
        f.attrs["cut"] = "Q2 > q2min and Q2 (1 - x) / x > w2min"
        g = f.create_group("datasets")
        g["name"] = strings([d["name"] for d in cut])
        g["variant"] = strings([d["variant"] for d in cut])
        g["process"] = strings([d["process"] for d in cut])
        g["observable"] = strings([OBSERVABLE[d["name"]][0] for d in cut])
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
        g["sys_name"] = strings(names)

        g = f.create_group("fk")
        for key, val in THEORY.items():
            g.attrs[key] = val
        for key, val in HOPPET_GRID.items():
            g.attrs["hoppet_" + key] = val
        g.attrs["hoppet_version"] = hoppet.__version__
        g.attrs["coefficient_functions"] = "HOPPET's exact NNLO (param_coefs = False)"
        g.attrs["convention"] = ("prediction_i = sum_a sum_k table[i, a, k] xf_k(grid_x[a], Q0), k in basis; "
                                 "cubic Lagrange interpolation in ln x as examples/nnpdf/lo_dis.hpp")
        g["basis"] = strings(EVOL_BASIS)
        g["grid_x"] = fk["grid"]
        g["table"] = fk["table"]
        g["benchmark_pdf"] = fk["bench_grid"]
        g["benchmark_direct"] = fk["direct"]
        g = f.create_group("positivity")
        g["name"] = strings([p[0] for p in pos])
        g["offset"] = np.concatenate([[0], np.cumsum([len(p[1]) for p in pos])]).astype(np.int64)
        g["x"], g["Q2"] = fk["xpos"], fk["q2pos"]
        g["grid_x"] = fk["grid"]
        g["table"] = fk["ptable"]
        g["benchmark_direct"] = fk["pdirect"]
        g = f.create_group("integrability")
        g["name"] = strings([p[0] for p in integ])
        g["x"] = np.concatenate([p[1] for p in integ])
        g["Q2"] = np.concatenate([p[2] for p in integ])
        assert len(set(g["x"][()])) == 1
        g["grid_x"] = np.array([integ[0][1][0]])
        t = np.zeros((len(integ), 1, 8))
        for i, (name, _, _) in enumerate(integ):
            t[i, 0, EVOL_BASIS.index(name.rsplit("_", 1)[1][1:])] = 1.0  # XT3 -> T3, XT8 -> T8
        g["table"] = t
    size = os.path.getsize(path) / 2 ** 20
    print(f"wrote {path} ({size:.1f} MiB): {ntot} points, {len(cut)} datasets, {len(names)} correlated columns, "
          f"FK tables on {len(fk['grid'])} x-nodes x 8 basis functions, {len(pos)} positivity and {len(integ)} "
          f"integrability sets; {time.time() - t_start:.1f} s in all")
    if FAILED:
        print(f"{len(FAILED)} check(s) FAILED")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
