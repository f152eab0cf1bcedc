"""The ``gwbatch`` command line (also ``python -m gwbatch``).

    gwbatch simulate --ifos H1,L1,V1 --duration 1024 --sample-rate 2048 --seed 1 --out data/sim.zarr
    gwbatch simulate pulses --store data/obs.zarr --out data/obs-pulses.zarr --count 20 --dm 100,250 --snr 10 --width 0.001,0.004 --seed 1
    gwbatch ingest gwosc H-H1_LOSC_4_V2-1126259446-32.hdf5 L-L1_LOSC_4_V2-1126259446-32.hdf5 --out data/gw150914.zarr
    gwbatch ingest sigproc pulsar.tim --out data/pulsar.zarr
    gwbatch ingest filterbank obs_*.fil --out data/obs.zarr
    gwbatch ingest frames 'frames/*.gwf' --channel H1:GDS-CALIB_STRAIN --channel L1:GDS-CALIB_STRAIN --sample-rate 4096 --out data/o3.zarr
    gwbatch info data/sim.zarr
    gwbatch seal data/sim.zarr
    gwbatch bank place configs/banks/bns.yaml --psd aLIGO --out banks/bns-templates.h5
    gwbatch bank build configs/banks/bbh.yaml --psd aLIGO --out banks/bbh.h5
    gwbatch bank summary banks/bbh.h5
    gwbatch export runs/gw150914 --format coinc [--far HZ | --top N | --gps T] --out coinc/
    gwbatch run configs/demo.yaml [--out DIR] [--set key=value ...] [--cluster KIND] [--resume | --overwrite] [--stop-after S] [--dry-run]

Errors in the input are reported in one message naming the bad value and what is allowed, with a
non-zero exit status (2 config, 3 data, 4 output, 5 a failed chunk).
"""

from __future__ import annotations

import argparse
import logging
import math
import shlex
import signal
import sys
import threading
from pathlib import Path

import gwbatch
from gwbatch.errors import ConfigError, GwbatchError

log = logging.getLogger("gwbatch")


def _pair(text: str, name: str) -> tuple[float, float]:
    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        raise ConfigError(f"{name} expects MIN,MAX numbers, got {text!r}") from None
    if not all(math.isfinite(p) for p in parts):
        raise ConfigError(f"{name} expects finite numbers, got {text!r}")
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2:
        raise ConfigError(f"{name} expects MIN,MAX, got {text!r}")
    return parts[0], parts[1]


