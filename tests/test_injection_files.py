"""Injection files (LIGO_LW sim_inspiral / sim_burst, PyCBC HDF) and their LALSimulation strain.

The science check writes rows drawn by the project's simulator to a sim_inspiral file, reads them
back and compares the LALSimulation TaylorF2 strain with the simulator's own TaylorF2 strain in H1
and L1 against the aLIGO design PSD from 30 Hz (SNR ratio, overlap, time offset).
"""

from __future__ import annotations

import gzip

import h5py
import numpy as np
import pytest

pytest.importorskip("lalsimulation")
from igwn_ligolw import ligolw, lsctables, utils  # noqa: E402

from gwbatch.conditioning.design import design_psd  # noqa: E402
from gwbatch.errors import DataError  # noqa: E402
from gwbatch.gpstime import GPSTime  # noqa: E402
from gwbatch.io import injection_files  # noqa: E402
from gwbatch.io.injection_files import read_injection_file  # noqa: E402
from gwbatch.simulate.lalinjection import (  # noqa: E402
    _polarisations,
    add_injection,
    injection_strain,
    optimal_snr,
    peak_offset,
)

FS = 4096.0
T0 = 1_000_000_000.0
BNS = [  # (mass1, mass2, spin1z, spin2z)
    (1.41, 1.32, 0.02, -0.01),
    (1.62, 1.25, 0.0, 0.0),
    (1.90, 1.45, 0.05, 0.03),
]


def _write(path, table_cls, rows: list[dict]):
    doc = ligolw.Document()
    table = doc.appendChild(ligolw.LIGO_LW()).appendChild(table_cls.new())
    for k, values in enumerate(rows):
        row = table.RowType()
        for c in table.columnnames:
            setattr(row, c, None)
        row.process_id, row.simulation_id = 0, 100 + k
        for c, v in values.items():
            setattr(row, c, v)
        table.append(row)
    utils.write_filename(doc, str(path))
    return path


def _inspiral(k: int, m1: float, m2: float, s1: float, s2: float, **extra) -> dict:
    return dict(waveform="TaylorF2threePointFivePN", geocent_end_time=1_000_000_100 + 50 * k,
                geocent_end_time_ns=123_456_789 + k, mass1=m1, mass2=m2, spin1x=0.0, spin1y=0.0, spin1z=s1,
                spin2x=0.0, spin2y=0.0, spin2z=s2, distance=40.0 + 10 * k, longitude=0.3 + k, latitude=-0.4 + 0.3 * k,
                inclination=0.2 + 0.5 * k, coa_phase=1.1 * k, polarization=0.7 + 0.2 * k, f_lower=30.0) | extra


def _sim_inspiral(path, n=3, **extra):
    return _write(path, lsctables.SimInspiralTable, [_inspiral(k, *BNS[k % 3], **extra) for k in range(n)])


def _burst(**extra) -> dict:
    return dict(waveform="SineGaussian", ra=1.25, dec=-0.5, psi=0.4, time_geocent_gps=1_000_000_200,
                time_geocent_gps_ns=5, frequency=235.0, q=9.0, hrss=1e-21, duration=0.0, bandwidth=0.0,
                amplitude=0.0, pol_ellipse_e=0.3, pol_ellipse_angle=0.6, egw_over_rsquared=0.0,
                waveform_number=0) | extra


def _pycbc(path, drop=(), **static):
    n = 3
    data = dict(tc=T0 + 100.25 + np.arange(n) * 40.0, mass1=np.array([1.4, 1.5, 1.6]),
                mass2=np.array([1.3, 1.2, 1.35]), spin1z=np.array([0.0, 0.1, -0.2]), spin2z=np.zeros(n),
                distance=np.array([50.0, 60.0, 70.0]), inclination=np.array([0.1, 1.0, 2.0]),
                ra=np.array([0.5, 1.5, 2.5]), dec=np.array([-0.2, 0.4, 1.0]), polarization=np.array([0.1, 0.2, 0.3]),
                coa_phase=np.array([0.0, 1.0, 2.0]), approximant=np.array([b"TaylorF2", b"IMRPhenomD", b"TaylorF2"]))
    with h5py.File(path, "w") as f:
        f.attrs["injtype"] = "cbc"
        f.attrs["static_args"] = list(static)
        for k, v in static.items():
            f.attrs[k] = v
        for k, v in data.items():
            if k not in drop:
                f[k] = v
    return path, data


