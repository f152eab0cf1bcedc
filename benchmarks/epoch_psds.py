"""The SPIIR search's PSD epochs measured in one thread and in many: time and equality.

A long campaign with ``psd: data`` measures one PSD per detector and epoch before any chunk runs
(:meth:`gwbatch.searches.spiir.SpiirSearch.epoch_psds`): ``configs/month.yaml`` makes 632.  This
times those measurements for a campaign and store at each ``--threads`` value in turn and checks
that every run gives the PSDs of the first, bit for bit.  Prints one JSON line per run.

usage: python benchmarks/epoch_psds.py configs/month.yaml --member spiir --set data.store=/tmp/m.zarr --threads 1 16 1 16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gwbatch.config.loading import load_run  # noqa: E402
from gwbatch.io.store import read_meta  # noqa: E402
from gwbatch.searches import get_search  # noqa: E402
from workflow.plan import member_plan  # noqa: E402
from workflow.prepare import prepare_context  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", type=Path)
    p.add_argument("--member", default="", help="the SPIIR member of a multi-search campaign")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = p.parse_args(argv)
    loaded = load_run(args.config, args.set)
    campaign = loaded.members[args.member] if args.member else loaded
    meta = read_meta(campaign.data.store)
    plan = member_plan(args.member, campaign, meta)
    settings = plan.settings
    context = prepare_context(plan, meta, Path("."), None, progress=False)
    search = get_search("spiir")
    epochs = search.psd_epochs(settings, context.chunks)
    first = None
    for threads in args.threads:
        started = time.perf_counter()
        psds = search.epoch_psds(settings, dataclasses.replace(context, threads=threads), epochs)
        seconds = time.perf_counter() - started
        values = [None if p[ifo] is None else p[ifo].values for p in psds for ifo in settings.ifos]
        first = values if first is None else first
        same = all((a is None and b is None) or (a is not None and b is not None and (a == b).all())
                   for a, b in zip(first, values))
        print(json.dumps({"threads": threads, "epochs": len(epochs), "measurements": len(values),
                          "seconds": round(seconds, 3), "equal_to_first": same}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
