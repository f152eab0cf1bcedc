"""Exchange formats (issue 27): the PSDs a run whitened with (``psd.h5``), candidates as LIGO_LW coinc
files with LAL PSD XML (``gwbatch export``), and BAYESTAR relocalising an exported SPIIR candidate."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from gwbatch.conditioning.psd import design
from gwbatch.io.coinc import Candidate, Single, coinc_document, psd_document, write_document
from gwbatch.io.psds import ChunkPSDs, read_psds, write_psds
from gwbatch.simulate import simulate_store
from gwbatch.simulate.cbc import CbcSpec
from tests.test_coherent_campaign import IFOS, coherent_campaign
from workflow.campaign import run_campaign
from workflow.cli import main

pytest.importorskip("lal")


def _psd(model: str = "aLIGO", fs: float = 1024.0):
    p = design(model, sample_rate=fs, delta_f=0.25)
    f = np.arange(0, fs / 2 + 0.25, 0.25)
    return f, np.where(f >= 10, p(np.maximum(f, 10.0)), 0.0)


def test_psd_file_round_trip_and_the_chunk_that_owns_a_time(tmp_path):
    f, p = _psd()
    rows = ChunkPSDs(f, np.stack([p, 2 * p]), np.array([100.0, 228.0]), np.array([228.0, 356.0]), np.array([63, 64]))
    back = read_psds(write_psds(tmp_path / "psd.h5", {"H1": rows}, segment_seconds=4.0))["H1"]
    np.testing.assert_array_equal(back.psd, rows.psd)
    np.testing.assert_array_equal(back.frequency, f)
    assert back.at(227.9) is not None and np.array_equal(back.at(227.9), p)
    assert np.array_equal(back.at(228.0), 2 * p)  # [start, stop): the second chunk owns 228
    assert np.array_equal(back.at(1000.0), 2 * p)  # outside every chunk: the nearest


def test_coinc_document_loads_in_igwn_ligolw_and_its_psds_in_lal(tmp_path):
    import lal.series
    from igwn_ligolw import lsctables, utils

    f, p = _psd()
    cand = Candidate("spiir", 1000000100.25, 14.2, 3e-8,
                     (Single("H1", 1000000100.2512, 9.0, 0.7, 1.1), Single("L1", 1000000100.2461, 11.0, -2.1, 0.9)),
                     template={"mass1": 1.45, "mass2": 1.31, "spin1z": 0.02, "spin2z": -0.01}, rank=13.9)
    path = write_document(coinc_document(cand, {"H1": (f, p), "L1": (f, 1.5 * p)}, f_low=30.0, version="test"),
                          tmp_path / "coinc.xml")
    doc = utils.load_filename(str(path))
    sngl = {row.ifo: row for row in lsctables.SnglInspiralTable.get_table(doc)}
    assert set(sngl) == {"H1", "L1"}
    assert float(sngl["H1"].end) == pytest.approx(1000000100.2512, abs=1e-9)
    assert sngl["L1"].snr == pytest.approx(11.0) and sngl["L1"].coa_phase == pytest.approx(-2.1)
    assert sngl["H1"].mass1 == pytest.approx(1.45) and sngl["H1"].spin2z == pytest.approx(-0.01)
    assert sngl["H1"].mchirp == pytest.approx((1.45 * 1.31) ** 0.6 / 2.76 ** 0.2)
    coinc_inspiral, = lsctables.CoincInspiralTable.get_table(doc)
    assert coinc_inspiral.snr == pytest.approx(14.2) and coinc_inspiral.combined_far == pytest.approx(3e-8)
    assert set(coinc_inspiral.instruments) == {"H1", "L1"}
    assert len(lsctables.CoincMapTable.get_table(doc)) == 2
    process, = lsctables.ProcessTable.get_table(doc)
    assert process.program == "gwbatch"
    psds = lal.series.read_psd_xmldoc(doc, root_name=None)
    assert psds["L1"].deltaF == pytest.approx(0.25) and psds["L1"].f0 == 0
    np.testing.assert_allclose(psds["L1"].data.data, 1.5 * p, rtol=1e-12)
    # the PSD alone, gzipped
    alone = write_document(psd_document({"H1": (f, p)}, cand.gps_time), tmp_path / "psd.xml.gz")
    with gzip.open(alone) as fh:
        assert b"REAL8FrequencySeries" in fh.read()


def test_a_burst_candidate_becomes_sngl_burst_rows_and_network_parameters(tmp_path):
    from igwn_ligolw import ligolw, lsctables, utils

    f, p = _psd()
    cand = Candidate("burst", 1126259462.42, 20.5, 1e-7,
                     (Single("H1", 1126259462.423, 14.0, duration=0.12), Single("L1", 1126259462.416, 12.0, duration=0.12)),
                     band=(32.0, 256.0), ra=2.0, dec=-1.2, rank=9.3)
    path = write_document(coinc_document(cand, {"H1": (f, p), "L1": (f, p)}, f_low=32.0, version="test"),
                          tmp_path / "coinc.xml")
    doc = utils.load_filename(str(path))
    rows = {r.ifo: r for r in lsctables.SnglBurstTable.get_table(doc)}
    assert float(rows["L1"].peak) == pytest.approx(1126259462.416, abs=1e-9)
    assert rows["H1"].central_freq == pytest.approx(144.0) and rows["H1"].bandwidth == pytest.approx(224.0)
    network, = [e for e in doc.getElementsByTagName(ligolw.LIGO_LW.tagName)
                if e.hasAttribute("Name") and e.Name == "gwbatch:network"]
    assert ligolw.Param.get_param(network, "dec").value == pytest.approx(-1.2)
    assert ligolw.Param.get_param(network, "false_alarm_rate").value == pytest.approx(1e-7)
    assert ligolw.Param.get_param(network, "snr").value == pytest.approx(20.5)


def test_bad_psd_is_refused():
    from gwbatch.errors import DataError

    f, p = _psd()
    cand = Candidate("pulse", 1.0e9, 9.0, 1e-3, (Single("H1", 1.0e9, 9.0),))
    with pytest.raises(DataError, match="uniform frequency grid from 0 Hz"):
        coinc_document(cand, {"H1": (f[1:], p[1:])}, f_low=20.0, version="test")
    with pytest.raises(DataError, match="negative or non-finite"):
        coinc_document(cand, {"H1": (f, np.where(f > 100, np.nan, p))}, f_low=20.0, version="test")


BNS_BANK = """name: bns-tiny
approximant: TaylorF2
mass1: [1.39, 1.41]
mass2: [1.39, 1.41]
f_low: 40.0
sample_rate: 4096
placement: {method: stochastic, minimal_match: 0.97, seed: 1}
spiir: {overlap_target: 0.99, epsilons: [0.04, 0.02, 0.01, 0.005], least_squares: true}
"""


@pytest.fixture(scope="module")
def bns_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("bns")
    bank = base / "bns-tiny.yaml"
    bank.write_text(BNS_BANK)
    store = simulate_store(base / "s.zarr", ifos=IFOS, duration=192, sample_rate=4096, seed=11,
                           cbc=CbcSpec(count=2, mass1=(1.395, 1.405), mass2=(1.395, 1.405), snr=(24, 30), f_low=35.0,
                                       min_spacing=40))
    run_campaign(coherent_campaign(store, base / "run", bank=str(bank), psd_seconds=64.0), progress=False)
    return base / "run"


@pytest.mark.slow
def test_bayestar_localises_an_exported_bns_candidate(bns_run, tmp_path):
    """The loudest candidate exported from the command line (coinc.xml with the PSDs and SNR series)
    and localised by BAYESTAR: the injected direction is inside its 90% region, its 90% area is below
    the search's own, and its SNR series peak at the candidate's SNRs."""
    pytest.importorskip("ligo.skymap")
    from astropy.coordinates import SkyCoord
    import astropy.units as u
    from ligo.skymap.bayestar import localize
    from ligo.skymap.io import events
    from ligo.skymap.postprocess.crossmatch import crossmatch

    from gwbatch.io.coinc import register_with_ligo_skymap

    assert main(["export", str(bns_run), "--format", "coinc", "--top", "1", "--out", str(tmp_path)]) == 0
    cand = pd.read_parquet(bns_run / "candidates.parquet").iloc[0]
    inj = pd.read_parquet(bns_run / "injections.parquet")
    truth = inj.loc[(inj["gps_time"] - cand["gps_time"]).abs().idxmin()]
    assert abs(truth["gps_time"] - cand["gps_time"]) < 0.05
    coinc = tmp_path / f"spiir-{cand['gps_time']:.4f}" / "coinc.xml"
    assert (coinc.parent / "psd.xml.gz").exists()
    register_with_ligo_skymap()
    event, = events.open(str(coinc), psd_file=str(coinc)).values()
    for single in event.singles:  # the series' peak is the candidate's sample (within one sample's SNR change)
        assert np.abs(single.snr_series.data.data).max() == pytest.approx(cand[f"snr_{single.detector}"], rel=0.05)
    sky = localize(event, waveform="TaylorF2", f_low=40.0)
    match = crossmatch(sky, SkyCoord(truth["ra"] * u.rad, truth["dec"] * u.rad), contours=(0.9,))
    # measured: searched probability 0.67, 90% area 2 deg2 (the search's own at sky order 4: 13 deg2)
    assert match.searched_prob < 0.9
    assert match.contour_areas[0] < cand["area90"]


def test_export_needs_a_complete_run(tmp_path):
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x")]) != 0


def _pulse_suite(store, directory):
    """Two pulse searches (thresholds 5 and 6) of one store as members ``a`` and ``b``."""
    import yaml

    member = lambda thr: {"search": {"kind": "pulse", "threshold": thr, "decimation": [16, 8, 8]},  # noqa: E731
                          "background": {"slides": 20}, "plan": {"chunk": 64.0}}
    path = directory / "suite.yaml"
    path.write_text(yaml.safe_dump({"name": "two", "data": {"store": str(store)},
                                    "searches": {"a": member(5.0), "b": member(6.0)},
                                    "cluster": {"kind": "in-process"}, "backend": "numpy"}))
    return path


def test_export_and_vt_refuse_what_would_be_wrong(small_store, tmp_path, capsys):
    """Two searches of one kind export to directories named by member (they shared ``pulse-<GPS>``
    and one overwrote the other); ``--gps`` refuses a non-finite time and one no candidate is near
    (it exported the nearest, however far); a refused output leaves nothing new; a damaged
    manifest is one line, not a traceback; ``vt --out`` never replaces a file it did not write."""
    run = tmp_path / "run"
    assert main(["run", str(_pulse_suite(small_store, tmp_path)), "--out", str(run), "--no-progress"]) == 0
    a, b = (pd.read_parquet(run / m / "candidates.parquet") for m in ("a", "b"))
    shared = sorted(set(np.round(a["gps_time"], 4)) & set(np.round(b["gps_time"], 4)))
    assert shared  # the louder candidates are both members'
    out = tmp_path / "x"
    assert main(["export", str(run), "--far", "inf", "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == len(a) + len(b) and f"a-{shared[0]:.4f}" in names and f"b-{shared[0]:.4f}" in names
    capsys.readouterr()
    assert main(["export", str(run), "--gps", "nan", "--out", str(tmp_path / "y")]) == 2
    assert "--gps must be a finite GPS time" in capsys.readouterr().err
    assert main(["export", str(run), "--gps", "2000000000", "--out", str(tmp_path / "y")]) == 3
    assert "within 1 s of GPS 2000000000.0000" in capsys.readouterr().err
    first = out / names[0] / "coinc.xml"
    before = sorted(p.name for p in out.iterdir())
    (out / names[0] / "coinc.xml").unlink()
    for name in names[1:]:
        (out / name / "coinc.xml").unlink()
    first.write_text("kept")
    assert main(["export", str(run), "--far", "inf", "--out", str(out)]) == 4  # one exists: nothing written
    assert "exist(s); pass --overwrite" in capsys.readouterr().err
    assert [p.name for p in out.rglob("coinc.xml")] == ["coinc.xml"] and first.read_text() == "kept"
    assert sorted(p.name for p in out.iterdir()) == before
    manifest = run / "a" / "manifest.json"
    manifest.write_text(manifest.read_text()[:100])
    assert main(["export", str(run), "--out", str(tmp_path / "z")]) == 3
    err = capsys.readouterr().err
    assert "manifest.json cannot be read (JSONDecodeError)" in err and "Traceback" not in err
    assert main(["vt", str(run / "b"), "--out", str(run / "b" / "manifest.json")]) == 4
    assert "is not a gwbatch VT table: it is never replaced" in capsys.readouterr().err
    assert '"status": "complete"' in (run / "b" / "manifest.json").read_text()


def test_export_refuses_a_bank_edited_since_the_run(small_store, tmp_path, capsys):
    """The SNR series are recomputed from the bank file; one edited since the run would give another
    template's series (a peak of 11 where the candidate had 17), so export refuses, naming it."""
    bank = tmp_path / "bank.yaml"
    bank.write_text(open("configs/banks/bbh-small.yaml").read())
    run = tmp_path / "run"
    run_campaign(coherent_campaign(small_store, run, bank=str(bank)), progress=False)
    assert len(pd.read_parquet(run / "candidates.parquet"))
    bank.write_text(bank.read_text().replace("mass2: [10.0, 16.0]", "mass2: [10.0, 14.0]", 1))
    assert main(["export", str(run), "--out", str(tmp_path / "x")]) == 3
    err = capsys.readouterr().err
    assert "the search settings now differ from the run's run.json" in err and "search.bank" in err
    assert not (tmp_path / "x").exists()
