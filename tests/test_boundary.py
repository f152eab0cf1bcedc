"""The configuration boundary (issue 22, findings 4, 9 and 12): every bad campaign file, ``--set`` value
or bank file ends with exit status 2 and a short message that names the key or the file, the bad
value and what is allowed; never a traceback, never minutes or gigabytes.

Each test reproduces a finding of the issue on the command line (``gwbatch run FILE --dry-run`` in this
process, :func:`workflow.cli.main`), or through the loader where no store is needed.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest
import yaml

from gwbatch.config import (
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    RESERVED_NAMES,
    load_bank_config,
    load_campaign,
    load_run,
    physical_bounds,
    read_yaml,
)
from gwbatch.errors import ConfigError
from gwbatch.searches import get_search
from workflow.cli import main

ROOT = Path(__file__).resolve().parents[1]
DEMO = yaml.safe_load((ROOT / "configs/demo.yaml").read_text())


def campaign_file(tmp_path: Path, store: Path | str, text: str | None = None, **changes) -> Path:
    """The demo campaign on ``store`` (with ``changes`` merged per section), or ``text`` as given."""
    path = tmp_path / "c.yaml"
    if text is None:
        raw = {**DEMO, "data": {"store": str(store)}, "plan": {"chunk": 64.0}, "output": {"dir": str(tmp_path / "out")}}
        for section, values in changes.items():
            raw[section] = {**raw.get(section, {}), **values} if isinstance(values, dict) else values
        text = yaml.safe_dump(raw)
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return path


def dry_run(capsys, config: Path, *sets: str) -> tuple[int, str]:
    """``gwbatch run CONFIG --dry-run --set ...``: the exit status and what went to stderr."""
    argv = ["run", str(config), "--dry-run"] + [a for s in sets for a in ("--set", s)]
    code = main(argv)
    return code, capsys.readouterr().err


def refused(code: int, err: str, *needles: str, lines: int = 1) -> str:
    """Exit 2, no traceback, at most ``lines`` lines (a validation error: the header and one per bad key),
    each short, holding every needle."""
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("gwbatch: error: "), err
    assert len(err.strip().splitlines()) <= lines, err
    assert all(len(line) < 500 for line in err.splitlines()), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# ------------------------------------------------------------------------------------------------
# Finding 9: settings that disable the search


def test_f_low_above_nyquist_refused_before_any_work(small_store, tmp_path, capsys):
    """At 1024 Hz, conditioning.f_low=600 ran and found 0 of 20 injections; now exit 2 naming the rate."""
    code, err = dry_run(capsys, campaign_file(tmp_path, small_store), "conditioning.f_low=600")
    refused(code, err, "conditioning.f_low (600 Hz) must be below the Nyquist frequency of the store (512 Hz)")
    code, err = dry_run(capsys, campaign_file(tmp_path, small_store), "conditioning.f_high=800")
    refused(code, err, "conditioning.f_high (800 Hz) must be at most the Nyquist frequency of the store (512 Hz)")


def test_filter_too_short_for_f_low_refused(small_store, tmp_path, capsys):
    """conditioning.filter_duration=0.001 found 4 of 20 injections; the filter must hold 4 cycles of f_low."""
    code, err = dry_run(capsys, campaign_file(tmp_path, small_store), "conditioning.filter_duration=0.001")
    refused(code, err, "conditioning: filter_duration (0.001 s) must hold at least 4 cycles of f_low (20 Hz)",
            "filter_duration >= 0.2 s", lines=2)
    # Enough cycles but fewer than 16 samples at the store's rate: refused once the rate is known.
    code, err = dry_run(capsys, campaign_file(tmp_path, small_store), "conditioning.filter_duration=0.01",
                        "conditioning.f_low=450")
    refused(code, err, "conditioning.filter_duration (0.01 s) is 10.2 samples at 1024 Hz", "at least 16 samples")


def test_every_shipped_config_passes_the_physical_bounds_at_its_rate():
    """The shipped campaigns at the rates of their stores (make demo: 2048 Hz; GWOSC: 4096 Hz; the pulsar
    series: 6103.5 Hz), and the issue's stores (1024 Hz)."""
    rates = {"demo.yaml": (1024, 2048), "week.yaml": (1024,), "month.yaml": (1024,), "one-day.yaml": (4096,),
             "gw150914.yaml": (4096,),
             "gw150914-pulse.yaml": (4096,), "gw150914-burst.yaml": (4096,), "pulsar-j1807.yaml": (1 / 163.84e-6,)}
    for name, fss in rates.items():
        loaded = load_run(ROOT / "configs" / name)
        for campaign in getattr(loaded, "members", {"": loaded}).values():
            for fs in fss:
                physical_bounds(campaign, fs)
                get_search(campaign.search.kind).check_rate(campaign.search, fs)


