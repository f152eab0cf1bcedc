"""How few filter updates a SPIIR template can take: the octave ladder against complex sub-band
channels and against the bound each filter's decay sets (issue 25's throughput question; CPU only).

The multi-rate bank runs each filter on the real octave ladder (``gwbatch.spiir.multirate``): at
the lowest rate ``R / 2^k`` whose Nyquist frequency holds the filter's frequency with gstlal's 1.3
headroom.  This study asks whether another decomposition of the band needs fewer updates:

- **Complex sub-band channels** (:mod:`gwbatch.spiir.subbands`: a uniform DFT filter bank, 2x
  oversampled, channels ``S = R_c / 2`` apart at complex rate ``R_c = R / D``, each filter in its
  nearest channel).  The template's response (:func:`gwbatch.spiir.subbands.impulse_response`, the
  channel FIR of ``K`` taps per phase and Kaiser ``beta``) is compared with the exact whitened
  template at three impulse phases (the system is periodic in ``D``) against the single-rate
  filters' overlap.  Every filter then costs ``1 / D`` updates per top-rate sample.
- **The decay bound.** Whatever the decomposition, a filter sampled more coarsely than a few
  samples per e-folding of its decay loses its shape (the bank's ``DECAY_SAMPLES`` attempts): at
  ``N`` samples per e-folding a filter of decay ``tau`` (top-rate samples) needs at least ``N / tau``
  updates per top-rate sample, however its band is shifted.  ``N = 4`` is the coarsest any
  multi-rate attempt of the bank uses.

    python benchmarks/spiir_subbands.py --bank bns --templates 24 --json bns-subbands.json
    python benchmarks/spiir_subbands.py --bank bbh --templates 24 --json bbh-subbands.json
    python benchmarks/spiir_subbands.py --bank bns --templates 16 --copies 4 --throughput 64   # the CPU twins
    python benchmarks/spiir_subbands.py --bank bbh --templates 64 --as-built   # as the bank builds them
    python benchmarks/spiir_subbands.py --bank bns --templates 32 --levels     # channels of several rates

``--levels`` asks how far channels of several rates could go: each filter in channels of
decimation 16, 32 or 64 by its decay (slower than 256 or 1024 top-rate samples per e-folding: the
next rate), the levels' responses summed, against the single-rate overlap (no refit).  Each level
is a filter bank of its own here; a build would nest the slower ones inside the lowest channels.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.spiir_multirate import BANKS, _build, _masses  # noqa: E402

#: Channel layouts tried: (decimation D, taps per phase K, Kaiser beta).
CHANNELS = ((32, 10, 6.0), (32, 16, 8.0), (16, 10, 6.0), (8, 10, 6.0))
#: Samples per e-folding for the decay bound.
DECAY_SAMPLES = (4, 8)


def _template(args):
    """One template's single-rate filters and its whitened template (for the overlaps)."""
    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config
    from gwbatch.spiir.bank import build_template, frequency_grid, taper_end
    from gwbatch.spiir.construct import whitened_template
    from gwbatch.waveforms import Template, frequency_domain

    path, m1, m2 = args
    cfg = load_bank_config(path)
    cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"multirate": False, "subbands": False})})
    psd = design("aLIGO", cfg.sample_rate)
    template = Template(m1, m2)
    built = build_template(template, cfg, psd)
    n, delta_f = frequency_grid(template, cfg)
    f = np.arange(n // 2 + 1) * delta_f
    htilde = frequency_domain(cfg.approximant, template, f.size, delta_f, max(cfg.f_low - 3.0, 5.0))
    white = whitened_template(htilde, psd(np.maximum(f, 1.0)), delta_f, cfg.sample_rate, cfg.f_low,
                              taper_end(template, cfg))
    return (m1, m2, built.a, built.b, built.d, built.overlap_single, white.h, cfg.sample_rate, cfg.f_low,
            cfg.spiir.multirate_safety)


def study(built) -> dict:
    """Updates per top-rate sample and channel overlaps of one template."""
    from gwbatch.spiir.construct import Target
    from gwbatch.spiir.multirate import filter_levels
    from gwbatch.spiir.subbands import filter_channels, impulse_response

    m1, m2, a, b, d, overlap, h, rate, f_low, safety = built
    decay = -1.0 / np.log(np.abs(a))
    row = {"mass1": m1, "mass2": m2, "filters": int(a.size), "overlap_single": float(overlap),
           "octave_updates": float(np.sum(2.0 ** -filter_levels(a, rate, f_low, safety).astype(float)))}
    for n in DECAY_SAMPLES:
        row[f"decay_bound_{n}"] = float(np.sum(np.minimum(1.0, n / decay)))
    for dec, taps, beta in CHANNELS:
        start = 4 * (taps * dec + 1)
        target = Target(h, headroom=start)
        overlaps = []
        for phase in (0, dec // 3, dec // 2):
            r, first = impulse_response(a, b, d, rate, start + phase, dec, taps, beta, nest=False)
            overlaps.append(target.overlap(r, lead=start + phase - first)[0])
        used = np.unique(filter_channels(a, rate, dec)).size
        key = f"D{dec}_K{taps}"
        row[key] = {"updates": a.size / dec, "channels": used, "overlap_min": float(min(overlaps)),
                    "loss": float(overlap - min(overlaps))}
    return row


#: ``--levels``: named rules, each ``((decay above, decimation), ...)`` (decay in top-rate samples).
LEVELS = {"D16": ((0, 16),), "D16, D32 above 256": ((0, 16), (256, 32)),
          "D16, D32 above 128": ((0, 16), (128, 32)),
          "D16, D32 above 256, D64 above 1024": ((0, 16), (256, 32), (1024, 64)),
          "D16, D32 above 128, D64 above 1024": ((0, 16), (128, 32), (1024, 64))}


def levels_study(built) -> dict:
    """Updates per top-rate sample and the overlap loss (worst of four impulse phases) of one
    template's filters in channels of several rates, each rule of :data:`LEVELS`."""
    from gwbatch.spiir.construct import Target
    from gwbatch.spiir.subbands import impulse_response

    m1, m2, a, b, d, overlap, h, rate, *_ = built
    decay = -1.0 / np.log(np.abs(a))
    start = 4 * (10 * 64 + 1)
    target = Target(h, headroom=start)
    row = {"mass1": m1, "mass2": m2, "filters": int(a.size), "overlap_single": float(overlap)}
    for name, rule in LEVELS.items():
        dec = np.zeros(a.size, int)
        for above, decimation in rule:
            dec[decay > above] = decimation
        overlaps = []
        for phase in (0, 10, 16, 33):
            parts = [impulse_response(a[dec == k], b[dec == k], d[dec == k], rate, start + phase, k, 10, 6.0,
                                      nest=False)
                     for k in np.unique(dec).tolist()]
            lo = min(first for _, first in parts)
            r = np.zeros(max(first + y.size for y, first in parts) - lo, np.complex128)
            for y, first in parts:
                r[first - lo: first - lo + y.size] += y
            overlaps.append(target.overlap(r, lead=start + phase - lo)[0])
        row[name] = {"updates": float(np.sum(1.0 / dec)), "loss": float(overlap - min(overlaps)),
                     "share": {str(k): float(np.mean(dec == k)) for k in np.unique(dec).tolist()}}
    return row


def summarise_levels(rows: list[dict]) -> list[str]:
    lines = [f"{len(rows)} templates, {np.median([r['filters'] for r in rows]):.0f} filters (median)"]
    for name in LEVELS:
        loss = np.array([r[name]["loss"] for r in rows])
        share = {k: np.median([r[name]["share"].get(k, 0.0) for r in rows]) for k in ("16", "32", "64")}
        lines.append(f"{name}: {np.median([r[name]['updates'] for r in rows]):.2f} updates per top-rate sample, "
                     f"filters at D16/32/64 {share['16']:.2f}/{share['32']:.2f}/{share['64']:.2f}, overlap loss "
                     f"median {np.median(loss):+.5f}, max {loss.max():+.5f}, within 0.002 for {np.mean(loss <= 0.002):.0%}")
    return lines


def summarise(rows: list[dict]) -> list[str]:
    med = lambda k: float(np.median([r[k] for r in rows]))  # noqa: E731
    lines = [f"{len(rows)} templates, {med('filters'):.0f} filters (median), single-rate overlap {med('overlap_single'):.4f}",
             f"octave ladder: {med('octave_updates'):.1f} updates per top-rate sample (median)"]
    for n in DECAY_SAMPLES:
        lines.append(f"decay bound, {n} samples per e-folding: {med(f'decay_bound_{n}'):.1f}")
    for dec, taps, _ in CHANNELS:
        key = f"D{dec}_K{taps}"
        loss = np.array([r[key]["loss"] for r in rows])
        lines.append(f"channels D={dec} (complex {1.0 / dec:.4f} of the rate), K={taps}: "
                     f"{np.median([r[key]['updates'] for r in rows]):.1f} updates, overlap loss median {np.median(loss):+.4f}, "
                     f"max {loss.max():+.4f}, within 0.002 for {np.mean(loss <= 0.002):.0%}")
    return lines


def cpu_throughput(path: str, masses, copies: int, seconds: float, repeat: int = 3) -> dict:
    """The CPU twins of both decompositions on the same templates (each built both ways, repeated
    ``copies`` times) over ``seconds`` of white noise: ``filter_templates`` of the ladder's bank and of
    the bank with ``spiir.subbands`` (tolerance 1, so every template is in sub-bands); medians."""
    import time

    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config
    from gwbatch.spiir.bank import build_template, pack
    from gwbatch.spiir.filtering import filter_templates
    from gwbatch.waveforms import Template

    cfg = load_bank_config(path)
    cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"subbands": False})})  # the ladder
    psd = design("aLIGO", cfg.sample_rate)
    points = [Template(m1, m2) for m1, m2 in masses] * copies
    sub = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"subbands": True, "multirate_tolerance": 1.0})})
    x = np.random.default_rng(1).standard_normal(int(seconds * cfg.sample_rate)).astype(np.float32)
    out = {"templates": len(points), "seconds": seconds}
    for name, c in (("ladder", cfg), ("subbands", sub)):
        built = [build_template(t, c, psd) for t in points[: len(masses)]] * copies
        bank = pack(built, c, psd, points)
        filter_templates(x, bank)  # compiles
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            filter_templates(x, bank)
            times.append(time.perf_counter() - t0)
        median = float(np.median(times))
        out[name] = {"median_s": median, "template_seconds_per_second": len(points) * seconds / median,
                     "updates_per_sample": float(np.median(bank.updates_per_sample()))}
    out["subbands_over_ladder"] = out["ladder"]["median_s"] / out["subbands"]["median_s"]
    return out


