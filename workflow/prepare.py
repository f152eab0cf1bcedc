"""What a search needs before its chunks run, built once per campaign on the cluster.

The pulse search needs nothing.  The SPIIR search needs a built bank per detector: the templates
are placed once (with the configured design curve, so every detector has the same templates) and
the filters are built for each detector's PSD: its own data's Welch-median PSD over the first
``psd_seconds`` of the span, as the chunks' truncated whitening filter sees it (``psd: data``;
:func:`gwbatch.conditioning.whiten.effective_psd`), or a design curve.  Banks are cached by
fingerprint (configuration, PSD, templates) in ``search.bank_cache`` (default ``DIR/banks/``), and
so are the placed templates, so a resumed or repeated campaign reuses them, and campaigns that
share a cache directory share their banks.
"""

from __future__ import annotations

import logging
from pathlib import Path

from gwbatch.conditioning.psd import design
from gwbatch.conditioning.whiten import effective_psd
from gwbatch.config import Campaign, load_bank_config
from gwbatch.errors import ConfigError
from gwbatch.io.banks import load_bank
from gwbatch.io.store import StoreMeta
from workflow.bank import build_bank, cached_bank_path, placed_templates, store_psd
from workflow.cluster import cpu_cluster_config, start_cluster
from workflow.plan import Plan

log = logging.getLogger("gwbatch")


def bank_psds(campaign: Campaign, plan: Plan, meta: StoreMeta) -> dict:
    """The PSD each detector's SPIIR bank is built for: measured from the store's first
    ``search.psd_seconds`` of the span as the chunks will whiten it, or a design curve."""
    search, cond = campaign.search, campaign.conditioning
    psds = {}
    for ifo in plan.ifos:
        if search.psd == "data":
            measured = store_psd(meta.path, ifo, start=plan.span_start, seconds=search.psd_seconds,
                                 segment=cond.psd.segment, dq_flags=tuple(campaign.data.dq_flags),
                                 zero_gap=campaign.data.zero_gap)
            psds[ifo] = effective_psd(measured, meta.sample_rate, int(round(cond.filter_duration * meta.sample_rate)),
                                      cond.f_low, cond.f_high)
        else:
            psds[ifo] = design(search.psd, meta.sample_rate)
    return psds


def prepare(campaign: Campaign, plan: Plan, meta: StoreMeta, outdir: Path, progress: bool) -> dict:
    """Resources the chunks of ``campaign`` need (``{}`` for searches that need none).

    Banks that are not cached yet are built on CPU workers (:func:`workflow.cluster.cpu_cluster_config`),
    started only for that.
    """
    if campaign.search.kind != "spiir":
        return {}
    search = campaign.search
    cfg = load_bank_config(search.bank)
    if abs(cfg.sample_rate - meta.sample_rate) > 1e-9:
        raise ConfigError(f"bank {search.bank} is for {cfg.sample_rate:g} Hz but store {meta.path} is at "
                          f"{meta.sample_rate:g} Hz; set sample_rate in the bank file to the data's rate")
    cache = search.bank_cache or outdir / "banks"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"search.bank_cache {str(cache)!r} cannot hold banks: {exc.strerror or exc}; "
                          "name a directory that exists or can be created") from exc
    templates = placed_templates(cfg, design(search.placement_psd, meta.sample_rate), cache)
    psds = bank_psds(campaign, plan, meta)
    paths = {ifo: cached_bank_path(cfg, psds[ifo], templates, cache) for ifo in plan.ifos}
    missing = [ifo for ifo in plan.ifos if not paths[ifo].exists()]
    if missing:
        with start_cluster(cpu_cluster_config(campaign.cluster), "numpy", len(templates)) as cluster:
            for ifo in missing:
                build_bank(cfg, psds[ifo], cluster=cluster, cache=cache, templates=templates, progress=progress)
    banks = {}
    for ifo in plan.ifos:
        bank = load_bank(paths[ifo])
        log.info("bank %s for %s: %d templates, median overlap %.4f (%s)", cfg.name, ifo, bank.size,
                 float(sorted(bank.overlap)[bank.size // 2]), paths[ifo].name)
        banks[ifo] = (str(paths[ifo]), bank.fingerprint)
    return {"banks": banks}