def test_a_boolean_is_not_a_number(small_store, tmp_path, capsys):
    """search.threshold: true was read as 1."""
    text = campaign_file(tmp_path, small_store).read_text().replace("threshold: 4.0", "threshold: true")
    code, err = dry_run(capsys, campaign_file(tmp_path, small_store, text=text))
    refused(code, err, "search.threshold: must be a number in (0, 1000], not a boolean (got True)", lines=2)
    code, err = dry_run(capsys, campaign_file(tmp_path, small_store), "search.decimation=[16, true]")
    refused(code, err, "search.decimation: must be a list of whole numbers in [1, 1024]; item 1 is a boolean", lines=2)
    code, err = dry_run(capsys, campaign_file(tmp_path, small_store), "conditioning.whiten=1")
    refused(code, err, "conditioning.whiten: must be true or false (got 1)", lines=2)


def test_text_is_not_a_number(tmp_path):
    for value, shown in (("'5'", "'5'"), ("high", "'high'"), ("!!binary NQ==", "b'5'")):
        with pytest.raises(ConfigError) as err:
            load_campaign(campaign_file(tmp_path, "x.zarr"), [f"search.threshold={value}"])
        assert f"search.threshold: must be a number in (0, 1000], not text (got {shown})" in str(err.value)


def test_duplicate_keys_refused_with_both_lines(small_store, tmp_path, capsys):
    """A duplicate key silently took the last value."""
    text = f"name: d\ndata:\n  store: {small_store}\nsearch:\n  kind: pulse\n  threshold: 5\n  threshold: 9\n"
    code, err = dry_run(capsys, campaign_file(tmp_path, small_store, text=text))
    refused(code, err, "c.yaml: key 'threshold' is given twice in one mapping (lines 6 and 7); keep one")
    with pytest.raises(ConfigError, match=r"key 'data' is given twice in one mapping \(lines 1 and 3\)"):
        load_run(campaign_file(tmp_path, small_store, text="data: {store: x}\nname: d\ndata: {store: y}\n"))
    # A merge key (<<) is overridden by an explicit key, as YAML says: not a duplicate.
    merged = "base: &b {kind: pulse, threshold: 5.0}\nname: d\ndata: {store: x}\nsearch: {<<: *b, threshold: 7.0}\n"
    raw = read_yaml(merged.encode(), "m.yaml")
    assert raw["search"] == {"kind": "pulse", "threshold": 7.0}


def test_bank_files_are_read_by_the_same_reader(tmp_path, capsys):
    bank = tmp_path / "bank.yaml"
    bank.write_text("name: b\nmass1: [1, 2]\nmass2: [1, 2]\nmass1: [3, 4]\n")
    code = main(["bank", "place", str(bank), "--out", str(tmp_path / "b.h5")])
    refused(code, capsys.readouterr().err, "bank.yaml: key 'mass1' is given twice in one mapping (lines 2 and 4)")
    bank.write_bytes("name: b\nmass1: [1, 2]\nmass2: [1, 2]\napproximant: caf\xe9\n".encode("latin-1"))
    code = main(["bank", "place", str(bank), "--out", str(tmp_path / "b.h5")])
    refused(code, capsys.readouterr().err, "bank.yaml: not UTF-8: byte 0xe9 at offset 52 (line 4)", "save the file as UTF-8")
    with pytest.raises(ConfigError, match=r"placement.max_templates: Input should be less than or equal to 1000000"):
        load_bank_config(ROOT / "configs/banks/bns.yaml", ["placement.max_templates=1e9"])
    with pytest.raises(ConfigError, match=r"f_low \(3000 Hz\) must be below the Nyquist frequency of sample_rate"):
        load_bank_config(ROOT / "configs/banks/bns.yaml", ["f_low=3000"])


def test_placement_stopped_by_its_cap_is_refused(tmp_path, capsys):
    """A stochastic placement that reaches ``placement.max_templates`` has not covered its region
    (bbh-small needs 37 templates): refused, naming the cap, and no bank file is written."""
    out = tmp_path / "b.h5"
    code = main(["bank", "place", str(ROOT / "configs/banks/bbh-small.yaml"), "--set", "placement.max_templates=10",
                 "--out", str(out)])
    refused(code, capsys.readouterr().err, "bank bbh-small: placement reached placement.max_templates = 10 before the "
            "region was covered", "raise placement.max_templates")
    assert not out.exists()


# ------------------------------------------------------------------------------------------------
# Finding 12: input that took minutes, gigabytes or gave a traceback

LAUGHS = [f"lol{i}" for i in range(10)]
BILLION_LAUGHS = "\n".join(
    ["name: lol", "data: {store: x.zarr}", "search: {kind: pulse}", "lol0: &lol0 [" + ", ".join(['"lol"'] * 10) + "]"]
    + [f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in zip(LAUGHS, LAUGHS[1:])]
    + ["description: *lol9", ""])


