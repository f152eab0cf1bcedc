"""Radio dedispersion throughput: brute force and the two-stage sub-band scheme, in x real time.

Problem (issue 28; the SKA-MID-like default): 4096 channels of 810/4096 MHz from 1670 MHz down,
64 us samples, Levin's DM list 0-3000 at tolerance 1.25 with decimation (5697 trials,
:func:`gwbatch.radio.dmplan.dm_plan`), simulated unit-noise spectra: ``--seconds`` of new output
per block, plus the plan's overlap (12.4 s at DM 3000) that a block repeats.  Rows:

- ``brute force``: :func:`gwbatch.radio.dedisperse.dedisperse`, the CUDA kernel on CuPy (the numba
  twin on NumPy), every trial of every decimation level;
- ``sub-band``: the same with the two-stage scheme (:func:`gwbatch.radio.dmplan.subband_plan`);
- ``plain CuPy peer`` (``--backend cupy``): brute force written plainly, a gather of every channel
  at its delay and ``cupy.sum`` over channels per trial, timed on ``--peer-trials`` trials of each
  level and scaled to the level's count;
- ``CPU twin`` (``--backend cupy``): the numba twin on this machine's cores over ``--cpu-seconds``
  of output (plus the overlap, decimated too), scaled linearly to the block;
- ``search, end to end``: what the radio search does to a block of one beam
  (:meth:`gwbatch.searches.radio.RadioSearch.process` without the read): the spectra cleaned
  (:func:`gwbatch.radio.condition.condition_spectra`, default settings), dedispersed with the
  sub-band scheme, and every trial normalised and searched with the boxcars of
  ``configs/radio-tutorial.yaml``'s search section at S/N 6 (:func:`gwbatch.radio.pulses.search_trials`);
- ``search in dm_batch batches``: the same as ``gwbatch run`` with ``subbands: auto`` does it, the
  plan in batches of ``--dm-batch`` trials, each with its own sub-band scheme, sharing the
  decimated spectra.

Each row gives seconds per block, ``x real time`` (seconds of data per second of compute) and
additions per second (``DMPlan.adds_per_second`` / ``SubbandPlan.adds_per_second`` times the
block's seconds).  Times are medians of ``--repeat`` runs after a warm-up (CUDA events on CuPy).
The single-pulse search that follows reads every series: the line "series samples" gives how many
per second of data, for comparison with benchmarks/pulse_kernel.py's samples/s.

usage: python benchmarks/radio_dedisperse.py [--backend cupy|numpy] [--quick] [--seconds 8]
           [--nchan 4096] [--fch1 1670] [--bandwidth 810] [--tsamp 64e-6] [--dm-max 3000]
           [--nsub N] [--repeat 5] [--out results.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.timing import median_seconds  # noqa: E402
from gwbatch._xp import device_name, get_xp  # noqa: E402
from gwbatch.radio.dedisperse import decimate_pairs, dedisperse  # noqa: E402
from gwbatch.radio.dmplan import dm_batches, dm_plan, subband_plan  # noqa: E402
from gwbatch.pulse.search import PulseSettings  # noqa: E402
from gwbatch.radio.condition import RadioConditioning, condition_spectra  # noqa: E402
from gwbatch.radio.pulses import DEFAULT_BOXCARS, TrialBlock, search_trials  # noqa: E402

#: The boxcars of the radio search's defaults (``RadioSearchConfig``): widths per round, S/N 6, each
#: trial's measured boxcar σ, a 2 s baseline.
BOXCARS = PulseSettings(series="amplitude", threshold=6.0, decimation=DEFAULT_BOXCARS, sigma="measured", clip=None,
                        clip_iterations=1, merge_gap=0)
BASELINE_S = 2.0


def search_blocks(blocks) -> int:
    """Every trial of dedispersed ``blocks`` normalised and searched (module docstring); the triggers."""
    found = 0
    for block in blocks:
        valid = get_xp("numpy" if isinstance(block.series, np.ndarray) else "cupy").ones(block.series.shape, bool)
        trials = TrialBlock(np.arange(block.trials.start, block.trials.stop), block.decimation, block.series, valid)
        found += len(search_trials(trials, BOXCARS, max(1, int(round(BASELINE_S / block.tsamp)))))
    return found


def end_to_end(x, freqs, tsamp: float, plan, scheme) -> int:
    """One beam's block cleaned, dedispersed in one call of the whole plan and searched (module
    docstring); the number of triggers."""
    cond = condition_spectra(x, RadioConditioning(), tsamp)
    return search_blocks(dedisperse(cond.spectra, freqs, tsamp, plan, scheme))


def end_to_end_batched(x, freqs, tsamp: float, batches, n_new: int) -> int:
    """The same as the radio search runs it: the plan in ``dm_batch`` batches
    (:func:`gwbatch.radio.dmplan.dm_batches`, each with its own sub-band scheme), the decimated
    spectra shared by the batches, every batch's outputs limited to the block's ``n_new`` samples;
    the number of triggers."""
    cond = condition_spectra(x, RadioConditioning(), tsamp)
    ladder, found = {}, 0
    for _, part, scheme in batches:
        found += search_blocks(dedisperse(cond.spectra, freqs, tsamp, part, scheme, ladder, n_new))
    return found

QUICK = {"nchan": 256, "fch1": 1500.0, "bandwidth": 256.0, "tsamp": 128e-6, "dm_max": 300.0, "seconds": 1.0,
         "cpu_seconds": 0.5, "repeat": 2}


def spectra(xp, nchan: int, ntime: int):
    """Unit-noise float32 spectra, made on the backend's device."""
    if xp is np:
        return np.random.default_rng(0).standard_normal((nchan, ntime), np.float32)
    return xp.random.default_rng(0).standard_normal((nchan, ntime), dtype=xp.float32)


