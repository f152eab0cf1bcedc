"""PSD epochs of the SPIIR search (gwbatch.spiir.epochs): chunks grouped into epochs, the SNR lost
by filters built for another PSD, which epochs get a bank of their own, and a campaign whose noise
changes half way through."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gwbatch.conditioning.psd import PSD, design
from gwbatch.config import validate_campaign
from gwbatch.errors import ConfigError
from gwbatch.spiir.epochs import mismatch_loss, plan_epochs, share_banks, template_cutoffs
from gwbatch.waveforms import Template, frequency_domain
from gwbatch.waveforms.taylorf2 import isco_frequency


def chunks(edges):
    return [SimpleNamespace(index=k, start=a, stop=b) for k, (a, b) in enumerate(zip(edges[:-1], edges[1:]))]


def test_epochs_hold_whole_chunks():
    fs = 16.0
    specs = chunks(np.arange(0, 1001, 50) * 16)  # 20 chunks of 50 s
    epochs = plan_epochs(specs, 256.0, fs)
    assert len(epochs) == 4  # 1000 s in epochs of about 256 s
    assert [c for e in epochs for c in e.chunks] == list(range(20))
    assert all(e.start == specs[e.chunks[0]].start and e.stop == specs[e.chunks[-1]].stop for e in epochs)
    assert all(abs((e.stop - e.start) / fs - 250) <= 50 for e in epochs)
    assert [e.index for e in epochs] == [0, 1, 2, 3]
    assert len(plan_epochs(specs, None, fs)) == 1
    # chunks longer than the epoch: an epoch per chunk, none empty
    long = plan_epochs(chunks(np.arange(0, 401, 100) * 16), 30.0, fs)
    assert [e.chunks for e in long] == [(0,), (1,), (2,), (3,)]


def stepped(psd: PSD, above: float, factor: float) -> PSD:
    return PSD(psd.frequencies, psd.values * np.where(psd.frequencies > above, factor, 1.0), "stepped")


def whitened_match(a: PSD, b: PSD, template: Template, f_low: float, fs: float) -> float:
    """The match of the template whitened by ``a`` and by ``b``, from its own TaylorF2 spectrum cut at ISCO."""
    df = 0.125
    f = np.arange(int(fs / 2 / df) + 1) * df
    h = frequency_domain("TaylorF2", template, f.size, df, f_low)
    h[(f < f_low) | (f > isco_frequency(template.mass1, template.mass2))] = 0
    ua, ub = h / np.sqrt(a(np.maximum(f, df))), h / np.sqrt(b(np.maximum(f, df)))
    return float(np.abs(np.vdot(ua, ub)) / np.sqrt(np.vdot(ua, ua).real * np.vdot(ub, ub).real))


def test_mismatch_loss_is_the_whitened_templates_mismatch():
    """The loss with the f^(-7/3) stand-in equals one minus the match of real TaylorF2 templates
    whitened by the two PSDs, within 3% of the loss (measured: to 1e-12, this TaylorF2's amplitude being Newtonian), for a BNS and a BBH cut at
    their ISCO; it vanishes for proportional PSDs and is symmetric."""
    fs, f_low = 4096.0, 20.0
    base = design("aLIGO", fs)
    assert mismatch_loss(base, PSD(base.frequencies, 3.0 * base.values), f_low, [200.0, 2048.0]) < 1e-12
    for factor in (2.0, 0.3):
        moved = stepped(base, 60.0, factor)
        for template in (Template(1.4, 1.4, 0.0, 0.0), Template(20.0, 10.0, 0.0, 0.0)):
            cut = isco_frequency(template.mass1, template.mass2)
            predicted = mismatch_loss(base, moved, f_low, [cut])
            exact = 1.0 - whitened_match(base, moved, template, f_low, fs)
            assert predicted > 1e-3 and predicted == pytest.approx(exact, rel=0.03), (factor, template)
            assert mismatch_loss(moved, base, f_low, [cut]) == pytest.approx(predicted, rel=1e-9)
    # the loss over a bank is the worst over its cut-offs
    cutoffs = template_cutoffs(np.array([1570.0, 88.0, 400.0]), fs)
    assert cutoffs[0] == pytest.approx(88.0) and cutoffs[-1] == 2048.0
    moved = stepped(base, 150.0, 2.0)
    worst = max(mismatch_loss(base, moved, f_low, [c]) for c in cutoffs)
    assert mismatch_loss(base, moved, f_low, cutoffs) == pytest.approx(worst, rel=1e-12)


def test_epochs_share_banks_within_tolerance():
    """An epoch reuses the built bank that loses least on it when that is within tolerance; an epoch
    without a PSD takes its nearest neighbour's bank (the earlier on a tie)."""
    base = design("aLIGO", 4096.0)
    near = stepped(base, 150.0, 1.05)
    far = stepped(base, 150.0, 3.0)
    farther = stepped(base, 150.0, 3.1)

    def loss(a, b):
        return mismatch_loss(a, b, 20.0, [1570.0])

    assert loss(base, near) < 1e-3 < 5e-3 < loss(base, far) and loss(far, farther) < 1e-3
    sharing = share_banks([base, near, far, None, farther, None, base], loss, 5e-3)
    assert sharing.owner == (0, 0, 2, 2, 2, 2, 0)
    assert sharing.loss[0] == 0.0 and sharing.loss[2] == 0.0 and 0 < sharing.loss[1] < 1e-3
    assert np.isnan(sharing.loss[3]) and np.isnan(sharing.loss[5]) and sharing.loss[6] == 0.0
    assert share_banks([None, far, base], loss, 5e-3).owner == (1, 1, 2)
    with pytest.raises(ValueError, match="no epoch has a PSD"):
        share_banks([None, None], loss, 5e-3)


def test_psd_seconds_longer_than_the_epoch_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"psd_seconds \(512\) must be at most psd_epoch \(256\)"):
        validate_campaign({"name": "x", "data": {"store": str(tmp_path / "s.zarr")},
                           "search": {"kind": "spiir", "bank": "configs/banks/bbh-small.yaml", "psd_epoch": 256.0},
                           "output": {"dir": str(tmp_path / "out")}})


