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
* `write_realistic` builds an analysis shaped like a real one: 3 channels (a 2-D 40 x 50 pt x eta signal
  region, a 500-bin 1-D control region, a masked 50-bin generator-level channel of the signals), 10
  processes (2 signals), `nsyst` systematics (mostly asymmetric shape variations acting on a subset of
  processes and channels, some of them confined to an eta slice as binned efficiency uncertainties
  are; log-normal normalisations, some asymmetric; a few unconstrained), weighted MC (sumw2 of a few
  % per bin, so the bin-by-bin term matters), and pseudo-data drawn from a shifted truth as
  `write_synthetic` draws it.
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
# A realistic analysis.

REALISTIC_PROCS = ("sig_a", "sig_b", "ttbar", "wjets", "zjets", "diboson", "singletop", "qcd", "fakes", "other")
REALISTIC_SIGNALS = ("sig_a", "sig_b")
REALISTIC_STRENGTHS_TRUE = {"sig_a": 1.08, "sig_b": 0.95}
REALISTIC_SR_SHAPE = (40, 50)  # pt x eta
REALISTIC_CR_BINS = 500
REALISTIC_GEN_BINS = 50


def realistic_name(nsyst: int, sparse: bool) -> str:
    return f"realistic_{nsyst}" + ("_sparse" if sparse else "")


def realistic_seed(nsyst: int) -> int:
    """The default seed of write_realistic (the same for the dense and the sparse file)."""
    return 7_000_001 + nsyst


def _asym_interp(theta):
    """rabbit's (and fitlib's) weight of the half-difference logk: g(θ) = θ·α(θ), α the smooth
    step clip((u/8)(3u⁴ − 10u² + 15), ±1) with u = 2θ (docs/likelihood.md)."""
    import numpy as np

    u = 2.0 * theta
    return theta * float(np.clip(u / 8.0 * (3 * u**4 - 10 * u**2 + 15), -1.0, 1.0))


def _cheb(rng, u, degree=3):
    """A random smooth function of u in [-1, 1] (Chebyshev series, falling coefficients), max |.| = 1."""
    import numpy as np

    coef = rng.normal(size=degree + 1) / np.arange(1, degree + 2)
    r = np.polynomial.chebyshev.chebval(u, coef)
    return r / max(float(np.max(np.abs(r))), 1e-12)