def test_billion_laughs_refused_in_milliseconds(tmp_path, capsys):
    """A 1.3 KB alias bomb ran for minutes and took gigabytes."""
    path = campaign_file(tmp_path, "x", text=BILLION_LAUGHS)
    assert path.stat().st_size < 1400  # under 1 KB; 10**10 strings once expanded
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    code, err = dry_run(capsys, path)
    elapsed = time.perf_counter() - started
    refused(code, err, f"c.yaml: line 7: more than {MAX_YAML_NODES} values once aliases are expanded")
    assert elapsed < 0.5, elapsed
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB: under 50 MiB more
    # the same bomb as a --set value, in flow style
    started = time.perf_counter()
    flow = "description={" + ", ".join(BILLION_LAUGHS.splitlines()[3:13]) + "}"
    code, err = dry_run(capsys, campaign_file(tmp_path, "x"), flow)
    refused(code, err, "--set description: value", "once aliases are expanded")
    assert time.perf_counter() - started < 0.5


def test_a_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match=r"line 1: alias \*a names no complete node before it"):
        read_yaml(b"a: &a [1, *a]\n", "r.yaml")


@pytest.mark.parametrize("key", ["data.start", "data.duration", "plan.chunk"])
@pytest.mark.parametrize("value", ["1e308", "-1e308", "1" + "0" * 400, "5e-324"])
def test_extreme_numbers_refused_by_key(small_store, tmp_path, capsys, key, value):
    """±1e308 in data.start, data.duration or plan.chunk gave tracebacks.  (A start of 5e-324 is a valid
    GPS time outside the store: exit 3, bad data.)"""
    code, err = dry_run(capsys, campaign_file(tmp_path, small_store), f"{key}={value}")
    if key == "data.start" and value == "5e-324":
        assert code == 3 and "Traceback" not in err and "data.start 5e-324 is outside store" in err, err
        return
    refused(code, err, key, lines=2)


def test_scientific_notation_is_a_number_as_in_yaml_1_2(tmp_path):
    """YAML 1.1 reads 1e3 (no dot) as text; the reader takes it as the number it looks like."""
    c = load_campaign(campaign_file(tmp_path, "x"), ["search.threshold=7e0", "plan.chunk=1.28E+2", "background.slides=1e2"])
    assert (c.search.threshold, c.plan.chunk, c.background.slides) == (7.0, 128.0, 100)
    assert read_yaml(b"a: [1e3, -2E-3, +5e+1, '1e3', 1e3x, e3]", "x") == {"a": [1000.0, -0.002, 50.0, "1e3", "1e3x", "e3"]}


def test_integers_of_more_than_4300_digits_are_a_yaml_error(tmp_path):
    with pytest.raises(ConfigError, match=r"c.yaml: not valid YAML at line 1, column 7: Exceeds the limit"):
        load_run(campaign_file(tmp_path, "x", text="name: " + "9" * 5000 + "\n"))


def test_deep_nesting_refused_before_it_is_built(tmp_path, capsys):
    """50,000-deep nesting gave a RecursionError traceback; the parser's events are checked first."""
    for text in ("search: " + "[" * 50_000 + "]" * 50_000 + "\n", "search: " + "{a: " * 50_000 + "1" + "}" * 50_000 + "\n"):
        started = time.perf_counter()
        code, err = dry_run(capsys, campaign_file(tmp_path, "x", text=text))
        refused(code, err, f"c.yaml: line 1: nested more than {MAX_YAML_DEPTH} levels deep")
        assert time.perf_counter() - started < 0.5


def test_latin1_file_refused_in_one_line(tmp_path, capsys):
    """A Latin-1 file gave a UnicodeDecodeError traceback."""
    text = yaml.safe_dump({**DEMO, "description": "Lévy-flight glitches"}, allow_unicode=True)
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text=text.encode("latin-1")))
    offset = text.encode("latin-1").index(b"\xe9")
    refused(code, err, f"c.yaml: not UTF-8: byte 0xe9 at offset {offset} (line ", "save the file as UTF-8")
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text=text.encode("utf-16")))
    refused(code, err, "c.yaml: the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8")
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text=text.encode("utf-16-le")))
    refused(code, err, "(UTF-16 or UTF-32 without a byte-order mark); save the file as UTF-8")
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text=yaml.safe_dump(DEMO).encode("utf-16-le")))
    refused(code, err, "line 1, column 2: control character U+0000", "looks like UTF-16")


def test_nul_and_control_characters_refused_in_one_line(tmp_path, capsys):
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text="name: t\ndata: {store: a\x00b}\n"))
    refused(code, err, "c.yaml: line 2, column 16: control character U+0000 is not allowed")
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text="name: t\x1b[31m\n"))
    refused(code, err, "control character U+001B")