# ---------------------------------------------------------------------------------------------
# reading


@pytest.mark.parametrize("name", ["inj.xml", "inj.xml.gz", "injections.dat"])
def test_sim_inspiral_read_back(tmp_path, name):
    """Values come back; real_4 columns (masses, angles, distance, f_lower) are written with 8
    significant digits, so they agree to 1e-7 relative; times are exact to the nanosecond."""
    path = _sim_inspiral(tmp_path / name)
    if name.endswith(".dat"):  # gzip content under a name that says nothing: told by content
        path.write_bytes(gzip.compress(path.read_bytes()))
    df = read_injection_file(path)
    assert list(df["id"]) == [0, 1, 2] and list(df["simulation_id"]) == [100, 101, 102]
    assert (df["waveform"] == "cbc").all() and (df["approximant"] == "TaylorF2threePointFivePN").all()
    for k, row in df.iterrows():
        want = _inspiral(k, *BNS[k])
        assert row["gps_ns"] == want["geocent_end_time"] * 10**9 + want["geocent_end_time_ns"]
        assert row["gps_time"] == want["geocent_end_time"] + want["geocent_end_time_ns"] * 1e-9
        for col, src in (("mass1", "mass1"), ("mass2", "mass2"), ("spin1z", "spin1z"), ("spin2z", "spin2z"),
                         ("distance", "distance"), ("ra", "longitude"), ("dec", "latitude"),
                         ("inclination", "inclination"), ("phase", "coa_phase"), ("polarization", "polarization"),
                         ("f_low", "f_lower")):
            assert row[col] == pytest.approx(want[src], rel=1e-7, abs=1e-12), col
        assert row["f_ref"] == 0.0 and row["duration"] == 0.010 and row["source_file"] == str(path)


def test_sim_burst_read_back(tmp_path):
    """real_8 columns come back exactly; LAL names map to the project's waveform names."""
    rows = [_burst(), _burst(waveform="Gaussian", frequency=0.0, q=0.0, duration=0.004, time_geocent_gps_ns=0),
            _burst(waveform="BTLWNB", frequency=300.0, bandwidth=100.0, duration=0.05, egw_over_rsquared=1e-8,
                   waveform_number=7)]
    df = read_injection_file(_write(tmp_path / "b.xml", lsctables.SimBurstTable, rows))
    assert list(df["waveform"]) == ["sine-gaussian", "gaussian", "btlwnb"]
    assert list(df["approximant"]) == ["SineGaussian", "Gaussian", "BTLWNB"]
    assert df["gps_ns"][0] == 1_000_000_200 * 10**9 + 5
    for col, src in (("ra", "ra"), ("dec", "dec"), ("psi", "psi"), ("polarization", "psi"), ("hrss", "hrss"),
                     ("frequency", "frequency"), ("q", "q"), ("burst_duration", "duration"),
                     ("pol_ellipse_e", "pol_ellipse_e"), ("pol_ellipse_angle", "pol_ellipse_angle")):
        assert df[col][0] == rows[0][src], col
    assert df["waveform_number"][2] == 7 and df["egw_over_rsquared"][2] == 1e-8
    tau = 9.0 / (np.sqrt(2) * np.pi * 235.0)
    assert df["duration"][0] == pytest.approx(max(0.1, 2.5758293035489 * tau / 2))
    assert list(df["duration"][1:]) == [0.1, 0.1]
    for row in df.to_dict("records"):
        first, x = injection_strain(row, "V1", row["gps_time"] - 1.0, FS)
        assert x.size and np.all(np.isfinite(x)) and 0 < first < FS and np.abs(x).max() > 1e-23