def write_realistic(path: Path, nsyst: int, sparse: bool = False, seed: int | None = None) -> dict:
    """Writes an analysis shaped like a real one with rabbit's TensorWriter to `path` and returns a summary.

    Channels (TensorWriter stores the unmasked ones in reverse order of add_channel, then the masked):
      sr   2-D signal region, pt (40 bins) x eta (50 bins), every process;
      cr   1-D control region, mt (500 bins), every process but `fakes`, signals ~5 % of the yield;
      gen  masked generator-level channel of the signals, ptGen (50 bins).
    Processes: 2 signals (sig_a, sig_b, POIs) and 8 backgrounds. Weighted MC: sumw2 = yield / r_p with
    r_p simulated events per expected event (signals 2.5-3, backgrounds 0.5-4, qcd 0.4), about 3 % per
    bin against the data's 3.5-4 %, so the bin-by-bin term matters; every process has sumw2 > 0 (a
    process without would make rabbit 0.2.5 and fitlib's default lite β differ, docs/likelihood.md).
    Systematics (exactly `nsyst` of them, each a parameter):
      * up to 4 unconstrained: free normalisations of ttbar, wjets and qcd (lnN 1.3-1.5, sr and cr) and
        a free pt/mt slope of qcd; these three processes are large in cr (qcd at low mt, ttbar at high
        mt, wjets at its peak), so that their free parameters have a finite minimum;
      * every tenth one a log-normal normalisation (1-8 %) of 1-3 processes in sr and/or cr, 40 % of
        them asymmetric (up and down factors differ);
      * the rest shape variations, 85 % asymmetric (up and down histograms differ: logk half-difference
        = ρ·average + another smooth shape), 15 % symmetric (mirrored):
        - 35 % "efficiency" variations confined to a slice of 1-5 eta bins of sr (zero elsewhere),
          the same relative shape in pt for the 8 simulated processes (all but qcd and fakes);
        - 65 % smooth variations (0.5-3 %, Chebyshev series in pt, eta, mt, ptGen) of 1-4 processes
          in sr only, cr only or both; those acting on a signal in sr also act on the gen channel
          half the time (theory uncertainties move the generator-level yields too).
    Pseudo-data: the yields at a shifted truth (signal strengths 1.08 and 0.95, every nuisance θ ~
    N(0, 0.7²), the unconstrained ones too), fluctuated by the MC statistics and then Poisson. Deterministic from `seed`; the
    model does not depend on `sparse`, so the dense and sparse files describe the same likelihood."""
    import hist
    import numpy as np
    from rabbit import tensorwriter

    if seed is None:
        seed = realistic_seed(nsyst)
    rng = np.random.default_rng(seed)
    npt, neta = REALISTIC_SR_SHAPE
    ax_pt = hist.axis.Regular(npt, 26.0, 56.0, name="pt")
    ax_eta = hist.axis.Regular(neta, -2.5, 2.5, name="eta")
    ax_mt = hist.axis.Regular(REALISTIC_CR_BINS, 0.0, 250.0, name="mt")
    ax_gen = hist.axis.Regular(REALISTIC_GEN_BINS, 0.0, 100.0, name="ptGen")
    axes = {"sr": [ax_pt, ax_eta], "cr": [ax_mt], "gen": [ax_gen]}
    shapes = {"sr": REALISTIC_SR_SHAPE, "cr": (REALISTIC_CR_BINS,), "gen": (REALISTIC_GEN_BINS,)}
    # coordinates in [-1, 1]: sr pt and eta (broadcast to the 2-D grid), cr mt, gen ptGen
    u_pt = np.linspace(-1, 1, npt)[:, None] * np.ones((1, neta))
    u_eta = np.ones((npt, 1)) * np.linspace(-1, 1, neta)[None, :]
    u_cr = np.linspace(-1, 1, REALISTIC_CR_BINS)
    u_gen = np.linspace(-1, 1, REALISTIC_GEN_BINS)
    x_pt, x_cr, x_gen = 0.5 * (u_pt + 1), 0.5 * (u_cr + 1), 0.5 * (u_gen + 1)

    procs = list(REALISTIC_PROCS)
    members = {"sr": procs, "cr": [p for p in procs if p != "fakes"], "gen": list(REALISTIC_SIGNALS)}
    gauss = lambda x, m, w: np.exp(-0.5 * ((x - m) / w) ** 2)
    norm = {ch: {} for ch in axes}
    norm["sr"]["sig_a"] = 300.0 * (gauss(x_pt, 0.55, 0.15) + 0.3) * (1.0 - 0.15 * u_eta**2)
    norm["sr"]["sig_b"] = 240.0 * (gauss(x_pt, 0.62, 0.13) + 0.3) * (1.0 + 0.10 * u_eta)
    norm["gen"]["sig_a"] = 6000.0 * (gauss(x_gen, 0.40, 0.12) + 0.05)
    norm["gen"]["sig_b"] = 5000.0 * (gauss(x_gen, 0.45, 0.11) + 0.05)
    for p in procs[2:]:
        a, c, d, e = rng.uniform(20, 150), rng.uniform(0, 3), rng.uniform(0, 1), rng.uniform(-0.3, 0.3)
        if p in ("qcd", "fakes"):
            c += 2.0  # at low pt
        norm["sr"][p] = a * np.exp(-c * x_pt) * (1.0 + d * x_pt**2) * (1.0 + e * u_eta**2)
    for p in members["cr"]:
        if p in REALISTIC_SIGNALS:
            continue
        a, c, d = rng.uniform(40, 300), rng.uniform(0, 3), rng.uniform(0, 1)
        norm["cr"][p] = a * np.exp(-c * x_cr) * (1.0 + d * x_cr**2)
    # the freely floating processes (free normalisations below) are the ones the control region
    # measures: qcd dominates its low mt (and is sizeable at low pt in sr), ttbar its high mt, wjets
    # its Jacobian peak, so that their free parameters have a finite, well-defined minimum
    jitter = rng.uniform(0.8, 1.2, 5)
    norm["cr"]["qcd"] = jitter[0] * (600.0 * np.exp(-5.0 * x_cr) + 10.0)
    norm["cr"]["ttbar"] = jitter[1] * 400.0 * (0.1 + x_cr**2)
    norm["cr"]["wjets"] = jitter[2] * 400.0 * (gauss(x_cr, 0.3, 0.12) + 0.1)
    norm["sr"]["qcd"] = jitter[3] * 150.0 * np.exp(-3.0 * x_pt) * (1.0 + 0.2 * u_eta**2)
    norm["sr"]["ttbar"] = jitter[4] * 60.0 * (0.5 + x_pt) * (1.0 - 0.1 * u_eta**2)
    cr_bkg = sum(norm["cr"].values())
    norm["cr"]["sig_a"] = 0.03 * cr_bkg * gauss(x_cr, 0.35, 0.1) / 0.5 + 0.01 * cr_bkg
    norm["cr"]["sig_b"] = 0.02 * cr_bkg * gauss(x_cr, 0.40, 0.1) / 0.5 + 0.01 * cr_bkg
    # MC statistics: r_p simulated events per expected event (weight ~1/r_p), sumw2 = yield / r_p
    mc_events = {"sig_a": 3.0, "sig_b": 2.5}
    for p in procs[2:]:
        mc_events[p] = 0.4 if p == "qcd" else float(rng.uniform(0.5, 4.0))
    sumw2 = {ch: {p: norm[ch][p] / mc_events[p] for p in norm[ch]} for ch in norm}

    writer = tensorwriter.TensorWriter(sparse=sparse)
    for ch in ("sr", "cr", "gen"):
        writer.add_channel(axes[ch], ch, masked=(ch == "gen"))
        for p in members[ch]:
            h = hist.Hist(*axes[ch], storage=hist.storage.Weight())
            h.view().value = norm[ch][p]
            h.view().variance = sumw2[ch][p]
            writer.add_process(h, p, ch, signal=p in REALISTIC_SIGNALS)

    # the true log-variation of every (channel, process) accumulates θ_true·a + g(θ_true)·h
    theta_true = rng.normal(0.0, THETA_TRUE_SIGMA, nsyst)
    logvar = {ch: {p: np.zeros(shapes[ch]) for p in members[ch]} for ch in axes}
    counts = dict(unconstrained=0, norm=0, norm_asymmetric=0, shape=0, shape_asymmetric=0, eta_slice=0,
                  with_gen=0, entries=0)
    simulated = [p for p in procs if p not in ("qcd", "fakes")]

    def shape_var(ch, amp):
        """A smooth relative log-variation of channel ch with amplitude amp."""
        if ch == "sr":
            r = _cheb(rng, u_pt) * (1.0 + rng.uniform(-0.5, 0.5) * _cheb(rng, u_eta, 2))
            return amp * r / max(float(np.max(np.abs(r))), 1e-12)
        return amp * _cheb(rng, u_cr if ch == "cr" else u_gen)

    def book(name, ch, p, a, h, s, **kw):
        """Adds one (channel, process) variation with log-average a and log-half-difference h
        (h None: mirrored) and accumulates the truth."""
        if h is None:
            writer.add_systematic(norm[ch][p] * np.exp(a), name, p, ch, **kw)
            logvar[ch][p] += theta_true[s] * a
        else:
            up, down = norm[ch][p] * np.exp(a + h), norm[ch][p] * np.exp(-a + h)
            writer.add_systematic([up, down], name, p, ch, symmetrize=None, **kw)
            logvar[ch][p] += theta_true[s] * a + _asym_interp(theta_true[s]) * h
        counts["entries"] += 1

    free_norms = (("ttbar", 1.3), ("wjets", 1.3), ("qcd", 1.5))
    n_free = min(4, nsyst // 10)
    for s in range(nsyst):
        if s < n_free:  # unconstrained
            if s < len(free_norms):
                p, k = free_norms[s]
                name = f"norm_free_{p}"
                for ch in ("sr", "cr"):
                    writer.add_norm_systematic(name, p, ch, k, constrained=False)
                    logvar[ch][p] += theta_true[s] * np.log(k)
            else:
                name = "slope_free_qcd"
                book(name, "sr", "qcd", 0.2 * u_pt, None, s, constrained=False)
                book(name, "cr", "qcd", 0.2 * u_cr, None, s, constrained=False)
            counts["unconstrained"] += 1
            continue
        if s % 10 == 0:  # log-normal normalisation; asymmetric ones as up/down histograms: rabbit 0.2.5's
            # add_norm_systematic with symmetrize=None raises TypeError (it books the half-difference
            # under the whole process list)
            name = f"norm_{s:04d}"
            chosen = [procs[i] for i in sorted(rng.choice(len(procs), size=rng.integers(1, 4), replace=False).tolist())]
            chans = [("sr", "cr"), ("sr",), ("cr",)][int(rng.choice(3, p=[0.7, 0.15, 0.15]))]
            asym = rng.random() < 0.4
            kappas = {p: (1 + rng.uniform(0.01, 0.08), 1 - rng.uniform(0.01, 0.08)) if asym else 1 + rng.uniform(0.01, 0.08)
                      for p in chosen}
            if not any(p in members[ch] for ch in chans for p in chosen):  # only fakes, in cr: sr instead
                chans = ("sr",)
            for ch in chans:
                ps = [p for p in chosen if p in members[ch]]
                if not ps:
                    continue
                if not asym:
                    writer.add_norm_systematic(name, ps, ch, [kappas[p] for p in ps])
                    for p in ps:
                        logvar[ch][p] += theta_true[s] * np.log(kappas[p])
                        counts["entries"] += 1
                    continue
                for p in ps:
                    ku, kd = kappas[p]
                    one = np.ones(shapes[ch])
                    book(name, ch, p, 0.5 * (np.log(ku) - np.log(kd)) * one, 0.5 * (np.log(ku) + np.log(kd)) * one, s)
            counts["norm"] += 1
            counts["norm_asymmetric"] += bool(asym)
            continue
        asym = rng.random() < 0.85
        counts["shape"] += 1
        counts["shape_asymmetric"] += bool(asym)
        if rng.random() < 0.35:  # an efficiency variation on a slice of eta bins
            name = f"eff_{s:04d}"
            width = int(rng.integers(1, 6))
            lo = int(rng.integers(0, neta - width + 1))
            mask = np.zeros(REALISTIC_SR_SHAPE)
            mask[:, lo:lo + width] = 1.0
            a = rng.uniform(0.003, 0.01) * _cheb(rng, u_pt, 2) * mask
            h = (rng.uniform(-0.4, 0.4) * a + 0.2 * rng.uniform(0.003, 0.01) * _cheb(rng, u_pt, 2) * mask) if asym else None
            for p in simulated:
                book(name, "sr", p, a, h, s)
            counts["eta_slice"] += 1
            continue
        # a smooth variation of 1-4 processes; correlated: one shape per channel, scaled per process
        name = f"shape_{s:04d}"
        chosen = [procs[i] for i in sorted(rng.choice(len(procs), size=rng.integers(1, 5), replace=False).tolist())]
        chans = [("sr",), ("cr",), ("sr", "cr")][int(rng.choice(3, p=[0.45, 0.2, 0.35]))]
        if not any(p in members[ch] for ch in chans for p in chosen):  # only fakes, in cr: sr instead
            chans = ("sr",)
        if "sr" in chans and any(p in REALISTIC_SIGNALS for p in chosen) and rng.random() < 0.5:
            chans += ("gen",)
        amp = rng.uniform(0.005, 0.03)
        correlated = rng.random() < 0.5
        rho = rng.uniform(-0.5, 0.5)
        for ch in chans:
            base = (shape_var(ch, amp), shape_var(ch, 0.2 * amp)) if correlated else None
            for p in chosen:
                if p not in members[ch]:
                    continue
                if correlated:
                    f = rng.uniform(0.5, 1.5)
                    a, b = f * base[0], f * base[1]
                else:
                    a, b = shape_var(ch, amp), shape_var(ch, 0.2 * amp)
                book(name, ch, p, a, rho * a + b if asym else None, s)
                counts["with_gen"] += ch == "gen"

    # pseudo-data: shifted truth, MC-statistical fluctuation of the templates, Poisson
    stats = {}
    for ch in ("sr", "cr"):
        nu = sum(norm[ch][p] * np.exp(logvar[ch][p]) * REALISTIC_STRENGTHS_TRUE.get(p, 1.0) for p in members[ch])
        tot = sum(norm[ch][p] for p in members[ch])
        mc_rel = np.sqrt(sum(sumw2[ch][p] for p in members[ch])) / tot
        nu = nu * np.clip(1.0 + mc_rel * rng.normal(size=nu.shape), 0.05, None)
        data = rng.poisson(nu).astype(float)
        hdata = hist.Hist(*axes[ch], storage=hist.storage.Double())
        hdata.view()[...] = data
        writer.add_data(hdata, ch)
        stats[ch] = dict(mean_yield_per_bin=float(tot.mean()), mean_mc_rel_unc=float(mc_rel.mean()),
                         mean_data_rel_unc=float(np.mean(1 / np.sqrt(np.maximum(data, 1)))))

    path.parent.mkdir(parents=True, exist_ok=True)
    writer.write(outfolder=str(path.parent), outfilename=path.name)
    return dict(nsyst=nsyst, nproc=len(procs), signals=list(REALISTIC_SIGNALS), sparse=sparse, seed=seed,
                bins=dict(sr=npt * neta, cr=REALISTIC_CR_BINS, gen_masked=REALISTIC_GEN_BINS), channels=stats, **counts)


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