def as_built(path: str, masses, workers: int) -> dict:
    """The templates built as the bank builds them with ``spiir.subbands``: how many run in sub-bands
    at the bank's tolerance, and the loss against single-rate with every template in sub-bands."""
    with ProcessPoolExecutor(workers) as pool:
        own = list(pool.map(_build, [(path, m1, m2, True, {"subbands": True}) for m1, m2 in masses]))
        every = list(pool.map(_build, [(path, m1, m2, True, {"subbands": True, "multirate_tolerance": 1.0})
                                       for m1, m2 in masses]))
    overlap = np.array([bt.overlap for bt in every])
    loss = np.array([bt.overlap_single for bt in every]) - overlap
    return {"templates": len(masses), "in_subbands_at_the_banks_tolerance": sum(bool(bt.subband) for bt in own),
            "all_in_subbands": {"overlap_median": float(np.median(overlap)), "overlap_min": float(overlap.min()),
                                "loss_median": float(np.median(loss)), "loss_max": float(loss.max())}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bank", choices=sorted(BANKS), default="bns")
    p.add_argument("--templates", type=int, default=24)
    p.add_argument("--seed", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--throughput", type=float, metavar="SECONDS",
                   help="instead: time both CPU twins over SECONDS of noise (--templates built, --copies each)")
    p.add_argument("--copies", type=int, default=4)
    p.add_argument("--as-built", action="store_true",
                   help="instead: the templates as a bank with spiir.subbands builds them (refit included)")
    p.add_argument("--levels", action="store_true",
                   help="instead: channels of several rates, each filter's by its decay (LEVELS)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    masses = _masses(args.bank, args.templates, np.random.default_rng(args.seed))
    if args.throughput:
        result = cpu_throughput(str(root / BANKS[args.bank]), masses, args.copies, args.throughput)
        print(json.dumps(result, indent=1))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return 0
    if args.as_built:
        result = as_built(str(root / BANKS[args.bank]), masses, args.workers)
        print(json.dumps(result, indent=1))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return 0
    with ProcessPoolExecutor(args.workers) as pool:
        built = list(pool.map(_template, [(str(root / BANKS[args.bank]), m1, m2) for m1, m2 in masses]))
        rows = list(pool.map(levels_study if args.levels else study, built))
    for line in (summarise_levels if args.levels else summarise)(rows):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"bank": args.bank, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