@pytest.fixture(scope="module")
def drifting_store(tmp_path_factory):
    """256 s of H1 and L1 at 1024 Hz whose noise above ~60 Hz rises several times over at 128 s: white
    noise of about twice the design curve's lowest amplitude is added to the second half."""
    import zarr

    from gwbatch.io.store import seal
    from gwbatch.simulate import simulate_store

    path = simulate_store(tmp_path_factory.mktemp("stores") / "drift.zarr", ifos=("H1", "L1"), duration=256,
                          sample_rate=1024, seed=11)
    strain = zarr.open_group(path, mode="r+")["strain"]
    rng = np.random.default_rng(4)
    half = 128 * 1024
    asd = 2.0 * np.sqrt(design("aLIGO", 1024.0).values.min())
    for row in range(2):
        x = strain[row, half:]
        strain[row, half:] = (x + asd * np.sqrt(512.0) * rng.standard_normal(x.size)).astype(np.float32)
    seal(path)
    return path


def epoch_campaign(store, out, **search):
    return validate_campaign({
        "name": "epochs",
        "data": {"store": str(store)},
        "search": {"kind": "spiir", "bank": "configs/banks/bbh-small.yaml", "threshold": 5.5, "psd_seconds": 128.0,
                   "psd_epoch": 128.0, **search},
        "background": {"slides": 4, "slide_step": 2.0},
        "plan": {"chunk": 64.0},
        "cluster": {"kind": "in-process"},
        "backend": "numpy",
        "output": {"dir": str(out)},
    })