def plain_peer_seconds(cp, x, plan, trials_per_level: int, repeat: int) -> float:
    """Brute force the plain way: per trial, gather every channel at its delay and sum over channels
    with ``cupy.sum``; timed on the first trials of each level and scaled to the level's count."""
    total, level_input, factor = 0.0, x, 1
    channels = cp.arange(x.shape[0])[:, None]
    for d, trials in plan.levels:
        while factor < d:
            level_input, factor = decimate_pairs(level_input), factor * 2
        n = plan.n_out(x.shape[1], d)
        times = cp.arange(n)[None, :]
        dms = plan.dms[trials][:trials_per_level]
        delays = [cp.asarray(plan.delays(dm, d))[:, None] for dm in dms]

        def run(xd=level_input, delays=delays, times=times):
            return [cp.sum(xd[channels, delay + times], axis=0) for delay in delays]

        total += median_seconds(run, repeat, cp) * (trials.stop - trials.start) / len(dms)
    return total


def row(name: str, seconds: float, span: float, adds: float, block: float) -> dict:
    """A table row for ``seconds`` of compute per ``span`` seconds of data, given per ``block`` seconds."""
    return {"row": name, "seconds": seconds * block / span, "x_real_time": span / seconds,
            "adds_per_s": adds * span / seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cupy", choices=("cupy", "numpy"))
    ap.add_argument("--quick", action="store_true", help="a small problem: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    ap.add_argument("--nchan", type=int, default=4096)
    ap.add_argument("--fch1", type=float, default=1670.0, help="highest channel, MHz")
    ap.add_argument("--bandwidth", type=float, default=810.0, help="MHz, channels below fch1")
    ap.add_argument("--tsamp", type=float, default=64e-6)
    ap.add_argument("--dm-max", type=float, default=3000.0)
    ap.add_argument("--tolerance", type=float, default=1.25)
    ap.add_argument("--pulse-width", type=float, default=40e-6)
    ap.add_argument("--seconds", type=float, default=8.0, help="new output per block, s")
    ap.add_argument("--nsub", type=int, help="sub-bands (default: the fewest additions)")
    ap.add_argument("--subband-tolerance", type=float, default=1.1)
    ap.add_argument("--peer-trials", type=int, default=4, help="trials per level the plain peer is timed on")
    ap.add_argument("--cpu-seconds", type=float, default=0.25, help="output span of the CPU twin's rows, s")
    ap.add_argument("--dm-batch", type=int, default=512, help="trials per batch of the batched row (the search's dm_batch)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sigma", default="measured", choices=("measured", "white"),
                    help="boxcar σ of the trial search (the radio search's search.sigma; default measured)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    global BOXCARS
    BOXCARS = dataclasses.replace(BOXCARS, sigma=args.sigma)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    xp = get_xp(args.backend)
    freqs = args.fch1 - args.bandwidth / args.nchan * np.arange(args.nchan)
    started = time.perf_counter()
    plan = dm_plan(freqs, args.tsamp, 0.0, args.dm_max, args.pulse_width, args.tolerance)
    scheme = subband_plan(plan, args.nsub, args.subband_tolerance)
    planning = time.perf_counter() - started
    step = 1 << int(np.log2(plan.decimation.max()))
    n_new = -(-int(round(args.seconds / args.tsamp)) // step) * step  # whole samples of every level
    span = n_new * args.tsamp
    x = spectra(xp, args.nchan, plan.overlap + n_new)

    rows = [row("brute force", median_seconds(lambda: dedisperse(x, freqs, args.tsamp, plan), args.repeat, xp),
                span, plan.adds_per_second, span),
            row("sub-band", median_seconds(lambda: dedisperse(x, freqs, args.tsamp, plan, scheme), args.repeat, xp),
                span, scheme.adds_per_second, span)]
    rows.append(row("cleaning", median_seconds(lambda: condition_spectra(x, RadioConditioning(), args.tsamp),
                                               args.repeat, xp), span, 0.0, span))
    searched = median_seconds(lambda blocks=dedisperse(x, freqs, args.tsamp, plan, scheme): search_blocks(blocks),
                              args.repeat, xp)
    rows.append(row("trial search", searched, span, 0.0, span))
    rows.append(row("search, end to end", median_seconds(lambda: end_to_end(x, freqs, args.tsamp, plan, scheme),
                                                         args.repeat, xp), span, scheme.adds_per_second, span))
    batches = dm_batches(plan, args.dm_batch, "auto")
    rows.append(row("search in dm_batch batches", median_seconds(
        lambda: end_to_end_batched(x, freqs, args.tsamp, batches, n_new), args.repeat, xp), span, scheme.adds_per_second, span))
    if args.backend == "cupy":
        rows.append(row("plain CuPy peer", plain_peer_seconds(xp, x, plan, args.peer_trials, args.repeat), span,
                        plan.adds_per_second, span))
        n_cpu = -(-int(round(args.cpu_seconds / args.tsamp)) // step) * step
        host = spectra(np, args.nchan, plan.overlap + n_cpu)
        for name, sub in (("CPU twin brute force", None), ("CPU twin sub-band", scheme)):
            seconds = median_seconds(lambda sub=sub: dedisperse(host, freqs, args.tsamp, plan, sub), 1)
            rows.append(row(name, seconds, n_cpu * args.tsamp, (plan if sub is None else sub).adds_per_second, span))
    result = {
        "device": device_name(args.backend), "backend": args.backend, "nchan": args.nchan, "fch1": args.fch1,
        "bandwidth": args.bandwidth, "tsamp": args.tsamp, "dm_max": args.dm_max, "tolerance": args.tolerance,
        "trials": plan.ndm, "levels": [[d, s.stop - s.start] for d, s in plan.levels], "overlap_s": plan.overlap * args.tsamp,
        "span_s": span, "sigma": args.sigma, "nsub": scheme.nsub, "nominal_dms": int(scheme.nominal_dms.size),
        "brute_adds_per_s_of_data": plan.adds_per_second, "subband_adds_per_s_of_data": scheme.adds_per_second,
        "series_samples_per_s_of_data": float(np.sum(1.0 / (plan.decimation * args.tsamp))),
        "planning_s": planning, "rows": rows,
    }
    print(f"device {result['device']}; {args.nchan} channels, {args.tsamp * 1e6:g} us, DM 0-{args.dm_max:g}: "
          f"{plan.ndm} trials on levels {result['levels']}, overlap {result['overlap_s']:.2f} s, block {span:.2f} s new")
    print(f"sub-band: {scheme.nsub} sub-bands, {scheme.nominal_dms.size} nominal DMs; additions per second of data: "
          f"brute {plan.adds_per_second:.3g}, sub-band {scheme.adds_per_second:.3g}; series samples per second of data "
          f"{result['series_samples_per_s_of_data']:.3g}")
    print(f"{'row':28s} {'s per block':>12s} {'x real time':>12s} {'adds/s':>10s}")
    for r in rows:
        print(f"{r['row']:28s} {r['seconds']:12.4g} {r['x_real_time']:12.4g} {r['adds_per_s']:10.3g}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
