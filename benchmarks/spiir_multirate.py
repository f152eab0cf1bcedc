"""Multi-rate against single-rate SPIIR filtering on one GPU: template-seconds of strain per GPU-second.

Builds ``--templates`` BNS templates (``configs/banks/bns.yaml``'s region, aLIGO design PSD) both ways
in parallel on the CPU, then times ``filter_templates`` (all resampling included) on ``--seconds`` of
white noise on the GPU, median of ``--repeat`` runs after a warm-up.

    python benchmarks/spiir_multirate.py --templates 64 --seconds 256 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np


def _build(args):
    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config
    from gwbatch.spiir.bank import build_template
    from gwbatch.waveforms import Template

    m1, m2, multirate = args
    cfg = load_bank_config("configs/banks/bns.yaml")
    cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"multirate": multirate})})
    return build_template(Template(m1, m2), cfg, design("aLIGO", cfg.sample_rate))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--templates", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import cupy

    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config
    from gwbatch.spiir.bank import pack
    from gwbatch.spiir.filtering import filter_templates
    from gwbatch.waveforms import Template

    rng = np.random.default_rng(1)
    masses = [tuple(sorted(rng.uniform(1.2, 2.0, 2), reverse=True)) for _ in range(args.templates)]
    cfg = load_bank_config("configs/banks/bns.yaml")
    psd = design("aLIGO", cfg.sample_rate)
    templates = [Template(*m) for m in masses]
    out = {}
    with ProcessPoolExecutor() as pool:
        for multirate in (False, True):
            built = list(pool.map(_build, [(m1, m2, multirate) for m1, m2 in masses]))
            bank = pack(built, cfg, psd, templates)
            x = cupy.asarray(rng.standard_normal(args.seconds * int(cfg.sample_rate)).astype(np.float32))
            filter_templates(x, bank)
            cupy.cuda.Device().synchronize()
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                filter_templates(x, bank)
                cupy.cuda.Device().synchronize()
                times.append(time.perf_counter() - t)
            med = float(np.median(times))
            out["multirate" if multirate else "single"] = {
                "median_s": med, "template_seconds_per_gpu_second": args.templates * args.seconds / med,
                "filters_median": float(np.median(bank.n_filters)),
                "update_reduction": float(bank.n_filters.sum() / bank.updates_per_sample().sum()),
                "overlap_median": float(np.median(bank.overlap)),
                "overlap_single_median": float(np.median(bank.overlap_single))}
            print(("multi-rate " if multirate else "single-rate"), json.dumps(out["multirate" if multirate else "single"]))
    print(f"speed-up {out['single']['median_s'] / out['multirate']['median_s']:.2f}x")
    if args.json:
        open(args.json, "w").write(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