def test_pycbc_hdf_read_back(tmp_path):
    """Root datasets and static attributes (here f_lower, f_ref) are read exactly; absent spins are 0."""
    path, data = _pycbc(tmp_path / "inj.hdf", f_lower=25.0, f_ref=20.0)
    df = read_injection_file(path)
    np.testing.assert_array_equal(df["gps_time"], data["tc"])
    assert list(df["gps_ns"]) == [GPSTime.parse(t).total_ns for t in data["tc"]]
    for col, src in (("mass1", "mass1"), ("mass2", "mass2"), ("spin1z", "spin1z"), ("distance", "distance"),
                     ("inclination", "inclination"), ("ra", "ra"), ("dec", "dec"), ("phase", "coa_phase"),
                     ("polarization", "polarization")):
        np.testing.assert_array_equal(df[col], data[src])
    assert list(df["approximant"]) == ["TaylorF2", "IMRPhenomD", "TaylorF2"]
    assert (df["f_low"] == 25.0).all() and (df["f_ref"] == 20.0).all() and (df["spin1x"] == 0).all()
    assert list(df["simulation_id"]) == [0, 1, 2] and (df["waveform"] == "cbc").all()


# ---------------------------------------------------------------------------------------------
# strain


def _spectrum(x, n, f_low, psd):
    f = np.fft.rfftfreq(n, 1 / FS)
    band = (f >= f_low) & (f < FS / 2)
    return np.fft.rfft(x, n)[band] / FS, psd(f[band]), f[1] - f[0], band


def _snr(x, psd, f_low=30.0):
    h, S, df, _ = _spectrum(x, 1 << int(np.ceil(np.log2(x.size))), f_low, psd)
    return np.sqrt(4 * df * np.sum(np.abs(h) ** 2 / S))


