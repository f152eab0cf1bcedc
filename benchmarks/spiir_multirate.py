"""Multi-rate against single-rate SPIIR filtering on one GPU, and the cuFFT matched-filter peer of
the same templates in the same run: template-seconds of strain per GPU-second.

Builds ``--distinct`` templates of a bank's region (``--bank bns``: ``configs/banks/bns.yaml``,
TaylorF2 from 30 Hz; ``bbh``: ``configs/banks/bbh.yaml``, IMRPhenomD from 20 Hz; aLIGO design PSD)
both ways in parallel on the CPU, and repeats them to ``--templates`` (a kernel's time does not
depend on which template a lane holds).  Times ``filter_templates`` (all resampling included) on
``--seconds`` of white noise, median of ``--repeat`` runs after a warm-up.

The peer: FFT matched filtering by overlap-save with cuFFT (complex SNR, one forward FFT of the
data per segment, then per template a product and an inverse FFT), segments as long as the
longest template allows, the FFT length that gives the most output per second chosen among
powers of two; its templates are random spectra of the same count and length (the FFTs' cost does
not depend on their content).

    python benchmarks/spiir_multirate.py --bank bns --distinct 128 --templates 1024 --seconds 64
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BANKS = {"bns": "configs/banks/bns.yaml", "bbh": "configs/banks/bbh.yaml"}


def _build(args):
    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config
    from gwbatch.spiir.bank import build_template
    from gwbatch.waveforms import Template

    path, m1, m2, multirate, *extra = args  # extra: spiir settings, e.g. {"subbands": True}
    cfg = load_bank_config(path)
    # the ladder unless told: the shipped BNS banks turn sub-bands on
    spiir = {"multirate": multirate, "subbands": False, **(extra[0] if extra else {})}
    cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update=spiir)})
    return build_template(Template(m1, m2), cfg, design("aLIGO", cfg.sample_rate))


def _masses(bank: str, n: int, rng) -> list[tuple[float, float]]:
    if bank == "bns":
        return [tuple(sorted(rng.uniform(1.2, 2.0, 2), reverse=True)) for _ in range(n)]
    out = []
    while len(out) < n:  # bbh.yaml's region: 5-95 Msun each, total 10-100, mass ratio up to 8
        m1, m2 = sorted(rng.uniform(5.0, 95.0, 2), reverse=True)
        if 10.0 <= m1 + m2 <= 100.0 and m1 / m2 <= 8.0:
            out.append((float(m1), float(m2)))
    return out


def bank_region(bank: str, distinct: int, templates: int, rng):
    """``(path, masses, cfg, fs, psd, copies)`` of a benchmark bank: ``distinct`` template points of
    the region, its configuration and rate, the design PSD, and how often the points are repeated to
    make ``templates``."""
    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config

    path = BANKS[bank]
    masses = _masses(bank, distinct, rng)
    cfg = load_bank_config(path)
    cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"subbands": False})})
    return path, masses, cfg, int(cfg.sample_rate), design("aLIGO", cfg.sample_rate), -(-templates // distinct)


def _gpu_median(fn, repeat: int, calls: int = 1) -> float:
    """Median wall time (s) per call of ``calls`` calls of ``fn`` in a row, the device synchronised
    after them (the host's issue time counts where the GPU waits on it)."""
    import cupy

    fn()
    fn()  # twice: a sub-band plan's CUDA graph is captured on its second call
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        cupy.cuda.Device().synchronize()
        times.append((time.perf_counter() - t) / calls)
    return float(np.median(times))


def fft_peer(n_templates: int, template_samples: int, fs: int, repeat: int, batch: int = 256) -> dict:
    """Overlap-save FFT matched filtering of ``n_templates`` templates of ``template_samples``:
    the best template-seconds per GPU-second over FFT lengths from the smallest power of two
    above twice the template to 2^22 (templates in batches of ``batch``, times summed)."""
    import cupy

    rng = np.random.default_rng(2)
    best = None
    n_fft = 1 << int(np.ceil(np.log2(2 * template_samples)))
    while n_fft <= 1 << 22:
        data = cupy.asarray(rng.standard_normal(n_fft).astype(np.float32))
        size = min(batch, n_templates)
        spectra = cupy.asarray((rng.standard_normal((size, n_fft // 2 + 1))
                                + 1j * rng.standard_normal((size, n_fft // 2 + 1))).astype(np.complex64))
        spec = cupy.zeros((size, n_fft), dtype=cupy.complex64)

        def run():
            xf = cupy.fft.rfft(data)
            for _ in range(-(-n_templates // size)):
                spec[:, : n_fft // 2 + 1] = xf[None, :] * spectra  # positive frequencies: the complex SNR
                cupy.fft.ifft(spec, axis=1)

        seconds = _gpu_median(run, repeat)
        valid = n_fft - template_samples
        rate = n_templates * valid / fs / seconds
        row = {"fft_size": n_fft, "valid_samples": valid, "median_s": seconds, "template_seconds_per_gpu_second": rate}
        if best is None or rate > best["template_seconds_per_gpu_second"]:
            best = row
        del data, spectra, spec
        cupy.get_default_memory_pool().free_all_blocks()
        n_fft <<= 1
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bank", choices=sorted(BANKS), default="bns")
    ap.add_argument("--distinct", type=int, default=128, help="templates built (repeated to --templates)")
    ap.add_argument("--templates", type=int, default=1024)
    ap.add_argument("--seconds", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    args.distinct = min(args.distinct, args.templates)
    import cupy

    from gwbatch._xp import device_name
    from gwbatch.spiir.bank import pack
    from gwbatch.spiir.filtering import filter_templates
    from gwbatch.waveforms import Template

    rng = np.random.default_rng(1)
    path, masses, cfg, fs, psd, copies = bank_region(args.bank, args.distinct, args.templates, rng)
    templates = ([Template(*m) for m in masses] * copies)[: args.templates]
    out = {"device": device_name("cupy"), "bank": args.bank, "distinct": args.distinct, "templates": args.templates,
           "seconds": args.seconds}
    x = cupy.asarray(rng.standard_normal(args.seconds * fs).astype(np.float32))
    lengths = []
    with ProcessPoolExecutor() as pool:
        for multirate in (False, True):
            t = time.perf_counter()
            built = list(pool.map(_build, [(path, m1, m2, multirate) for m1, m2 in masses]))
            build_s = time.perf_counter() - t
            bank = pack((built * copies)[: args.templates], cfg, psd, templates)
            lengths.append(int(bank.length.max()))
            med = _gpu_median(partial(filter_templates, x, bank), args.repeat)
            key = "multirate" if multirate else "single"
            out[key] = {
                "median_s": med, "template_seconds_per_gpu_second": args.templates * args.seconds / med,
                "filters_median": float(np.median(bank.n_filters[: args.distinct])),
                "update_reduction": float(bank.n_filters.sum() / bank.updates_per_sample().sum()),
                "overlap_median": float(np.median(bank.overlap[: args.distinct])),
                "overlap_single_median": float(np.median(bank.overlap_single[: args.distinct])),
                "build_s_distinct": build_s}
            print(key, json.dumps(out[key]), flush=True)
            del bank
            cupy.get_default_memory_pool().free_all_blocks()
    out["template_samples_max"] = max(lengths)
    out["fft_peer"] = fft_peer(args.templates, max(lengths), fs, args.repeat)
    print("fft peer", json.dumps(out["fft_peer"]), flush=True)
    peer = out["fft_peer"]["template_seconds_per_gpu_second"]
    out["multirate_over_single"] = out["single"]["median_s"] / out["multirate"]["median_s"]
    out["multirate_over_peer"] = out["multirate"]["template_seconds_per_gpu_second"] / peer
    print(f"multi-rate {out['multirate_over_single']:.2f}x single-rate, {out['multirate_over_peer']:.2f}x the FFT peer")
    if args.json:
        open(args.json, "w").write(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