def test_a_nul_or_a_100k_character_path_is_refused(tmp_path, capsys):
    """A NUL (written as a YAML escape) or a 100,000-character path gave tracebacks."""
    escaped = 'name: t\nsearch: {kind: pulse}\ndata: {store: "a\\0b.zarr"}\n'
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text=escaped))
    refused(code, err, r"data.store: a path cannot hold the control character '\x00' (at character 1)", lines=2)
    code, err = dry_run(capsys, campaign_file(tmp_path, "x"), "data.store=" + "a" * 100_000)
    refused(code, err, "data.store: a path has at most 4096 characters, this one 100000", lines=2)
    code, err = dry_run(capsys, campaign_file(tmp_path, "x"), "output.dir=runs/" + "b" * 300 + "/x")
    refused(code, err, "output.dir: each part of a path has at most 255 bytes", lines=2)
    code, err = dry_run(capsys, campaign_file(tmp_path, "x"), "data.store=" + "é" * 200)  # 400 bytes
    refused(code, err, "data.store: each part of a path has at most 255 bytes", "has 400", lines=2)


def test_a_huge_file_is_refused_unread(tmp_path, capsys):
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text="# " + "x" * (1 << 20) + "\n"))
    refused(code, err, "c.yaml: larger than 1048576 bytes")


@pytest.mark.parametrize("value,needle", [
    ("4GB_typo", "'auto', a fraction of the machine's memory in [0.01, 1] or an amount of at least 512 MiB"),
    ("1B", "an amount of at least 512 MiB"),
    ("2", "a bare number is a fraction of the machine's memory in [0.01, 1]; for an amount give a unit"),
    ("0", "a bare number is a fraction"),
    ("true", "must be 'auto', a fraction"),
])
def test_memory_limit_typos_refused(tmp_path, capsys, value, needle):
    """cluster.memory_limit=4GB_typo gave a traceback at cluster start; 1B restarted workers forever."""
    code, err = dry_run(capsys, campaign_file(tmp_path, "x"), f"cluster.memory_limit={value}")
    refused(code, err, "cluster.memory_limit: ", needle, lines=2)


def test_memory_limit_values_dask_takes():
    for value, kept in (("auto", "auto"), ("0.5", "0.5"), (0.25, "0.25"), (1, "1"), ("4GiB", "4GiB"), ("512MiB", "512MiB"),
                        ("16 GB", "16 GB"), ("8G", "8G")):
        raw = {**DEMO, "cluster": {"memory_limit": value}}
        from gwbatch.config import validate_campaign

        assert validate_campaign(raw).cluster.memory_limit == kept


@pytest.mark.parametrize("value", [":87870", "localhost:http", "[::1:8787", "host name:1", "8787", "1.2.3.999:80",
                                   "[fe80::zz]:80", "-bad-.host:80", "localhost:"])
def test_dashboard_address_typos_refused(tmp_path, capsys, value):
    code, err = dry_run(capsys, campaign_file(tmp_path, "x"), f"cluster.dashboard_address={value}")
    refused(code, err, "cluster.dashboard_address: ", lines=2)


def test_dashboard_addresses_dask_takes():
    from gwbatch.config import validate_campaign

    for value in (":8787", ":0", "127.0.0.1:8787", "localhost:65535", "[::1]:8787", "node-01.cluster.example:80", "[::]:0"):
        assert validate_campaign({**DEMO, "cluster": {"dashboard_address": value}}).cluster.dashboard_address == value


# ------------------------------------------------------------------------------------------------
# Finding 4 (the configuration part): member names that are the run directory's own names


@pytest.mark.parametrize("member", ["skymaps", "manifest.json", "Chunks", "PARTS.JSONL", "report.html"])
def test_reserved_member_names_refused(tmp_path, capsys, member):
    """A member named skymaps had its checkpoints deleted on every --resume; manifest.json crashed at the end."""
    text = yaml.safe_dump({"name": "s", "data": {"store": "x.zarr"},
                           "searches": {member: {"search": {"kind": "pulse"}}, "pulse": {"search": {"kind": "pulse"}}}})
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text=text))
    refused(code, err, f"searches.{member}: {member!r} is a name of the run directory's own",
            "reserved: " + ", ".join(RESERVED_NAMES))


def test_member_name_through_set_is_checked_too(tmp_path, capsys):
    text = yaml.safe_dump({"name": "s", "data": {"store": "x.zarr"}, "searches": {"pulse": {"search": {"kind": "pulse"}}}})
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text=text), "searches.banks.search.kind=burst")
    refused(code, err, "searches.banks: 'banks' is a name of the run directory's own")
    code, err = dry_run(capsys, campaign_file(tmp_path, "x", text=text), "searches." + "m" * 100 + ".search.kind=burst")
    refused(code, err, "at most 64 characters")


