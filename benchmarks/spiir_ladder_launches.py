"""Where the multi-rate ladder's GPU time goes: each ``spiir_pass`` launch of
``filter_multirate_cuda`` timed with CUDA events, by rung, for a benchmark bank
(``benchmarks/spiir_multirate.py``'s templates, multi-rate, repeated to 1024), optionally for
several compile-time variants in one run (``--variant '{"STAGE": 0}'`` sets ``_cuda.DEFINES``;
``"NARROW": 0`` drops ``NARROW_BLOCKS``).

    python benchmarks/spiir_ladder_launches.py --bank bbh --distinct 64 --variant '{"STAGE": 0}' --variant '{}'
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def benchmark_bank(kind: str, distinct: int, n_templates: int = 1024):
    """``spiir_multirate.py``'s multi-rate bank of ``distinct`` templates repeated to ``n_templates``."""
    from benchmarks import spiir_multirate as sm
    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config
    from gwbatch.spiir.bank import pack
    from gwbatch.waveforms import Template

    path = sm.BANKS[kind]
    masses = sm._masses(kind, distinct, np.random.default_rng(1))
    cfg = load_bank_config(path)
    cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"subbands": False})})  # the ladder's launches
    with ProcessPoolExecutor() as pool:
        built = list(pool.map(sm._build, [(path, m1, m2, True) for m1, m2 in masses]))
    copies = -(-n_templates // distinct)
    templates = ([Template(*m) for m in masses] * copies)[:n_templates]
    return pack((built * copies)[:n_templates], cfg, design("aLIGO", cfg.sample_rate), templates)


def launches(x, bank) -> list[dict]:
    """One call of ``filter_multirate_cuda`` with each ``run_pass`` (two passes and a scan when
    segmented) between CUDA events."""
    import cupy

    from gwbatch.spiir import _cuda, _cuda_multirate

    records, run_pass = [], _cuda.run_pass

    def timed(*args, **kw):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        run_pass(*args, **kw)
        end.record()
        records.append((args[5], args[6], kw["n_slots"], kw["segments"], args[3], start, end))

    _cuda.run_pass = timed
    try:
        _cuda_multirate.filter_multirate_cuda(x, bank)
        cupy.cuda.Device().synchronize()
    finally:
        _cuda.run_pass = run_pass
    return [{"f": f, "w": w, "templates": s, "segments": g, "samples": n, "ms": cupy.cuda.get_elapsed_time(a, b)}
            for f, w, s, g, n, a, b in records]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bank", choices=("bbh", "bns"), default="bbh")
    ap.add_argument("--distinct", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--variant", action="append", default=[], help="JSON of DEFINES to set for one run")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import cupy

    from benchmarks.spiir_multirate import _gpu_median
    from gwbatch.spiir import _cuda, _cuda_multirate

    bank = benchmark_bank(args.bank, args.distinct)
    x = cupy.asarray(np.random.default_rng(0).standard_normal(args.seconds * 4096).astype(np.float32))
    out = {}
    for text in args.variant or ["{}"]:
        variant = json.loads(text)
        defines, narrow = dict(_cuda.DEFINES), dict(_cuda.NARROW_BLOCKS)
        if variant.pop("NARROW", 1) == 0:
            _cuda.NARROW_BLOCKS.clear()
        _cuda.DEFINES.update(variant)
        _cuda_multirate._PLANS.clear()
        try:
            total = _gpu_median(lambda: _cuda_multirate.filter_multirate_cuda(x, bank), args.repeat)
            rows = launches(x, bank)
        finally:
            _cuda.DEFINES.clear()
            _cuda.DEFINES.update(defines)
            _cuda.NARROW_BLOCKS.update(narrow)
        out[text] = {"total_ms": total * 1e3, "template_seconds_per_gpu_second": bank.size * args.seconds / total,
                     "launches": rows}
        print(f"{args.bank} {text}: {total * 1e3:.3f} ms, {bank.size * args.seconds / total:.3g} template-s per GPU-s",
              flush=True)
        for n in sorted({r["samples"] for r in rows}, reverse=True):
            print(f"  {n:7d} samples: " + "  ".join(
                f"({r['f']},{r['w']})x{r['templates']} s{r['segments']} {r['ms']:.3f} ms"
                for r in rows if r["samples"] == n), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