def _overlaps(a0, a, b0, b, psd, f_low):
    """SNRs of both, the overlap maximised over time and phase, the best lag (s) and phase, and the
    overlap with neither maximised, all against ``psd`` on ``[f_low, FS/2)``."""
    lo, hi = min(a0, b0), max(a0 + a.size, b0 + b.size)
    n = 1 << int(np.ceil(np.log2(hi - lo)))
    xa, xb = np.zeros(n), np.zeros(n)
    xa[a0 - lo : a0 - lo + a.size], xb[b0 - lo : b0 - lo + b.size] = a, b
    (A, S, df, band), (B, _, _, _) = _spectrum(xa, n, f_low, psd), _spectrum(xb, n, f_low, psd)
    ra, rb = (np.sqrt(4 * df * np.sum(np.abs(X) ** 2 / S)) for X in (A, B))
    up = 4  # complex correlation on a grid 4 times finer than the samples, peak refined by a parabola
    z = np.zeros(n * up, dtype=complex)
    z[np.flatnonzero(band)] = A * np.conj(B) / S
    c = np.fft.ifft(z) * z.size * 4 * df
    k = int(np.argmax(np.abs(c)))
    y0, y1, y2 = np.abs(c[[k - 1, k, (k + 1) % c.size]])
    lag = ((k if k < z.size // 2 else k - z.size) + 0.5 * (y0 - y2) / (y0 - 2 * y1 + y2)) / (FS * up)
    zero_lag = 4 * df * np.sum((A * np.conj(B)).real / S) / (ra * rb)
    return ra, rb, abs(c[k]) / (ra * rb), lag, float(np.angle(c[k])), zero_lag, xa, xb


def test_lal_taylorf2_file_injection_matches_the_simulator(tmp_path):
    """A simulator row written to sim_inspiral (end time = peak time - merger_offset, coa_phase =
    phase + pi/2) and read back gives the same strain in H1 and L1 as the simulator: SNR within 1 %,
    overlap > 0.99 both maximised and at zero lag, no time offset.

    What differs: LAL's antenna patterns follow the Earth's rotation through the ~60 s chirp (the
    simulator's are taken at gps_time), up to ~1 % in SNR near a node of a detector's pattern; with
    F+, Fx frozen at gps_time the SNRs agree to 0.1 %.  And SimInspiralTD runs TaylorF2 up to the
    Nyquist frequency, past the ISCO frequency where the simulator stops, so the last millisecond
    differs and the envelope peaks move by a few samples."""
    from gwbatch.detectors import antenna_pattern
    from scipy.signal import hilbert

    from gwbatch.simulate import _arrival_delay
    from gwbatch.simulate.cbc import CbcSpec, cbc_strain, draw_cbc_injections, merger_offset

    ifos = ("H1", "L1")
    psd = lambda f: design_psd("aLIGO", f)  # noqa: E731
    sim = draw_cbc_injections(CbcSpec(count=3, snr=(10.0, 20.0), f_low=30.0, min_spacing=80.0), seed=11, start=T0,
                              duration=400.0, sample_rate=FS, ifos=ifos, psds={i: psd for i in ifos},
                              delay=_arrival_delay)
    rows = []
    for r in sim.to_dict("records"):
        end = GPSTime.parse(r["gps_time"] - merger_offset("TaylorF2", r["mass1"], r["mass2"], 0.0, 0.0, 30.0, FS))
        rows.append(dict(waveform="TaylorF2threePointFivePN", geocent_end_time=end.seconds,
                         geocent_end_time_ns=end.nanoseconds, mass1=r["mass1"], mass2=r["mass2"], distance=r["distance"],
                         longitude=r["ra"], latitude=r["dec"], inclination=r["inclination"],
                         coa_phase=(r["phase"] + np.pi / 2) % (2 * np.pi), polarization=r["polarization"],
                         f_lower=30.0, spin1z=0.0, spin2z=0.0))
    table = read_injection_file(_write(tmp_path / "bns.xml.gz", lsctables.SimInspiralTable, rows))
    fgrid = np.arange(1, 16385) * 0.125
    report, measured = [], []
    for r, fr in zip(sim.to_dict("records"), table.to_dict("records")):
        for ifo in ifos:
            a0, a = injection_strain(fr, ifo, T0, FS)
            b0, b = cbc_strain(r, ifo, T0, FS)
            ra, rb, best, lag, phase, zero_lag, xa, xb = _overlaps(a0, a, b0, b, psd, 30.0)
            peak = (np.argmax(np.abs(hilbert(xa))) - np.argmax(np.abs(hilbert(xb)))) / FS
            rho = optimal_snr(fr, ifo, T0, FS, fgrid, psd(fgrid), 30.0)
            hp, hc = _polarisations(fr, FS)
            fp, fc = antenna_pattern(ifo, r["ra"], r["dec"], r["polarization"], r["gps_time"])
            frozen = _snr(fp * np.asarray(hp.data.data) + fc * np.asarray(hc.data.data), psd)
            measured.append((ra / rb, best, zero_lag, lag, peak, rb / r[f"snr_{ifo}"], rho / ra, frozen / rb))
            report.append(f"{ifo} m=({r['mass1']:.3f},{r['mass2']:.3f}) SNR lal {ra:.4f} sim {rb:.4f} "
                          f"ratio {ra / rb:.5f} (antenna frozen {frozen / rb:.5f}); overlap max {best:.5f} at lag {lag * 1e6:+.2f} us phase "
                          f"{phase:+.4f}; zero-lag {zero_lag:.5f}; envelope peak lal-sim {peak * 1e3:+.3f} ms; "
                          f"peak_offset {peak_offset(fr, FS) * 1e3:+.3f} ms, merger_offset "
                          f"{(r['gps_time'] - fr['gps_time']) * 1e3:+.3f} ms")
    ratio, best, zero_lag, lag, peak, listed, opt, frozen = np.array(measured).T
    report = "\n".join(report)  # shown on failure
    assert np.all(np.abs(ratio - 1) < 0.01) and np.all(best > 0.99) and np.all(zero_lag > 0.99), report
    assert np.all(np.abs(frozen - 1) < 0.002), report
    assert np.all(np.abs(lag) < 0.1 / FS), report  # the waveforms line up to a tenth of a sample
    # LAL's chirp goes on past ISCO to Nyquist: the envelope peaks move by a few samples
    assert np.all(np.abs(peak) <= 4 / FS), report
    np.testing.assert_allclose(listed, 1.0, rtol=1e-3)  # the simulator's own SNR bookkeeping
    np.testing.assert_allclose(opt, 1.0, rtol=2e-3)  # optimal_snr on a 0.125 Hz PSD grid


def test_strain_on_the_store_grid_and_added_in_pieces():
    """Sub-sample placement: moving t0 by a fraction of a sample moves the strain by it; pieces add
    up to the whole; the cached samples are read-only; bursts peak at their arrival time with
    sqrt(int h+^2 + hx^2 dt) = hrss."""
    from gwbatch.detectors import time_delay_from_earth_center

    row = dict(id=0, waveform="cbc", approximant="TaylorF2", gps_time=T0 + 60.3, gps_ns=(int(T0) + 60) * 10**9 + 3 * 10**8,
               ra=1.0, dec=0.2, polarization=0.3, inclination=0.4, phase=0.5, mass1=3.0, mass2=2.5, distance=100.0,
               f_low=40.0, f_ref=0.0, source_file="x")
    first, x = injection_strain(row, "H1", T0, FS)
    assert not x.flags.writeable
    data = np.zeros(int(70 * FS))
    for start in range(0, data.size, 100_000):
        add_injection(data[start : start + 100_000], start, T0, FS, "H1", row)
    np.testing.assert_array_equal(data[first : first + x.size], x)
    assert not np.any(data[:first]) and not np.any(data[first + x.size :])
    # t0 later by 0.25 sample: the same signal, 0.25 sample earlier on the new grid
    first2, x2 = injection_strain(row, "H1", T0 + 0.25 / FS, FS)
    f = np.fft.rfftfreq(1 << 20, 1 / FS)
    shift = np.fft.irfft(np.fft.rfft(x, 1 << 20) * np.exp(2j * np.pi * f * ((first2 - first) + 0.25) / FS), 1 << 20)
    m = min(x2.size, x.size) - 64
    assert np.max(np.abs(shift[64:m] - x2[64:m])) < 1e-3 * np.max(np.abs(x))

    burst = dict(id=1, waveform="sine-gaussian", approximant="SineGaussian", gps_time=T0 + 10.0, ra=1.0, dec=0.2,
                 polarization=0.3, frequency=235.0, q=9.0, hrss=1e-21, pol_ellipse_e=0.4, pol_ellipse_angle=0.0,
                 source_file="x")
    hp, hc = _polarisations(burst, FS)
    assert np.sqrt(np.sum(np.asarray(hp.data.data) ** 2 + np.asarray(hc.data.data) ** 2) / FS) == \
        pytest.approx(1e-21, rel=1e-3)
    b0, b = injection_strain(burst, "L1", T0, FS)
    from scipy.signal import hilbert

    peak = (b0 + np.argmax(np.abs(hilbert(b)))) / FS
    assert abs(peak - (10.0 + time_delay_from_earth_center("L1", 1.0, 0.2, T0 + 10.0))) <= 1.0 / FS
    assert abs(peak_offset(burst, FS)) < 0.5 / FS


# ---------------------------------------------------------------------------------------------
# refusals


@pytest.mark.parametrize("change, words", [
    (dict(mass1=0.0), ["simulation_id 101", "mass1 = 0.0", "(0, 1000]"]),
    (dict(mass2=1500.0), ["mass2 = 1500.0", "(0, 1000]"]),
    (dict(distance=-1.0), ["distance = -1.0", "(0, 1e+06]"]),
    (dict(distance=2e6), ["distance = 2000000.0"]),
    (dict(f_lower=0.0), ["f_low = 0.0", "(0, 10000]"]),
    (dict(f_lower=2e4), ["f_low = 20000.0"]),
    (dict(spin1x=0.8, spin1z=0.8), ["spin1 magnitude", "[0, 1]"]),
    (dict(inclination=float("nan")), ["inclination = nan", "finite"]),
    (dict(longitude=float("inf")), ["ra = inf", "finite"]),
    (dict(geocent_end_time=-5), ["time = -5.0", "[0, 2**32) s"]),
    (dict(geocent_end_time=None), ["time seconds = nan", "finite"]),
    (dict(waveform="NoSuchApproximant"), ["approximant = 'NoSuchApproximant'", "not a LALSimulation approximant"]),
])
def test_bad_sim_inspiral_values_refused(tmp_path, change, words):
    rows = [_inspiral(k, *BNS[k]) | (change if k == 1 else {}) for k in range(3)]
    path = _write(tmp_path / "bad.xml", lsctables.SimInspiralTable, rows)
    with pytest.raises(DataError) as err:
        read_injection_file(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "sim_inspiral row" in msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("change, words", [
    (dict(frequency=0.0), ["frequency = 0.0", "positive finite values (needed by SineGaussian)"]),
    (dict(q=-1.0), ["q = -1.0"]),
    (dict(hrss=0.0), ["hrss = 0.0"]),
    (dict(waveform="Chirplet"), ["waveform = 'Chirplet'", "allowed: SineGaussian"]),
    (dict(dec=2.0), ["dec = 2.0", "[-pi/2, pi/2]"]),
])
def test_bad_sim_burst_values_refused(tmp_path, change, words):
    path = _write(tmp_path / "bad.xml", lsctables.SimBurstTable, [_burst(), _burst(**change)])
    with pytest.raises(DataError) as err:
        read_injection_file(path)
    msg = str(err.value)
    assert "\n" not in msg and "sim_burst row simulation_id 101" in msg
    for w in words:
        assert w in msg, msg


def _raises(path, *words):
    with pytest.raises(DataError) as err:
        read_injection_file(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg, msg
    for w in words:
        assert w in msg, msg


def test_bad_files_refused(tmp_path, monkeypatch):
    full = _sim_inspiral(tmp_path / "full.xml").read_bytes()
    truncated = tmp_path / "truncated.xml"
    truncated.write_bytes(full[: len(full) * 2 // 3])
    _raises(truncated, "not a readable LIGO_LW document")
    cut_gz = tmp_path / "cut.xml.gz"
    cut_gz.write_bytes(gzip.compress(full)[: len(gzip.compress(full)) // 2])
    _raises(cut_gz, "not a readable LIGO_LW document")
    text = tmp_path / "notes.xml"
    text.write_text("mass1 mass2\n1.4 1.3\n")
    _raises(text, "not an injection file", "neither LIGO_LW XML")
    fake_gz = tmp_path / "fake.xml.gz"
    fake_gz.write_bytes(b"PK\x03\x04 this is a zip archive, not gzip")
    _raises(fake_gz, "not an injection file")
    _raises(tmp_path / "absent.xml", "cannot read injection file")
    other = _write(tmp_path / "other.xml", lsctables.ProcessTable, [dict(program="x")])
    _raises(other, "exactly one sim_inspiral or sim_burst table", "0 sim_inspiral and 0 sim_burst")
    _raises(_write(tmp_path / "empty.xml", lsctables.SimInspiralTable, []), "table is empty")
    monkeypatch.setattr(injection_files, "MAX_ROWS", 2)
    _raises(_sim_inspiral(tmp_path / "many.xml"), "has 3 rows; at most 2")


def test_bad_hdf_refused(tmp_path):
    path, _ = _pycbc(tmp_path / "no_tc.hdf", drop=("tc",), f_lower=30.0)
    _raises(path, "lacks tc", "needed: tc")
    path, _ = _pycbc(tmp_path / "no_flow.hdf")
    _raises(path, "lacks f_lower")
    path, _ = _pycbc(tmp_path / "ring.hdf", f_lower=30.0)
    with h5py.File(path, "a") as f:
        f.attrs["injtype"] = "ringdown"
    _raises(path, "injtype 'ringdown' is not supported")
    path, _ = _pycbc(tmp_path / "short.hdf", drop=("mass2",), f_lower=30.0)
    with h5py.File(path, "a") as f:
        f["mass2"] = np.array([1.0, 1.0])
    _raises(path, "dataset mass2 has 2 values, others have 3")
    path, _ = _pycbc(tmp_path / "far.hdf", drop=("tc",), f_lower=30.0)
    with h5py.File(path, "a") as f:
        f["tc"] = np.array([1e9, 2.0**32, 1e9])
    _raises(path, "PyCBC row index 1 tc = 4294967296.0", "[0, 2**32) s")
    path, _ = _pycbc(tmp_path / "words.hdf", drop=("mass1",), f_lower=30.0)
    with h5py.File(path, "a") as f:
        f["mass1"] = np.array([b"a", b"b", b"c"])
    _raises(path, "mass1 must hold one number per injection")
    path, _ = _pycbc(tmp_path / "apx.hdf", drop=("approximant",), f_lower=30.0, approximant="NotAnApproximant")
    _raises(path, "PyCBC row index 0 approximant = 'NotAnApproximant' is not a LALSimulation approximant")
    broken = tmp_path / "broken.hdf"
    broken.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    _raises(broken, "cannot open HDF5 file")


def test_ligolw_needs_lalsuite(tmp_path, monkeypatch):
    import sys

    path = _sim_inspiral(tmp_path / "inj.xml")
    monkeypatch.setitem(sys.modules, "lal", None)  # import lal raises ImportError
    with pytest.raises(DataError, match=r"reading LIGO_LW injection files needs lalsuite: pip install 'gwbatch\[lal\]'"):
        read_injection_file(path)


def test_bad_rows_refused_at_generation():
    row = dict(id=4, waveform="cbc", approximant="TaylorF2", gps_time=T0, ra=1.0, dec=0.2, polarization=0.3,
               inclination=0.4, phase=0.5, mass1=1.4, mass2=1.3, distance=100.0, f_low=30.0, source_file="f.xml")
    with pytest.raises(DataError, match=r"f.xml row 4: detector 'X9' is unknown to LAL; known: .*H1"):
        injection_strain(row, "X9", T0, FS)
    incomplete = {k: v for k, v in row.items() if k != "mass2"}
    with pytest.raises(DataError, match=r"f.xml row 4: no 'mass2' column"):
        injection_strain(incomplete, "H1", T0, FS)
    with pytest.raises(DataError, match=r"f.xml row 4: LALSuite cannot generate 'NoSuchApproximant'"):
        injection_strain(dict(row, approximant="NoSuchApproximant"), "H1", T0, FS)
    with pytest.raises(DataError, match=r"the PSD for H1 needs"):
        optimal_snr(row, "H1", T0, FS, np.array([1.0]), np.array([1.0, 2.0]), 30.0)


def test_an_injection_file_outside_the_span_is_refused(tmp_path, small_store, caplog):
    """An injection file none of whose rows lies in the analysed span (a GPS typo) is refused at
    plan time instead of giving a complete run with no injection; rows outside it are counted in a
    warning.  The small store spans GPS 1000000000-1000000256; the file's rows are at +100.25,
    +140.25 and +180.25 s, shifted here."""
    from gwbatch.config import validate_campaign
    from gwbatch.io.store import read_meta
    from workflow.plan import make_plan

    def plan_with(path):
        return make_plan(validate_campaign({"name": "t", "data": {"store": str(small_store), "injections": str(path)},
                                            "search": {"kind": "pulse"}}), read_meta(small_store))

    inside, _ = _pycbc(tmp_path / "in.hdf", f_lower=30.0)
    assert len(plan_with(inside).injections.table) == 3
    week, _ = _pycbc(tmp_path / "week.hdf", f_lower=30.0)
    with h5py.File(week, "r+") as f:
        f["tc"][...] = f["tc"][...] + 7 * 86400
    with pytest.raises(DataError, match=r"none of its 3 injections \(GPS 1000604900\.250 to 1000604980\.250\) lies in "
                                        r"the analysed span \[1000000000\.000, 1000000256\.000\)"):
        plan_with(week)
    mixed, _ = _pycbc(tmp_path / "mixed.hdf", f_lower=30.0)
    with h5py.File(mixed, "r+") as f:
        f["tc"][...] = f["tc"][...] + np.array([0.0, 0.0, 100.0])
    with caplog.at_level("WARNING", logger="gwbatch"):
        plan_with(mixed)
    assert "1 of 3 injections lie outside the analysed span" in caplog.text


def test_an_approximant_that_cannot_be_generated_is_refused_at_plan_time(tmp_path, small_store):
    """An approximant LALSuite knows by name but cannot make here (a reduced-order model whose data
    files are not installed) is refused when the campaign is planned, naming it; it failed every
    chunk holding such a row (exit 5)."""
    from gwbatch.config import validate_campaign
    from gwbatch.io.store import read_meta
    from gwbatch.simulate.lalinjection import _polarisations
    from workflow.plan import make_plan

    path, data = _pycbc(tmp_path / "rom.hdf", f_lower=30.0)
    with h5py.File(path, "r+") as f:
        del f["approximant"]
        f["approximant"] = np.array([b"TaylorF2", b"SEOBNRv4_ROM", b"TaylorF2"])
    row = read_injection_file(path).iloc[1].to_dict()
    try:
        _polarisations(row, 4096.0)
    except DataError as exc:
        assert "cannot generate 'SEOBNRv4_ROM'" in str(exc)
    else:
        pytest.skip("this LALSuite has the SEOBNRv4_ROM data files")
    campaign = validate_campaign({"name": "t", "data": {"store": str(small_store), "injections": str(path)},
                                  "search": {"kind": "pulse"}})
    with pytest.raises(DataError, match=r"LALSuite cannot generate 'SEOBNRv4_ROM'"):
        make_plan(campaign, read_meta(small_store))