# ------------------------------------------------------------------------------------------------
# Bounds of every number


def _models(model, seen=None):
    """``model`` and every section model inside it."""
    import typing

    from pydantic import BaseModel

    seen = [] if seen is None else seen
    if model not in seen:
        seen.append(model)
        for field in model.model_fields.values():
            stack = [field.annotation]
            while stack:
                tp = stack.pop()
                if isinstance(tp, type) and issubclass(tp, BaseModel):
                    _models(tp, seen)
                stack += typing.get_args(tp)
    return seen


def test_every_number_has_finite_bounds():
    """No numeric field of the schema is open-ended: each has a lower and an upper bound (the bank's
    [min, max] ranges are checked per key by their model)."""
    from gwbatch.config import BankConfig, Campaign
    from gwbatch.config.strict import _expectation

    ranges = {"mass1", "mass2", "total_mass", "mass_ratio", "spin1z", "spin2z"}
    open_ended = [f"{model.__name__}.{name}: {expect.noun}"
                  for model in _models(Campaign) + _models(BankConfig)
                  for name, field in model.model_fields.items()
                  if (expect := _expectation(field)).kind in ("number", "numbers") and " in " not in expect.noun
                  and name not in ranges]
    assert not open_ended, open_ended
    numeric = [n for m in _models(Campaign) for n, f in m.model_fields.items() if _expectation(f).kind != "other"]
    assert len(numeric) > 50


@pytest.mark.parametrize("setting,needle", [
    ("background.slides=1e9", "background.slides: Input should be less than or equal to 100000"),
    ("search.decimation=[" + ", ".join(["16"] + ["8"] * 16) + "]", "search.decimation: List should have at most 16"),
    ("cluster.n_workers=100000", "cluster.n_workers: Input should be less than or equal to 1024"),
    ("cluster.threads_per_worker=0", "cluster.threads_per_worker: Input should be greater than or equal to 1"),
    ("data.start=-1", "data.start: Input should be greater than or equal to 0"),
    ("data.start=4294967296", "data.start: Input should be less than 4294967296"),
    ("plan.chunk=2e8", "plan.chunk: Input should be less than or equal to 126230400"),
    ("data.duration=1e9", "data.duration: Input should be less than or equal to 126230400"),
    ("search.threshold=1e6", "search.threshold: Input should be less than or equal to 1000"),
    ("conditioning.f_low=-1", "conditioning.f_low: Input should be greater than or equal to 0"),
    ("cluster.jobqueue.walltime=9999:00:00", "cluster.jobqueue.walltime: must be at most 8760:00:00"),
    ("cluster.jobqueue.memory=100MB", "cluster.jobqueue.memory: must be between 512 MiB and 1 PiB"),
])
def test_bounds_named_with_the_allowed_range(tmp_path, setting, needle):
    with pytest.raises(ConfigError) as err:
        load_campaign(campaign_file(tmp_path, "x"), [setting])
    assert needle in str(err.value), str(err.value)
    assert len(str(err.value).splitlines()) == 2


def test_the_walltime_conversion_still_works(tmp_path):
    text = campaign_file(tmp_path, "x").read_text() + "\n"
    slurm = "cluster:\n  kind: slurm\n  jobqueue: {memory: 4GiB, walltime: 04:30:00}\n"  # 04:30:00 unquoted: 16200
    text = text.replace("cluster:\n  kind: auto\n", slurm)
    assert load_campaign(campaign_file(tmp_path, "x", text=text)).cluster.jobqueue.walltime == "04:30:00"
    with pytest.raises(ConfigError, match="gives each of the 16 worker processes less than 512 MiB"):
        load_campaign(campaign_file(tmp_path, "x", text=text), ["cluster.jobqueue.processes=16", "cluster.jobqueue.cores=16"])


def test_validation_errors_are_bounded(tmp_path):
    """Thousands of bad values give at most 20 lines; a huge value is shown cut short."""
    with pytest.raises(ConfigError) as err:
        load_campaign(campaign_file(tmp_path, "x"), ["data.ifos=[" + ", ".join(["-x"] * 5000) + "]"])
    lines = str(err.value).splitlines()
    assert len(lines) == 22 and lines[-1] == "  ... and 4980 more", lines[-3:]
    with pytest.raises(ConfigError) as err:
        load_campaign(campaign_file(tmp_path, "x"), ["search.series=" + "e" * 100_000])
    assert len(str(err.value)) < 600