def _floats(text: str, name: str) -> tuple[float, ...]:
    try:
        items = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise ConfigError(f"{name} expects comma-separated numbers, got {text!r}") from None
    if not items:
        raise ConfigError(f"{name} needs at least one number, got {text!r}")
    if not all(math.isfinite(v) for v in items):
        raise ConfigError(f"{name} expects finite numbers, got {text!r}")
    return items


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (``--stop-after``)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _path(text: str) -> Path:
    """A path every file system takes (``--out``): :func:`gwbatch.config.check_path`."""
    from gwbatch.config import check_path

    try:
        return Path(check_path(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _check_workers(workers: int) -> None:
    """``--workers``: processes of ``simulate`` or ``ingest frames``, as many as a cluster may have."""
    from gwbatch.config.limits import MAX_WORKERS

    if not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(f"--workers must be a number of processes in [1, {MAX_WORKERS}], got {workers}")


def _names(text: str, name: str) -> tuple[str, ...]:
    items = tuple(p.strip() for p in text.split(",") if p.strip())
    if not items:
        raise ConfigError(f"{name} needs at least one name, got {text!r}")
    return items


def cmd_simulate(args) -> int:
    from tqdm.auto import tqdm

    from gwbatch.simulate import simulate_store
    from gwbatch.simulate.injections import InjectionSpec

    _require_noise_options(args)
    _check_workers(args.workers)
    spec = None
    if args.injections:
        spec = InjectionSpec(
            count=args.injections,
            snr=_pair(args.injection_snr, "--injection-snr"),
            waveforms=_names(args.injection_waveforms, "--injection-waveforms"),
            sigma=_pair(args.injection_sigma, "--injection-sigma"),
            f0=_pair(args.injection_f0, "--injection-f0"),
            q=_pair(args.injection_q, "--injection-q"),
            f_low=args.f_low,
            min_spacing=args.injection_spacing,
        )
    cbc = None
    if args.cbc_injections:
        from gwbatch.simulate.cbc import CbcSpec

        cbc = CbcSpec(
            count=args.cbc_injections,
            mass1=_pair(args.cbc_mass1, "--cbc-mass1"),
            mass2=_pair(args.cbc_mass2, "--cbc-mass2"),
            snr=_pair(args.cbc_snr, "--cbc-snr"),
            distance=_pair(args.cbc_distance, "--cbc-distance") if args.cbc_distance else None,
            approximant=args.cbc_approximant,
            f_low=args.cbc_f_low,
            min_spacing=args.cbc_spacing,
        )
    bursts = None
    if args.burst_injections:
        from gwbatch.simulate.bursts import BurstSpec

        bursts = BurstSpec(
            count=args.burst_injections,
            hrss=_pair(args.burst_hrss, "--burst-hrss"),
            waveforms=_names(args.burst_waveforms, "--burst-waveforms"),
            f0=_floats(args.burst_f0, "--burst-f0"),
            q=_floats(args.burst_q, "--burst-q"),
            f_low=args.f_low,
            min_spacing=args.burst_spacing,
        )
    glitches = None
    if args.glitch_rate:
        from gwbatch.simulate.glitches import GlitchSpec

        glitches = GlitchSpec(rate=args.glitch_rate, snr=_pair(args.glitch_snr, "--glitch-snr"),
                              kinds=_names(args.glitch_kinds, "--glitch-kinds"), f_low=args.f_low)
    with tqdm(total=100, desc="simulate", unit="%", disable=None) as bar:
        def progress(frac):
            bar.update(round(100 * frac) - bar.n)

        path = simulate_store(
            args.out, ifos=_names(args.ifos, "--ifos"), duration=args.duration, sample_rate=args.sample_rate,
            seed=args.seed, gps_start=args.gps_start, injections=spec, cbc=cbc, bursts=bursts, glitches=glitches,
            overwrite=args.overwrite, progress=progress, workers=args.workers,
        )
    print(f"wrote {path}")
    return 0


def _require_noise_options(args) -> None:
    """``simulate`` (noise) needs the options that ``simulate pulses`` does not take."""
    missing = [flag for flag, value in (("--ifos", args.ifos), ("--duration", args.duration),
                                        ("--sample-rate", args.sample_rate), ("--seed", args.seed),
                                        ("--out", args.out)) if value is None]
    if missing:
        raise ConfigError(f"simulate needs {', '.join(missing)} (or 'gwbatch simulate pulses --store IN --out OUT ...' "
                          "to inject radio pulses into a filterbank store)")


def _boxcars(text: str) -> tuple[int, ...]:
    """``--boxcars``: widths per round (the radio search's ``decimation``), checked as the search checks them."""
    from gwbatch.pulse.plan import boxcar_plan

    try:
        widths = tuple(int(v) for v in text.split(","))
        boxcar_plan(widths)
    except ValueError as exc:
        raise ConfigError(f"--boxcars {text!r} is not a boxcar plan: {exc} (allowed: whole widths per round, "
                          "e.g. 32,16,16,16)") from None
    return widths


def cmd_simulate_pulses(args) -> int:
    from gwbatch.io.store import read_injections
    from gwbatch.radio.inject import simulate_pulses_store

    scatter = (0.0, 1000.0)
    if args.scatter is not None:
        scatter = _floats(args.scatter, "--scatter")
        if len(scatter) != 2:
            raise ConfigError(f"--scatter expects TAU,FREF (s, MHz), got {args.scatter!r}")
    path = simulate_pulses_store(
        args.store, args.out, count=args.count, dm=_pair(args.dm, "--dm"), snr=_pair(args.snr, "--snr"),
        width=_pair(args.width, "--width"), seed=args.seed, spacing=args.spacing, scatter=scatter[0],
        scatter_frequency=scatter[1], spectral_index=_pair(args.spectral_index, "--spectral-index"),
        trial_baseline=args.baseline, sigma=args.sigma, boxcars=_boxcars(args.boxcars), overwrite=args.overwrite,
    )
    table = read_injections(path)
    print(f"injected {len(table)} pulses: DM {table['dm'].min():.4g} to {table['dm'].max():.4g}, optimal S/N "
          f"{table['snr'].min():.3g} to {table['snr'].max():.3g}, FWHM {table['width'].min() * 1e3:.3g} to "
          f"{table['width'].max() * 1e3:.3g} ms (float32 spectra)")
    print(f"wrote {path}")
    return 0


def cmd_ingest(args) -> int:
    if args.format != "frames" and (args.channel or args.sample_rate is not None or args.append
                                    or args.backend != "numpy"):
        raise ConfigError(f"--channel, --sample-rate, --append and --backend are for 'ingest frames', not "
                          f"'ingest {args.format}'")
    if args.format == "frames":
        from workflow.ingest import ingest_channels

        if args.workers is not None:
            _check_workers(args.workers)
        summary = ingest_channels(
            args.files, args.channel or [], args.out, sample_rate=args.sample_rate, overwrite=args.overwrite,
            append=args.append, backend=args.backend,
            workers=args.workers, cluster_kind="in-process" if args.workers == 1 else "local",
            progress=not args.no_progress,
        )
        plan = summary.plan
        rates = ", ".join(f"{ifo} {plan.native_rates[ifo]} Hz" for ifo in plan.ifos)
        print(f"read {summary.files} files ({summary.bytes_read / 1e6:.1f} MB; {rates}) -> "
              f"{plan.sample_rate} Hz, GPS {plan.t0} + {plan.n_samples / plan.sample_rate:g} s"
              + (f"; resumed ({summary.blocks_resumed} blocks were written)" if summary.blocks_resumed else ""))
        print(f"wrote {summary.path}")
        return 0
    if args.format == "gwosc":
        from gwbatch.io.gwosc import ingest_gwosc

        path = ingest_gwosc(args.files, args.out, overwrite=args.overwrite)
    elif args.format == "filterbank":
        from gwbatch.io.spectra import ingest_filterbank
        from gwbatch.io.store import describe, read_meta

        path = ingest_filterbank(args.files, args.out, name=args.name, overwrite=args.overwrite)
        print("\n".join(describe(read_meta(path)).splitlines()[1:5]))
    else:
        from gwbatch.io.sigproc import ingest_sigproc

        if len(args.files) != 1:
            raise ConfigError(f"ingest sigproc takes one .tim file, got {len(args.files)}")
        path = ingest_sigproc(args.files[0], args.out, name=args.name, overwrite=args.overwrite)
    print(f"wrote {path}")
    return 0


def _bank_psd(args, sample_rate: float):
    """The PSD a bank is built for: a design curve, or a store's data as a campaign's default
    conditioning whitens it (:func:`gwbatch.conditioning.whiten.effective_psd`)."""
    from gwbatch.conditioning.psd import design
    from gwbatch.conditioning.whiten import effective_psd
    from gwbatch.config import ConditioningConfig, DataConfig
    from gwbatch.io.span import zero_gap_samples
    from gwbatch.io.store import read_meta
    from gwbatch.spiir.cache import store_psd

    if args.store is not None:
        if not args.ifo:
            raise ConfigError("--store needs --ifo (the detector whose data gives the PSD)")
        if not (math.isfinite(args.psd_seconds) and 0 < args.psd_seconds <= 4096):
            raise ConfigError(f"--psd-seconds must be a number of seconds in (0, 4096], got {args.psd_seconds!r}")
        meta = read_meta(args.store)
        fs = meta.sample_rate
        if abs(fs - sample_rate) > 1e-9:
            raise ConfigError(f"the bank is for {sample_rate:g} Hz but {args.store} is at {fs:g} Hz")
        cond, data = ConditioningConfig(), DataConfig(store=args.store)
        measured = store_psd(meta, args.ifo, seconds=args.psd_seconds, segment=cond.psd.segment,
                             dq_required=meta.dq_mask(data.dq_flags), zero_gap=zero_gap_samples(data.zero_gap, fs))
        return effective_psd(measured, fs, int(round(cond.filter_duration * fs)), cond.f_low, cond.f_high)
    return design(args.psd, sample_rate=sample_rate)


def cmd_bank(args) -> int:
    from gwbatch.io.banks import load_bank

    if args.action == "summary":
        for path in args.paths:
            print(load_bank(path).summary())
        return 0
    from gwbatch.config import ClusterConfig, load_bank_config
    from gwbatch.io.banks import save_bank
    from gwbatch.spiir.cache import build_bank
    from workflow.cpu_workers import cpu_workers
    from workflow.rundir import check_file_target, output_errors

    if len(args.paths) != 1 or args.out is None:
        raise ConfigError(f"bank {args.action} takes one bank YAML file and --out FILE.h5")
    cfg = load_bank_config(args.paths[0], args.set or ())
    check_file_target(args.out, overwrite=args.overwrite)  # before minutes of placement or construction
    psd = _bank_psd(args, cfg.sample_rate)
    if args.action == "place":
        from gwbatch.io.banks import read_bank_file, write_bank_file
        from gwbatch.spiir.bank import place

        templates = place(cfg, psd, read_bank_file(cfg.file) if cfg.file else None)
        with output_errors(args.out, resumable=False):
            write_bank_file(templates, args.out)
        print(f"wrote {len(templates)} templates of bank {cfg.name} to {args.out}")
        return 0
    with cpu_workers(ClusterConfig(kind=args.cluster, dashboard_address=":0"), not args.no_progress) as parallel:
        bank, _ = build_bank(cfg, psd, parallel=parallel)
    with output_errors(args.out, resumable=False):
        save_bank(bank, args.out)
    print(bank.summary())
    print(f"wrote {args.out}")
    return 0


def cmd_info(args) -> int:
    from gwbatch.io.store import describe, read_meta

    print(describe(read_meta(args.store)))
    return 0


def cmd_config(args) -> int:
    if args.action == "example":
        from workflow.examples import list_examples, write_example

        if args.name is None:
            if args.out is not None or args.overwrite:
                raise ConfigError("config example --out/--overwrite need a NAME to write (the list: "
                                  "'gwbatch config example')")
            print("\n".join(list_examples()))
            return 0
        for line in write_example(args.name, args.out or Path("."), overwrite=args.overwrite):
            print(line)
        return 0
    given = [flag for flag, value in (("NAME", args.name), ("--out", args.out), ("--overwrite", args.overwrite)) if value]
    if given:
        raise ConfigError(f"config schema takes no {', '.join(given)}: it prints the schema to standard output "
                          "(redirect it to a file); a name and --out are for 'config example'")
    import json

    from gwbatch.config import Campaign

    print(json.dumps(Campaign.model_json_schema(), indent=1))
    return 0


def cmd_vt(args) -> int:
    from workflow.sensitivity import run_vt

    thresholds = _floats(args.ifar, "--ifar")
    bad = [x for x in thresholds if not 0 <= x < float("inf")]
    if bad:
        raise ConfigError(f"--ifar thresholds must be years >= 0, got {', '.join(map(str, bad))}")
    if not 0 <= args.bootstrap <= 100_000:
        raise ConfigError(f"--bootstrap must be a number of resamplings in [0, 100000], got {args.bootstrap}")
    return run_vt(args.run, thresholds, bootstrap=args.bootstrap, out=args.out)


def cmd_export(args) -> int:
    from workflow.export import export_run

    if args.far is not None and not args.far >= 0:
        raise ConfigError(f"--far must be a rate in Hz >= 0, got {args.far}")
    if args.top is not None and args.top < 1:
        raise ConfigError(f"--top must be a number of candidates >= 1, got {args.top}")
    written = export_run(args.run, args.out, fmt=args.format, far=args.far, top=args.top, gps=args.gps,
                         overwrite=args.overwrite)
    for folder in written:
        print(f"wrote {folder}/coinc.xml and psd.xml.gz")
    if not written:
        print("no candidate was selected: nothing written")
    return 0


def cmd_seal(args) -> int:
    from gwbatch.io.store import seal

    meta = seal(args.store)
    written = int((meta.checksums != 0).sum())
    print(f"sealed {meta.path}: checksums of {written} strain chunks written "
          f"({len(meta.ifos) * meta.n_chunks - written} never written, read as gaps)")
    return 0


def _print_job_script(cluster) -> None:
    """For batch kinds, the job script dask-jobqueue would submit (with --dry-run)."""
    from gwbatch.config import JOBQUEUE_KINDS

    if cluster.kind not in JOBQUEUE_KINDS:
        return
    from workflow.cluster import job_script

    script, jq = job_script(cluster), cluster.jobqueue
    print(f"\njob script ({cluster.kind}; adaptive, {jq.minimum_jobs} to {jq.maximum_jobs} jobs of {jq.processes} "
          "worker(s); the scheduler address is this dry run's, a real run has its own):")
    print(script.rstrip())


def cmd_run(args) -> int:
    from gwbatch.config import Campaign, load_run
    from gwbatch.io.store import read_meta

    if args.cluster:  # --cluster KIND: --set cluster.kind=KIND, applied after the --set items
        args.set = [*(args.set or ()), f"cluster.kind={args.cluster}"]
    loaded = load_run(args.config, args.set or ())
    members = {"": loaded} if isinstance(loaded, Campaign) else loaded.members
    if args.dry_run:
        from workflow.plan import member_plan

        for name, campaign in members.items():
            meta = read_meta(campaign.data.store)
            print(f"== searches.{name}" if name else "", member_plan(name, campaign, meta).describe(float(meta.t0)),
                  sep="\n" if name else "")
        _print_job_script(loaded.cluster)
        return 0
    from workflow.campaign import run_campaign, run_suite
    from workflow.console import suite_lines, summary_lines

    command = "gwbatch " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    options = dict(out=args.out, resume=args.resume, overwrite=args.overwrite, command=command,
                   progress=not args.no_progress, stop_after=args.stop_after)
    if isinstance(loaded, Campaign):
        print("\n".join(summary_lines(run_campaign(loaded, **options))))
    else:
        print("\n".join(suite_lines(run_suite(loaded, **options))))
    return 0


class _Subcommands(argparse._SubParsersAction):
    """Subcommands that take the global options too (``gwbatch run X -v`` as ``gwbatch -v run X``)."""

    def add_parser(self, name, **kwargs):
        kwargs.setdefault("parents", []).append(_global_options(argparse.SUPPRESS))
        return super().add_parser(name, **kwargs)


def _global_options(default) -> argparse.ArgumentParser:
    """The options every command takes, before or after its name (after it, ``default`` is
    SUPPRESS so that an option given before the name is not reset)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=default, help="log every chunk")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gwbatch", description="Batch searches of archived gravitational-wave strain.",
                                     parents=[_global_options(False)])
    parser.add_argument("--version", action="version", version=f"gwbatch {gwbatch.__version__}")
    parser.register("action", "parsers", _Subcommands)
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="write a store of design-PSD Gaussian noise with injections")
    sim.add_argument("--ifos", help="comma-separated detectors, e.g. H1,L1,V1")
    sim.add_argument("--duration", type=float, help="seconds")
    sim.add_argument("--sample-rate", type=float, help="Hz")
    sim.add_argument("--seed", type=int, help="random seed of the noise and the injections")
    sim.add_argument("--out", type=Path, help="store path (a Zarr directory)")
    sim.add_argument("--gps-start", default="1000000000", help="GPS time of the first sample (default 1000000000)")
    sim.add_argument("--injections", type=int, default=0, help="number of short transients to inject (default 0)")
    sim.add_argument("--injection-snr", default="8,40", help="per-detector optimal SNR range, log-uniform (default 8,40)")
    sim.add_argument("--injection-waveforms", default="gaussian,sine-gaussian", help="waveforms to draw from")
    sim.add_argument("--injection-sigma", default="0.0005,0.002", help="Gaussian width range (s)")
    sim.add_argument("--injection-f0", default="200,500", help="sine-Gaussian frequency range (Hz)")
    sim.add_argument("--injection-q", default="2,5", help="sine-Gaussian Q range")
    sim.add_argument("--injection-spacing", type=float, default=2.0, help="minimum seconds between injections")
    sim.add_argument("--f-low", type=float, default=20.0,
                     help="low edge (Hz) of the injected-SNR integral (transients and bursts)")
    sim.add_argument("--cbc-injections", type=int, default=0, help="number of compact binaries to inject (default 0)")
    sim.add_argument("--cbc-mass1", default="1.2,2.0", help="component mass range (Msun), uniform (default 1.2,2.0)")
    sim.add_argument("--cbc-mass2", default="1.2,2.0", help="component mass range (Msun), uniform (default 1.2,2.0)")
    sim.add_argument("--cbc-snr", default="8,30", help="network optimal SNR range, uniform (default 8,30)")
    sim.add_argument("--cbc-distance", metavar="MIN,MAX",
                     help="luminosity distance range (Mpc): sources uniform in comoving volume (Planck18), masses "
                          "redshifted, instead of --cbc-snr (for sensitive volume-time: gwbatch vt)")
    sim.add_argument("--cbc-approximant", default="TaylorF2", help="waveform approximant (default TaylorF2)")
    sim.add_argument("--cbc-f-low", type=float, default=30.0, help="CBC waveform start and SNR integral (Hz)")
    sim.add_argument("--cbc-spacing", type=float, default=10.0, help="minimum seconds between CBC coalescences")
    sim.add_argument("--burst-injections", type=int, default=0,
                     help="number of astrophysical bursts (sine-Gaussian, white-noise burst) to inject (default 0)")
    sim.add_argument("--burst-hrss", default="5e-23,1e-21", help="burst hrss range, log-uniform (default 5e-23,1e-21)")
    sim.add_argument("--burst-waveforms", default="sine-gaussian,white-noise-burst", help="waveforms to draw from")
    sim.add_argument("--burst-f0", default="70,235,554", help="sine-Gaussian frequencies (Hz), one drawn per burst")
    sim.add_argument("--burst-q", default="3,9", help="sine-Gaussian quality factors, one drawn per burst")
    sim.add_argument("--burst-spacing", type=float, default=10.0, help="minimum seconds between bursts")
    sim.add_argument("--glitch-rate", type=float, default=0.0, metavar="PER_SECOND",
                     help="single-detector glitches per second in each detector, Poisson (default 0: none)")
    sim.add_argument("--glitch-snr", default="6,100", help="glitch detector SNR range, log-uniform (default 6,100)")
    sim.add_argument("--glitch-kinds", default="blip,sine-gaussian", help="blip and/or sine-gaussian")
    sim.add_argument("--workers", type=int, default=1,
                     help="processes that make the data in parallel (the store is the same for any number)")
    sim.add_argument("--overwrite", action="store_true", help="replace an existing store")
    sim.set_defaults(func=cmd_simulate)
    kinds = sim.add_subparsers(dest="simulation", metavar="{pulses}", required=False,
                               help="pulses: inject radio pulses into a filterbank store (gwbatch simulate pulses -h)")
    pulses = kinds.add_parser(
        "pulses", parents=[_global_options(argparse.SUPPRESS)],
        help="copy a filterbank store with dispersed, optionally scattered radio pulses added",
        description="Copy a filterbank store (gwbatch ingest filterbank) with dispersed, optionally scattered "
                    "Gaussian pulses added, each in one beam and scaled to its optimal dedispersed boxcar S/N in "
                    "the noise around it (gwbatch.radio.inject), and list them in the copy's injection table. The "
                    "copy keeps the grid, channels, DQ and provenance, but its spectra are float32: injected data "
                    "are no longer at the recorded precision.")
    pulses.add_argument("--store", type=Path, required=True, help="the filterbank store to inject into")
    pulses.add_argument("--out", type=Path, required=True, help="the new store (a Zarr directory)")
    pulses.add_argument("--count", type=int, required=True, help="number of pulses")
    pulses.add_argument("--dm", required=True, metavar="MIN,MAX",
                        help="DM range (pc cm^-3), uniform; every pulse's sweep must fit in the data")
    pulses.add_argument("--snr", required=True, metavar="S or MIN,MAX",
                        help="optimal S/N (best boxcar of the pulse dedispersed at its DM over the noise the radio "
                             "search measures), fixed or uniform in a range")
    pulses.add_argument("--width", required=True, metavar="MIN,MAX", help="Gaussian FWHM range (s), uniform")
    pulses.add_argument("--seed", type=int, required=True, help="random seed of the pulses and their beams")
    pulses.add_argument("--scatter", metavar="TAU,FREF",
                        help="scattering time TAU (s) at FREF (MHz), scaling as f^-4 (default: none)")
    pulses.add_argument("--spectral-index", default="0", metavar="A or MIN,MAX",
                        help="fluence per channel in units of its noise, as (f / band centre)^A (default 0: flat)")
    pulses.add_argument("--spacing", type=float, default=1.0,
                        help="least seconds between two pulses' arrivals at the top of the band (default 1)")
    pulses.add_argument("--baseline", type=float, default=2.0, metavar="SECONDS",
                        help="window of a dedispersed trial's running baseline when the noise is measured: set it "
                             "to the radio search's search.baseline, which the S/N depends on (default 2, the "
                             "search's default)")
    pulses.add_argument("--sigma", choices=("measured", "white"), default="measured",
                        help="boxcar σ the S/N is measured with: set it to the radio search's search.sigma (default "
                             "measured: the trial's own boxcar σ, as the search's default)")
    pulses.add_argument("--boxcars", default="32,16,16,16", metavar="N,N,...",
                        help="boxcar widths per round, the radio search's search.decimation (default 32,16,16,16)")
    pulses.add_argument("--overwrite", action="store_true", help="replace an existing store")
    pulses.set_defaults(func=cmd_simulate_pulses)

    ing = sub.add_parser("ingest", help="convert GWF frames, gwpy or GWOSC HDF5, or SIGPROC files into a store")
    ing.add_argument("format", choices=("frames", "gwosc", "sigproc", "filterbank"),
                     help="frames: GWF frame files or gwpy HDF5 files of named channels (--channel); gwosc: GWOSC/LOSC "
                          "HDF5 strain files; sigproc: one dedispersed SIGPROC .tim series; filterbank: radio "
                          "SIGPROC .fil and PSRFITS search-mode files (one or many beams, in any order)")
    ing.add_argument("files", nargs="+",
                     help="input files; for frames also glob patterns (quoted) and LAL cache files")
    ing.add_argument("--out", type=Path, required=True, help="store path (a Zarr directory)")
    ing.add_argument("--channel", action="append", metavar="IFO:NAME",
                     help="frames: a detector's channel, e.g. H1:GDS-CALIB_STRAIN (repeat, one per detector)")
    ing.add_argument("--sample-rate", type=int, metavar="HZ",
                     help="frames: the analysis rate; each detector is resampled to it with a stated anti-alias "
                          "filter (default: the channels' common rate)")
    ing.add_argument("--workers", type=int,
                     help="frames: worker processes of the local Dask cluster (default one per core; 1: no Dask)")
    ing.add_argument("--no-progress", action="store_true", help="frames: no progress bars")
    ing.add_argument("--backend", choices=("numpy", "cupy"), default="numpy",
                     help="frames: run the resampling filter on the CPU (numpy) or the GPU (cupy); default numpy")
    ing.add_argument("--name", help="series name for a SIGPROC series, or the beam of a one-beam filterbank store "
                                     "(default: from the telescope id)")
    ing.add_argument("--overwrite", action="store_true", help="replace an existing store")
    ing.add_argument("--append", action="store_true",
                     help="frames: extend the store --out (made by 'ingest frames') with later files of the same "
                          "channels; the result equals one ingest of all the files")
    ing.set_defaults(func=cmd_ingest)

    bank = sub.add_parser("bank", help="place or build a SPIIR template bank, or summarise built banks")
    bank.add_argument("action", choices=("place", "build", "summary"),
                      help="place: write the template points as a bank file; build: the SPIIR filters too")
    bank.add_argument("paths", nargs="+", type=Path, help="place/build: the bank YAML file; summary: built bank files")
    bank.add_argument("--out", type=Path, help="place/build: where to write (HDF5)")
    bank.add_argument("--psd", default="aLIGO", help="design curve for the PSD: aLIGO, AdVirgo, KAGRA (default aLIGO)")
    bank.add_argument("--store", type=Path, help="estimate the PSD from this store's data instead")
    bank.add_argument("--ifo", help="with --store: the detector")
    bank.add_argument("--psd-seconds", type=float, default=512.0, help="with --store: seconds of data for the PSD")
    bank.add_argument("--cluster", default="local", choices=("local", "in-process"), help="where templates are built")
    bank.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a bank key")
    bank.add_argument("--overwrite", action="store_true", help="replace an existing bank file")
    bank.add_argument("--no-progress", action="store_true", help="no progress bar")
    bank.set_defaults(func=cmd_bank)

    info = sub.add_parser("info", help="describe a store")
    info.add_argument("store", type=Path, help="store path (a Zarr directory)")
    info.set_defaults(func=cmd_info)

    vt = sub.add_parser("vt", help="sensitive volume-time of a finished run's searches from its population injections")
    vt.add_argument("run", type=Path, help="a run's output directory (its manifest.json and injections.parquet)")
    vt.add_argument("--ifar", default="0.1,1,10,100", metavar="YEARS,...",
                    help="IFAR thresholds in years (default 0.1,1,10,100)")
    vt.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamplings for the errors (default 1000)")
    vt.add_argument("--out", type=Path, help="JSON file to write (default RUN/vt.json)")
    vt.set_defaults(func=cmd_vt)

    export = sub.add_parser("export", help="a finished run's candidates as LIGO_LW coinc files with their PSDs "
                                           "(GraceDB's and BAYESTAR's input)")
    export.add_argument("run", type=Path, help="a run's output directory (its manifest.json, candidates.parquet, psd.h5)")
    export.add_argument("--format", default="coinc", choices=("coinc",),
                        help="coinc: OUT/<search>-<GPS>/coinc.xml (coinc tables, PSDs, SNR series) and psd.xml.gz")
    export.add_argument("--out", type=Path, required=True, help="directory to write into")
    pick = export.add_mutually_exclusive_group()
    pick.add_argument("--far", type=float, help="every candidate with a FAR at most this (Hz)")
    pick.add_argument("--top", type=int, help="the N most significant candidates (default 1)")
    pick.add_argument("--gps", type=float, help="the candidate nearest this GPS time")
    export.add_argument("--overwrite", action="store_true", help="replace coinc files that exist")
    export.set_defaults(func=cmd_export)

    seal_ = sub.add_parser("seal", help="recompute a store's chunk checksums after a deliberate edit, or upgrade "
                                        "a format-1 store")
    seal_.add_argument("store", type=Path, help="store path (a Zarr directory)")
    seal_.set_defaults(func=cmd_seal)

    config = sub.add_parser("config", help="the JSON schema of a campaign file, or an example campaign")
    config.add_argument("action", choices=("schema", "example"),
                        help="schema: print the JSON schema of a campaign of one search (a campaign of several has "
                        "searches: {NAME: {search, conditioning, coincidence, background, plan}} in place of those "
                        "sections); example: list the example campaigns, or write one")
    config.add_argument("name", nargs="?", help="example: the campaign to write (configs/NAME.yaml and the banks it "
                        "names, under --out)")
    config.add_argument("--out", type=_path, help="example: the directory to write into (default .)")
    config.add_argument("--overwrite", action="store_true", help="example: replace files that exist")
    config.set_defaults(func=cmd_config)

    run = sub.add_parser("run", help="run a campaign")
    run.add_argument("config", type=Path, help="campaign YAML file")
    run.add_argument("--out", type=_path, help="output directory (default: output.dir, else runs/<name>)")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key, e.g. search.threshold=7")
    reuse = run.add_mutually_exclusive_group()
    reuse.add_argument("--resume", action="store_true", help="reuse finished chunks in the output directory")
    reuse.add_argument("--overwrite", action="store_true", help="discard what the output directory holds")
    run.add_argument("--cluster", metavar="KIND", help="shortcut for --set cluster.kind=KIND (e.g. slurm, pbs, htcondor)")
    run.add_argument("--stop-after", type=_seconds, metavar="SECONDS",
                     help="start no chunk task after SECONDS (e.g. a batch job's wall-clock limit less the time to "
                          "write the outputs); running tasks finish and are checkpointed, nothing final is written, "
                          "exit code 6: rerun with --resume to go on")
    run.add_argument("--dry-run", action="store_true", help="print the plan (and a batch kind's job script) and exit")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.set_defaults(func=cmd_run)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch system ending the job, ``kill``), raised in the main thread like Ctrl-C's
    KeyboardInterrupt, so the run's cleanup (cluster, lock, partial stores) happens as for Ctrl-C."""

    exit_code = 143


def _terminate(signum, frame) -> None:
    raise Terminated()


def _not_interrupt_race(record: logging.LogRecord) -> bool:
    """Logging filter: False for the traceback distributed's ``sync`` leaves when an interrupt lands before its
    coroutine has started: the cancel callback then reads an unassigned ``future`` (NameError, in
    ``distributed/utils.py``).  Nothing is lost (the run is already ending), so the record is dropped."""
    if not record.exc_info or not isinstance(record.exc_info[1], NameError):
        return True
    frame = record.exc_info[2]
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    code = frame.tb_frame.f_code if frame is not None else None
    return code is None or code.co_name != "cancel" or not Path(code.co_filename).match("distributed/utils.py")


class _LogLines(logging.Formatter):
    """``gwbatch: message`` for gwbatch's own records; ``logger level: message`` for the others'
    (Dask's, tornado's), so that they are not taken for gwbatch's; each line timestamped when
    ``stamp`` (stderr is not a terminal: batch logs)."""

    def __init__(self, stamp: bool):
        super().__init__("%(message)s")
        self.stamp = stamp

    def format(self, record: logging.LogRecord) -> str:
        ours = record.name == "gwbatch" or record.name.startswith("gwbatch.")
        who = "gwbatch" if ours else f"{record.name} {record.levelname.lower()}"
        when = f"{self.formatTime(record, '%Y-%m-%d %H:%M:%S')} " if self.stamp else ""
        return f"{when}{who}: {super().format(record)}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from workflow.execute import is_terminal

    handler = logging.StreamHandler()
    handler.setFormatter(_LogLines(stamp=not is_terminal(sys.stderr)))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    log.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    logging.getLogger("tornado.application").addFilter(_not_interrupt_race)
    previous = signal.signal(signal.SIGTERM, _terminate) if threading.current_thread() is threading.main_thread() else None
    try:
        return args.func(args)
    except GwbatchError as exc:
        print(f"gwbatch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        what = "terminated" if isinstance(exc, Terminated) else "interrupted"
        left = ("finished chunks are checkpointed (rerun with --resume)" if args.command == "run"
                else "the blocks written so far are kept: the same command resumes" if getattr(args, "format", "") == "frames"
                else "nothing partial is left")
        print(f"gwbatch: {what}; {left}", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