def test_campaign_builds_a_bank_per_epoch_only_where_the_noise_changed(drifting_store, small_store, tmp_path,
                                                                      monkeypatch):
    """Two epochs of two 64 s chunks each. Where the noise changes between them, each detector gets a
    bank per epoch (the first epoch's bank would lose more than the tolerance on the second: measured
    1.7%), and every chunk filters with its own epoch's bank; in stationary noise both epochs share the
    first epoch's bank (loss measured ~0.2%, the PSD estimates' own scatter).  The manifest lists the
    epochs, their chunks and banks."""
    from gwbatch.io.banks import read_bank_psd
    from gwbatch.searches import spiir as spiir_mod
    from workflow.campaign import run_campaign

    used = []
    real = spiir_mod.chunk_bank

    def recording(resources, ifo, spec):
        bank = real(resources, ifo, spec)
        used.append((spec.index, ifo, resources["epoch_banks"][resources["chunk_epoch"][spec.index]][ifo][0]))
        return bank

    monkeypatch.setattr(spiir_mod, "chunk_bank", recording)
    drift = run_campaign(epoch_campaign(drifting_store, tmp_path / "drift"), progress=False)
    res = drift.manifest["resources"]
    epochs = res["psd_epochs"]
    assert [e["chunks"] for e in epochs] == [[0, 1], [2, 3]] and res["psd_tolerance"] == 0.005
    assert epochs[1]["gps_start"] == pytest.approx(epochs[0]["gps_start"] + 128.0)
    assert all(e["psd_seconds"] == 128.0 and e["psd_gps_start"] == e["gps_start"] for e in epochs)
    for ifo in ("H1", "L1"):
        assert len(res["banks"][ifo]) == 2
        first, second = (e["banks"][ifo] for e in epochs)
        assert (first["built_for_epoch"], second["built_for_epoch"]) == (0, 1) and first["file"] != second["file"]
        assert first["snr_loss"] == 0.0 and second["snr_loss"] == 0.0
        # what sharing would have lost: the first epoch's bank on the second epoch's PSD
        a, b = read_bank_psd(first["file"]), read_bank_psd(second["file"])
        lost = mismatch_loss(a, b, 30.0, template_cutoffs(np.array([4400.0 / 32.0]), 1024.0))
        assert 0.01 < lost < 0.1, lost  # measured 0.017
    assert {(c, ifo): f for c, ifo, f in used} == {(c, ifo): epochs[c // 2]["banks"][ifo]["file"]
                                                  for c in range(4) for ifo in ("H1", "L1")}

    steady = run_campaign(epoch_campaign(small_store, tmp_path / "steady"), progress=False).manifest["resources"]
    for ifo in ("H1", "L1"):
        first, second = (e["banks"][ifo] for e in steady["psd_epochs"])
        assert steady["banks"][ifo] == [first["file"]] and second["file"] == first["file"]
        assert second["built_for_epoch"] == 0 and 0 < second["snr_loss"] <= 0.005


def test_epoch_psds_in_threads_equal_those_made_one_by_one_and_name_epochs_without_data(drifting_store, tmp_path,
                                                                                      caplog):
    """The PSD measurements of the epochs run in the context's threads: the same PSDs, bit for bit,
    as one thread makes.  An epoch whose PSD span is all excluded gets None (and takes its nearest
    epoch's bank), with a warning that counts such epochs; a detector with no epoch of data is refused
    with the store's own error."""
    import dataclasses

    from gwbatch.errors import DataError
    from gwbatch.io.store import read_meta
    from gwbatch.searches import get_search
    from workflow.plan import member_plan
    from workflow.prepare import prepare_context

    campaign = epoch_campaign(drifting_store, tmp_path / "out")
    meta = read_meta(drifting_store)
    plan = member_plan("", campaign, meta)
    settings, search = plan.settings, get_search("spiir")
    context = prepare_context(plan, meta, tmp_path / "out", None, progress=False)
    epochs = search.psd_epochs(settings, context.chunks)
    assert len(epochs) == 2

    def fingerprints(psds):
        return [None if p[ifo] is None else p[ifo].fingerprint() for p in psds for ifo in ("H1", "L1")]

    one = search.epoch_psds(settings, dataclasses.replace(context, threads=1), epochs)
    four = search.epoch_psds(settings, dataclasses.replace(context, threads=4), epochs)
    assert fingerprints(one) == fingerprints(four) and None not in fingerprints(one)
    assert all(np.array_equal(a[ifo].values, b[ifo].values) for a, b in zip(one, four) for ifo in ("H1", "L1"))

    # L1's second epoch excluded: None there, a warning; the other PSDs unchanged
    second = np.array([[epochs[1].start, epochs[1].stop]])
    gap = dataclasses.replace(context, threads=4, excluded={**context.excluded, "L1": second})
    with caplog.at_level("WARNING", logger="gwbatch"):
        psds = search.epoch_psds(settings, gap, epochs)
    assert fingerprints(psds) == fingerprints(one)[:3] + [None]
    assert "L1: 1 of 2 PSD epochs have too little data for a PSD" in caplog.text

    everything = np.array([[epochs[0].start, epochs[1].stop]])
    with pytest.raises(DataError):
        search.epoch_psds(settings, dataclasses.replace(context, threads=4, excluded={"L1": everything}), epochs)