def test_out_path_is_checked_on_the_command_line(tmp_path, capsys):
    """A 100,000-character --out gave an OSError traceback when the run directory was prepared."""
    with pytest.raises(SystemExit) as stopped:
        main(["run", str(campaign_file(tmp_path, "x")), "--out", "o" * 100_000])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "Traceback" not in err
    assert "argument --out: a path has at most 4096 characters, this one 100000" in err


def test_cli_habits(capsys):
    """--version; the global -v after a command's name as before it; help on every argument of every
    command; gwbatch config schema prints a JSON schema of the campaign file."""
    import argparse
    import json

    import gwbatch
    from workflow.cli import build_parser, main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"gwbatch {gwbatch.__version__}"
    parser = build_parser()
    assert parser.parse_args(["info", "x", "-v"]).verbose and parser.parse_args(["-v", "info", "x"]).verbose
    assert not parser.parse_args(["info", "x"]).verbose

    def silent(p, path=()):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from silent(child, path + (name,))
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)) and not action.help:
                yield " ".join(path + (action.option_strings[0] if action.option_strings else action.dest,))

    assert list(silent(parser)) == []
    assert main(["config", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"data", "search", "background"} <= set(schema["properties"])
    assert "reference" in schema["$defs"]["BackgroundConfig"]["properties"]


def test_progress_lines_without_a_terminal(caplog):
    """Without a terminal the chunks' progress is logged as lines: done, left, rate and time to go."""
    import logging

    from workflow.execute import ProgressLines

    meter = ProgressLines(4, "chunks", every=0.0)
    with caplog.at_level(logging.INFO, logger="gwbatch"):
        meter.update()
        meter.update(3)
    lines = [r.getMessage() for r in caplog.records if r.name == "gwbatch"]
    assert lines[0].startswith("chunks: 1/4 done, 3 left, ") and "to go" in lines[0]
    assert lines[1].startswith("chunks: 4/4 done, 0 left, ") and "to go" not in lines[1]


def test_example_campaign_is_written_and_runs(tmp_path, monkeypatch, capsys):
    """gwbatch config example demo writes configs/demo.yaml (from the package's examples) into the
    working directory; with the store its header names, it runs; a second write is refused."""
    from workflow.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["config", "example"]) == 0
    assert "demo " in capsys.readouterr().out
    assert main(["config", "example", "demo"]) == 0
    assert (tmp_path / "configs" / "demo.yaml").exists()
    assert main(["config", "example", "demo"]) == 4
    assert "exist(s); use --overwrite" in capsys.readouterr().err
    assert main(["simulate", "--ifos", "H1,L1,V1", "--duration", "256", "--sample-rate", "1024", "--seed", "1",
                 "--injections", "8", "--out", "data/demo.zarr"]) == 0
    assert main(["run", "configs/demo.yaml", "--set", "cluster.kind=in-process", "--set", "background.slides=20",
                 "--no-progress"]) == 0
    assert (tmp_path / "runs" / "demo" / "manifest.json").exists()
    assert main(["config", "example", "gw150914", "--out", "more"]) == 0
    assert (tmp_path / "more" / "configs" / "banks" / "bbh.yaml").exists()


def test_example_names_are_names_and_links_are_replaced_not_followed(tmp_path, capsys):
    """``config example NAME`` takes only a listed name (``../x`` read and wrote outside ``--out``),
    replaces a link where it writes instead of writing through it, and checks every target before
    writing any (a campaign was written without its bank when ``configs/banks`` was a file)."""
    from workflow.cli import main

    outside = tmp_path / "evil.yaml"
    outside.write_text("name: evil\n")
    assert main(["config", "example", "../../evil", "--out", str(tmp_path / "a" / "b")]) == 2
    assert "no example campaign '../../evil'; the examples are: " in capsys.readouterr().err
    victim = tmp_path / "victim.yaml"
    victim.write_text("precious\n")
    (tmp_path / "c" / "configs").mkdir(parents=True)
    (tmp_path / "c" / "configs" / "demo.yaml").symlink_to(victim)
    assert main(["config", "example", "demo", "--out", str(tmp_path / "c"), "--overwrite"]) == 0
    assert victim.read_text() == "precious\n" and not (tmp_path / "c" / "configs" / "demo.yaml").is_symlink()
    (tmp_path / "d" / "configs").mkdir(parents=True)
    (tmp_path / "d" / "configs" / "banks").write_text("a file where the banks go\n")
    assert main(["config", "example", "gw150914", "--out", str(tmp_path / "d")]) == 4
    assert "a file where a directory must be" in capsys.readouterr().err
    assert not (tmp_path / "d" / "configs" / "gw150914.yaml").exists()


