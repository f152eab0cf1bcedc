"""Bank cache across machines: does a campaign find banks that were built elsewhere (issues 6 and 7)?

    python benchmarks/bank_cache.py STORE CACHE [--campaign configs/one-day.yaml] [--member spiir] [--out r.json]

Looks up the SPIIR search's banks the way its prepare step does (placement, the PSD epochs and which
of them need a bank of their own, each one's PSD from ``STORE``, then
``gwbatch.spiir.cache.cached_bank_path`` in ``CACHE``) and builds no bank (templates are placed, and
their placement cached, when ``CACHE`` has none).  Per detector (and epoch, when there are several)
it reports the bank found and how far the data's PSD is from the one the bank was built for
(largest relative difference; whether the bytes are the same), or that there is none; it exits 1
when a bank is missing, 2 on bad input (a missing store or campaign file, no such SPIIR member).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from gwbatch.conditioning.psd import design  # noqa: E402
from gwbatch.config import load_bank_config, load_run  # noqa: E402
from gwbatch.errors import GwbatchError  # noqa: E402
from gwbatch.io.banks import read_bank_psd  # noqa: E402
from gwbatch.io.store import read_meta  # noqa: E402
from gwbatch.searches.spiir import SpiirSearch  # noqa: E402
from gwbatch.spiir.cache import cached_bank_path, in_process, placed_templates  # noqa: E402
from workflow.plan import member_plan  # noqa: E402
from workflow.prepare import prepare_context  # noqa: E402


def main() -> int:
    try:
        return check()
    except GwbatchError as exc:  # a missing store or campaign, a bad configuration: say so, no traceback
        print(f"bank_cache.py: {exc}", file=sys.stderr)
        return 2


def check() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("cache", type=Path)
    ap.add_argument("--campaign", default="configs/one-day.yaml")
    ap.add_argument("--member", default="spiir", help="the SPIIR member of a multi-search campaign")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not args.cache.is_dir():
        ap.error(f"bank cache {args.cache} is not a directory")
    run = load_run(args.campaign, [f"data.store={args.store}"])
    members = getattr(run, "members", None) or {"": run}
    name = args.member if args.member in members else ""
    if name not in members or members[name].search.kind != "spiir":
        ap.error(f"--member {args.member}: no SPIIR search of that name in {args.campaign}")
    campaign = members[name]
    meta = read_meta(campaign.data.store)
    plan = member_plan(name, campaign, meta)
    cfg = load_bank_config(campaign.search.bank)
    t0 = time.perf_counter()
    templates = placed_templates(cfg, design(campaign.search.placement_psd, meta.sample_rate), args.cache)
    context = prepare_context(plan, meta, args.cache, in_process, False)
    epochs, psds, shared = SpiirSearch().bank_plan(plan.settings, context, cfg, templates)
    rows, missing = {}, []
    for ifo, sharing in shared.items():
        for k in sorted(set(sharing.owner)):
            psd, key = psds[k][ifo], ifo if len(epochs) == 1 else f"{ifo} epoch {k}"
            path = cached_bank_path(cfg, psd, templates, args.cache)
            if not path.exists():
                missing.append(key)
                rows[key] = {"bank": None}
                continue
            built_for = read_bank_psd(path)
            ok = np.isfinite(psd.values) & (psd.values > 0)
            rows[key] = {"bank": path.name, "same_bytes": psd.fingerprint() == built_for.fingerprint(),
                         "max_relative_difference": float(np.max(np.abs(psd.values[ok] / built_for.values[ok] - 1)))}
    seconds = time.perf_counter() - t0
    for ifo, row in rows.items():
        print(ifo, json.dumps(row))
    print(f"lookup {seconds:.1f} s; " + (f"no bank in {args.cache} for {', '.join(missing)}" if missing
                                        else f"every bank found in {args.cache}"))
    if args.out:
        args.out.write_text(json.dumps({"store": args.store, "cache": str(args.cache), "seconds": seconds,
                                        "numpy": np.__version__, "banks": rows}, indent=1))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
