"""Sub-band SPIIR on the GPU against the octave ladder and the cuFFT peer, one run (issue 25).

Builds ``--distinct`` templates of a bank's region single-rate and multi-rate (as
``benchmarks/spiir_multirate.py``), repeats them to ``--templates``, and times on ``--seconds`` of
white noise, medians of ``--repeat`` after a warm-up:

- the octave ladder's ``filter_templates`` (the multi-rate bank, all resampling included);
- the sub-band path (:mod:`gwbatch.spiir.subbands`, :mod:`gwbatch.spiir._cuda_subbands`): the
  channels of the noise (``channelize``), every channel row (``chan_iir``; also on one stream, and
  with other time segmentations), the synthesis back to the top rate (``synthesize``; also with
  other segment lengths), timed apart and together;
- ``filter_templates`` of the bank built with ``spiir.subbands`` (every template in channels), the
  path a search runs;
- the cuFFT matched-filter peer of the same count and length of templates.

First it checks the kernels on ``--check-templates`` templates over ``--check-seconds``: the GPU's
output against the direct form in float64 (:func:`gwbatch.spiir.subbands.synthesis_reference` of
:func:`~gwbatch.spiir.subbands.channel_row_reference`) and the numba twin (within 1e-4 of the peak,
else nothing is timed), and against the single-rate filters (the decomposition's own error).

    python benchmarks/spiir_subband_kernels.py --bank bns --distinct 32 --templates 1024 --seconds 64
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

from benchmarks.spiir_multirate import BANKS, _build, _gpu_median, bank_region, fft_peer  # noqa: E402


def check(templates, fs: float, seconds: float, rng) -> dict:
    """The GPU's output against the float64 direct form, against the numba twin, and (the
    decomposition's own error, overlap-sized) against the single-rate filters."""
    import cupy

    from gwbatch.spiir import subbands as S
    from gwbatch.spiir.filtering import filter_bank_numba

    x = rng.standard_normal(int(seconds * fs)).astype(np.float32)
    plan = S.channel_plan(templates, fs)
    z_gpu = cupy.asnumpy(S.filter_subbands(cupy.asarray(x), plan))
    z_twin = S.filter_subbands(x, plan)
    out = {"gpu_vs_float64": 0.0, "twin_vs_float64": 0.0, "gpu_vs_twin": 0.0, "subband_vs_single_rate": 0.0,
           "correlation_with_single_rate_min": 1.0}
    for t, (a, b, d) in enumerate(templates):
        ref = S.template_reference(x, plan, t)
        single = filter_bank_numba(x, a[None, :], b[None, :], d[None, :])[0]
        inner = slice(int(d.max()) + 4096, x.size - 4096)
        peak = np.abs(ref[inner]).max()
        for key, value in (("gpu_vs_float64", np.abs(z_gpu[t, inner] - ref[inner]).max() / peak),
                           ("twin_vs_float64", np.abs(z_twin[t, inner] - ref[inner]).max() / peak),
                           ("gpu_vs_twin", np.abs(z_gpu[t, inner] - z_twin[t, inner]).max() / peak),
                           ("subband_vs_single_rate", np.abs(ref[inner] - single[inner]).max() / peak)):
            out[key] = max(out[key], float(value))
        c = abs(np.vdot(single[inner], ref[inner])) / np.linalg.norm(single[inner]) / np.linalg.norm(ref[inner])
        out["correlation_with_single_rate_min"] = min(out["correlation_with_single_rate_min"], float(c))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bank", choices=sorted(BANKS), default="bns")
    ap.add_argument("--distinct", type=int, default=32)
    ap.add_argument("--templates", type=int, default=1024)
    ap.add_argument("--seconds", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--check-templates", type=int, default=4)
    ap.add_argument("--check-seconds", type=float, default=96.0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import cupy

    from gwbatch._xp import device_name
    from gwbatch.spiir.bank import pack
    from gwbatch.spiir.filtering import filter_templates
    from gwbatch.waveforms import Template

    rng = np.random.default_rng(1)
    path, masses, cfg, fs, psd, copies = bank_region(args.bank, args.distinct, args.templates, rng)
    out = {"device": device_name("cupy"), "bank": args.bank, "distinct": args.distinct, "templates": args.templates,
           "seconds": args.seconds}
    with ProcessPoolExecutor() as pool:
        single = list(pool.map(_build, [(path, m1, m2, False) for m1, m2 in masses]))
        multi = list(pool.map(_build, [(path, m1, m2, True) for m1, m2 in masses]))
        everyone = {"subbands": True, "multirate_tolerance": 1.0}  # every template in sub-bands
        in_channels = list(pool.map(_build, [(path, m1, m2, True, everyone) for m1, m2 in masses]))
        own = {"subbands": True}  # sub-bands where the bank's own tolerance keeps the overlap
        mixed = list(pool.map(_build, [(path, m1, m2, True, own) for m1, m2 in masses]))
    filters = [(bt.a, bt.b, bt.d) for bt in single]
    out["check"] = check(filters[: args.check_templates], fs, args.check_seconds, np.random.default_rng(3))
    if max(out["check"]["gpu_vs_float64"], out["check"]["gpu_vs_twin"]) > 1e-4:
        print("the kernels disagree with the references: not timed", json.dumps(out["check"]), flush=True)
        return 1
    print("check", json.dumps(out["check"]), flush=True)

    x = cupy.asarray(rng.standard_normal(args.seconds * fs).astype(np.float32))
    templates = ([Template(*m) for m in masses] * copies)[: args.templates]
    bank = pack((multi * copies)[: args.templates], cfg, psd, templates)
    ladder = _gpu_median(partial(filter_templates, x, bank), args.repeat)
    out["ladder"] = {"median_s": ladder, "template_seconds_per_gpu_second": args.templates * args.seconds / ladder,
                     "updates_per_sample": float(np.median(bank.updates_per_sample()))}
    print("ladder", json.dumps(out["ladder"]), flush=True)
    del bank
    cupy.get_default_memory_pool().free_all_blocks()

    from gwbatch.spiir import _cuda_subbands as K
    from gwbatch.spiir import subbands as S

    t0 = time.perf_counter()
    plan = S.channel_plan((filters * copies)[: args.templates], fs)
    dp = K.device_plan(plan)
    out["plan_s"] = time.perf_counter() - t0
    xc = S.channelize(x, plan.channels)
    rows = K.channel_rows_cuda(xc, plan)
    n_low = xc.shape[1]
    parts = {"channelize": _gpu_median(partial(S.channelize, x, plan.channels), args.repeat),
             "rows": _gpu_median(partial(K.channel_rows_cuda, xc, plan), args.repeat),
             "rows_one_stream": _gpu_median(partial(K.channel_rows_cuda, xc, plan, False), args.repeat),
             "rows_unsegmented": _gpu_median(partial(K.channel_rows_cuda, xc, plan, True, None, 1), args.repeat),
             "rows_4096_warps": _gpu_median(partial(K.channel_rows_cuda, xc, plan, True, None, 4096), args.repeat),
             "rows_16384_warps": _gpu_median(partial(K.channel_rows_cuda, xc, plan, True, None, 16384), args.repeat),
             "synthesis": _gpu_median(partial(K.synthesize_cuda, rows, plan, n_low, x.size), args.repeat)}
    for segment in (128, 1024):
        parts[f"synthesis_segment_{segment}"] = _gpu_median(partial(K.synthesize_cuda, rows, plan, n_low, x.size,
                                                                    segment), args.repeat)
    layouts = {}
    for i, launch in enumerate(dp.launches):
        key = f"{launch.f},{launch.w}" + (f",ring{launch.ring.size}" if launch.ring else "")
        layouts[key] = {"rows": launch.n_slots,
                        "s": _gpu_median(partial(K.channel_rows_cuda, xc, plan, False, i), args.repeat)}
    if plan.nested is not None:  # the nested channels alone: their analysis, rows, synthesis
        sub = plan.nested
        xs = S.sub_channelize(xc, plan)
        sub_rows = K.channel_rows_cuda(xs, sub)
        parts["nested_channelize"] = _gpu_median(partial(S.sub_channelize, xc, plan), args.repeat)
        parts["nested_rows"] = _gpu_median(partial(K.channel_rows_cuda, xs, sub), args.repeat)
        parts["nested_synthesis"] = _gpu_median(partial(K.run_sub_synthesis, sub_rows, xs.shape[1], sub, dp.into,
                                                        rows, n_low), args.repeat)
        for i, launch in enumerate(K.device_plan(sub).launches):
            key = f"nested {launch.f},{launch.w}" + (f",ring{launch.ring.size}" if launch.ring else "")
            layouts[key] = {"rows": launch.n_slots,
                            "s": _gpu_median(partial(K.channel_rows_cuda, xs, sub, False, i), args.repeat)}
        del xs, sub_rows
    out["synthesis_launches"] = {str(r): int(which.size) for r, which in dp.synth_launches}
    del rows
    cupy.get_default_memory_pool().free_all_blocks()
    whole = _gpu_median(partial(S.filter_subbands, x, plan), args.repeat)
    # the same call composed by hand, and again after the first: whether the whole's time is its parts'
    composed = _gpu_median(lambda: K.synthesize_cuda(K.channel_rows_cuda(S.channelize(x, plan.channels), plan), plan,
                                                     n_low, x.size), args.repeat)
    parts["whole_composed"] = composed
    parts["whole_again"] = _gpu_median(partial(S.filter_subbands, x, plan), args.repeat)
    parts["whole_launched"] = _gpu_median(partial(K.filter_subbands_cuda, x, plan, False), args.repeat)  # no graph
    out["subbands"] = {"median_s": whole, "template_seconds_per_gpu_second": args.templates * args.seconds / whole,
                       "parts_s": parts, "layouts": layouts, "rows": len(plan.rows), "channels": len(plan.channels),
                       "virtual_rows": len(plan.virtual), "updates_per_sample": plan.updates_per_sample()}
    print("subbands", json.dumps(out["subbands"]), flush=True)
    # the same templates without nested channels, in the same run
    flat = S.channel_plan((filters * copies)[: args.templates], fs, nest=False)
    flat_s = _gpu_median(partial(S.filter_subbands, x, flat), args.repeat)
    out["subbands_without_nesting"] = {"median_s": flat_s, "updates_per_sample": flat.updates_per_sample(),
                                       "template_seconds_per_gpu_second": args.templates * args.seconds / flat_s,
                                       "synthesis_launches": {str(r): int(w.size) for r, w in
                                                              K.device_plan(flat).synth_launches}}
    print("subbands without nesting", json.dumps(out["subbands_without_nesting"]), flush=True)
    del flat
    cupy.get_default_memory_pool().free_all_blocks()
    # the bank's own path: filter_templates of a bank built with spiir.subbands (chunk origin and all)
    sub_cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update=everyone)})
    sub_bank = pack((in_channels * copies)[: args.templates], sub_cfg, psd, templates)
    bank_s = _gpu_median(partial(filter_templates, x, sub_bank), args.repeat)
    out["subband_bank"] = {"median_s": bank_s, "template_seconds_per_gpu_second": args.templates * args.seconds / bank_s,
                           "overlap_median": float(np.median(sub_bank.overlap[: args.distinct])),
                           "overlap_loss_max": float(np.max((sub_bank.overlap_single - sub_bank.overlap)[: args.distinct]))}
    print("subband bank", json.dumps(out["subband_bank"]), flush=True)
    del sub_bank
    cupy.get_default_memory_pool().free_all_blocks()
    # the bank as `spiir.subbands: true` builds it at the bank's own tolerance (sub-bands and ladder mixed)
    mixed_cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update=own)})
    mixed_bank = pack((mixed * copies)[: args.templates], mixed_cfg, psd, templates)
    mixed_s = _gpu_median(partial(filter_templates, x, mixed_bank), args.repeat)
    out["mixed_bank"] = {"median_s": mixed_s, "template_seconds_per_gpu_second": args.templates * args.seconds / mixed_s,
                         "in_subbands": int(mixed_bank.subband[: args.distinct].sum()),
                         "tolerance": float(cfg.spiir.multirate_tolerance),
                         "overlap_median": float(np.median(mixed_bank.overlap[: args.distinct])),
                         "overlap_loss_max": float(np.max((mixed_bank.overlap_single - mixed_bank.overlap)[: args.distinct]))}
    print("mixed bank", json.dumps(out["mixed_bank"]), flush=True)
    del mixed_bank
    cupy.get_default_memory_pool().free_all_blocks()
    lengths = max(int(bt.length) for bt in single)
    out["fft_peer"] = fft_peer(args.templates, lengths, fs, args.repeat)
    print("fft peer", json.dumps(out["fft_peer"]), flush=True)
    peer = out["fft_peer"]["template_seconds_per_gpu_second"]
    out["subbands_over_ladder"] = ladder / whole
    out["subbands_over_peer"] = out["subbands"]["template_seconds_per_gpu_second"] / peer
    out["ladder_over_peer"] = out["ladder"]["template_seconds_per_gpu_second"] / peer
    out["subband_bank_over_peer"] = out["subband_bank"]["template_seconds_per_gpu_second"] / peer
    out["mixed_bank_over_peer"] = out["mixed_bank"]["template_seconds_per_gpu_second"] / peer
    print(f"sub-bands {out['subbands_over_ladder']:.2f}x the ladder; sub-bands {out['subbands_over_peer']:.2f}x "
          f"(the bank's path {out['subband_bank_over_peer']:.2f}x, at its own tolerance "
          f"{out['mixed_bank_over_peer']:.2f}x), ladder {out['ladder_over_peer']:.2f}x the FFT peer",
          flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