@pytest.mark.parametrize("seconds", ["nan", "-5", "inf", "1e9"])
def test_bank_psd_seconds_are_checked(tmp_path, capsys, seconds):
    """``gwbatch bank place|build --store S --psd-seconds X``: X is seconds in (0, 4096], as the
    campaign's ``search.psd_seconds`` (nan, -5 and inf were tracebacks)."""
    from workflow.cli import main

    assert main(["bank", "place", "configs/banks/bbh-small.yaml", "--store", str(tmp_path / "s.zarr"), "--ifo", "H1",
                 "--psd-seconds", seconds, "--out", str(tmp_path / "b.h5")]) == 2
    assert "--psd-seconds must be a number of seconds in (0, 4096]" in capsys.readouterr().err


# --- numbers on the command lines of simulate, simulate pulses, ingest, config and bank ----------------

_SIM = ["simulate", "--ifos", "H1,L1", "--duration", "8", "--sample-rate", "256", "--seed", "1"]


@pytest.mark.parametrize("option, value, message", [
    ("--duration", "nan", "--duration must be positive"),
    ("--duration", "inf", "--duration must be at most 126230400 s"),
    ("--duration", "1e308", "--duration must be at most 126230400 s"),
    ("--sample-rate", "nan", "--sample-rate must be a whole number of Hz in [1, 1000000]"),
    ("--sample-rate", "inf", "--sample-rate must be a whole number of Hz in [1, 1000000]"),
    ("--sample-rate", "1e308", "--sample-rate must be a whole number of Hz in [1, 1000000]"),
    ("--workers", "0", "--workers must be a number of processes in [1, 1024]"),
    ("--workers", "-1", "--workers must be a number of processes in [1, 1024]"),
    ("--glitch-rate", "1e308", "--glitch-rate must be a number of glitches per second in [0, 10]"),
    ("--glitch-snr", "1,inf", "--glitch-snr expects finite numbers"),
    ("--cbc-mass1", "1e308,1e308", "CBC injection mass1 range must satisfy 0 < min <= max <= 1000"),
    ("--injection-spacing", "nan", "--injection-spacing: injection spacing must be a finite number of seconds >= 0"),
    ("--injection-spacing", "-1", "--injection-spacing: injection spacing must be a finite number of seconds >= 0"),
    ("--cbc-spacing", "nan", "--cbc-spacing: CBC injection spacing must be a finite number of seconds >= 0"),
])
def test_simulate_numbers_are_refused_by_option(tmp_path, capsys, option, value, message):
    """Every value here was a traceback (NaN, infinity, 1e308: ValueError, OverflowError) or was taken
    silently (NaN and negative spacings, 0 and -1 workers); each is now exit 2 naming the option."""
    extra = {"--glitch-snr": ["--glitch-rate", "0.5"], "--cbc-mass1": ["--cbc-injections", "1"],
             "--injection-spacing": ["--injections", "1"], "--cbc-spacing": ["--cbc-injections", "1"]}.get(option, [])
    assert main([*_SIM, "--out", str(tmp_path / "s.zarr"), *extra, f"{option}={value}"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s.zarr").exists()


def test_a_gps_start_of_hundreds_of_digits_is_named_briefly(tmp_path, capsys):
    assert main([*_SIM, "--out", str(tmp_path / "s.zarr"), "--gps-start", "1e400"]) == 3
    err = capsys.readouterr().err
    assert "(401 digits) is outside the GPS times gwbatch handles" in err and len(err) < 400


@pytest.fixture(scope="module")
def tutorial_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("fil") / "tutorial.zarr"
    fil = ROOT / "tests" / "data" / "radio" / "tutorial.fil"
    assert main(["ingest", "filterbank", str(fil), "--out", str(store)]) == 0
    return store


@pytest.mark.parametrize("option, value, code, message", [
    ("--count", "-1", 2, "pulse count -1 is not allowed: need a whole number in [1, 1000000]"),
    ("--count", "0", 2, "pulse count 0 is not allowed"),
    ("--count", "10000000000", 2, "pulse count 10000000000 is not allowed"),
    ("--seed", "-1", 2, "pulse seed -1 is not allowed: need a whole number >= 0"),
    ("--snr", "1e308", 2, "pulse S/N range 1e+308,1e+308 is not allowed: need 1e-09 <= MIN <= MAX and <= 10000"),
    ("--spectral-index", "1e308", 2, "pulse spectral index range 1e+308,1e+308 is not allowed: need -20 <= MIN <= "
                                     "MAX and <= 20"),
    ("--baseline", "1e308", 2, "trial baseline 1e+308 s is not allowed: need a window in (0, 3600] s"),
    ("--width", "100,200", 3, "a pulse of width 200 s with scattering 0 s at 1000 MHz spans 849 s even undispersed"),
])
def test_simulate_pulses_numbers_are_refused(tmp_path, capsys, tutorial_store, option, value, code, message):
    """Counts of -1, 0 and 1e10 were tracebacks (negative dimensions, KeyError, MemoryError), as were
    a seed of -1 and a baseline of 1e308; an S/N of 1e308 and spectral indices of ±1e308 wrote
    infinite or zero spectra with exit 0; a pulse wider than the data was reported as a DM too high."""
    args = {"--store": str(tutorial_store), "--out": str(tmp_path / "p.zarr"), "--count": "3", "--dm": "20,40",
            "--snr": "10", "--width": "0.001,0.002", "--seed": "1", option: value}
    assert main(["simulate", "pulses", *[f"{k}={v}" for k, v in args.items()]]) == code
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p.zarr").exists()


@pytest.mark.parametrize("rate", ["0", "-5", "1000000000"])
def test_ingest_sample_rate_is_a_command_line_error(tmp_path, capsys, rate):
    """``ingest frames --sample-rate`` out of [1, 10^6] Hz is a bad command line (exit 2, was 3 as if
    the data were bad), refused before any file is read."""
    assert main(["ingest", "frames", str(tmp_path / "none-*.gwf"), "--channel", "H1:X", "--out", str(tmp_path / "f.zarr"),
                 "--workers", "1", "--sample-rate", rate]) == 2
    assert f"--sample-rate must be a whole number of Hz in [1, 1000000], got {int(rate)}" in capsys.readouterr().err


def test_config_schema_takes_no_out_and_run_takes_one_of_resume_overwrite(tmp_path, capsys):
    """``config schema --out DIR`` printed the schema and ignored DIR; ``run --dry-run --resume
    --overwrite`` was accepted although a run refuses the pair."""
    assert main(["config", "schema", "--out", str(tmp_path / "x")]) == 2
    assert "config schema takes no --out" in capsys.readouterr().err and not (tmp_path / "x").exists()
    with pytest.raises(SystemExit) as exit_:
        main(["run", "configs/demo.yaml", "--dry-run", "--resume", "--overwrite"])
    assert exit_.value.code == 2
    assert "not allowed with argument --resume" in capsys.readouterr().err


@pytest.mark.parametrize("out, message", [
    ("file/b.h5", "is a file, not a directory"),
    ("dir", "it is a directory; name a file"),
    ("ro/sub/b.h5", "is not writable"),
])
def test_a_bank_out_that_cannot_be_written_is_refused_before_the_build(tmp_path, capsys, monkeypatch, out, message):
    """``bank place|build --out`` is checked before the placement and construction (minutes for a
    production bank), not found unwritable after them (it was a traceback)."""
    import workflow.cli as cli

    (tmp_path / "file").write_text("not a directory\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "ro").mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == tmp_path / "ro" else real_access(p, mode))
    monkeypatch.setattr(cli, "_bank_psd", lambda *a: pytest.fail("the PSD and the bank were made before the check"))
    assert main(["bank", "build", "configs/banks/bbh-small.yaml", "--out", str(tmp_path / out)]) == 4
    assert message in capsys.readouterr().err


def test_a_running_baseline_of_a_few_samples_is_refused(tmp_path, capsys):
    """A running baseline of one sample is the series itself: the series less it is 0 and the run found
    nothing, exit 0 (search.baseline of the radio search, conditioning.baseline of the pulse search).
    Both must hold MIN_BASELINE_SAMPLES (32) samples, the radio search's at its coarsest trials."""
    from gwbatch.io.spectra import ingest_filterbank

    pulsar = load_campaign(ROOT / "configs/pulsar-j1807.yaml", ["conditioning.baseline=0.001"])
    with pytest.raises(ConfigError, match=r"conditioning.baseline \(0.001 s\) is 6.1 samples at 6103.52 Hz; a running "
                                          r"baseline needs at least 32 samples \(0.00524288 s\)"):
        physical_bounds(pulsar, 1 / 163.84e-6)
    physical_bounds(load_campaign(ROOT / "configs/pulsar-j1807.yaml", ["conditioning.baseline=0.0053"]), 1 / 163.84e-6)

    ingest_filterbank([ROOT / "tests/data/radio/tutorial.fil"], tmp_path / "t.zarr")
    config = ROOT / "configs/radio-tutorial.yaml"
    store = f"data.store={tmp_path / 't.zarr'}"
    code, err = dry_run(capsys, config, store, "search.baseline=0.0003")
    refused(code, err, "search.baseline (0.0003 s) is 0.937 samples of the DM plan's coarsest trials (decimated 1x)",
            "at least 32 samples: at least 0.0102 s")
    assert dry_run(capsys, config, store, "search.baseline=0.0103")[0] == 0
    # with DM trials up to 1000 the plan decimates the highest by 4: four times the floor
    code, err = dry_run(capsys, config, store, "search.dm_max=1000", "search.baseline=0.0103")
    refused(code, err, "is 8.05 samples of the DM plan's coarsest trials (decimated 4x)", "at least 0.041 s")
