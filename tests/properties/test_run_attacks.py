"""Whole runs under attack (issue 22): ``gwbatch run`` on a small store that was tampered with
(the store attacks of :mod:`tests.properties.test_store_fuzz`: attribute and dtype lies, chunk
files swapped, truncated, flipped, deleted or added, metadata edited), into an output directory
that was tampered with (symbolic links, files and directories where the run's own names go, a
foreign file), with the settings pushed to their edges (``--set`` of extreme and wrong values).

Every case ends with a known exit status and one message, never a traceback; a case that exits
0 has exactly the tables of the untouched run (never a wrong or partial result), and nothing
outside the output directory changes.  Each case runs in this process (in-process cluster) in
well under 10 s; the process stays under 2 GiB.  ``MAX_EXAMPLES`` (150) cases take about 25 s on
the 2-core development machine; about a tenth complete (exit 0), the others end with each of the
refusals (``--hypothesis-show-statistics`` counts them).
"""

from __future__ import annotations

import contextlib
import io
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gwbatch.io.store import StoreWriter
from gwbatch.io.tables import read_table
from tests.properties.test_store_fuzz import attack, attacks
from workflow.cli import main

FS, SECONDS, CHUNK, IFOS = 256, 64, 16 * 256, ("H1", "L1")
MAX_EXAMPLES = 150
EXITS = {0: "complete", 2: "configuration", 3: "data", 4: "output", 5: "chunks failed"}
TABLES = ("candidates.parquet", "triggers.parquet", "background.parquet", "gates.parquet")
OWN = (".gwbatch-run", ".gwbatch-lock", "run.json", "chunks", "parts.jsonl", "manifest.json", "candidates.parquet",
       "report.html", "skymaps", ".staging")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A 64-s two-detector store with a loud pulse in both detectors, its campaign, and the tables
    of untouched runs by their ``--set`` items (filled as cases need them)."""
    root = tmp_path_factory.mktemp("run-attacks")
    store = root / "store.zarr"
    rng = np.random.default_rng(7)
    t = np.arange(SECONDS * FS) / FS
    pulse = 30 * np.exp(-0.5 * ((t - 40.0) / 0.01) ** 2) * np.sin(2 * np.pi * 90 * t)
    with StoreWriter(store, ifos=IFOS, sample_rate=FS, t0="1000000000", n_samples=SECONDS * FS,
                     chunk_samples=CHUNK) as w:
        for ifo in IFOS:
            w.write_strain(ifo, 0, rng.standard_normal(t.size) + pulse)
            w.write_dq(ifo, 0, np.full(SECONDS, 127))
        w.commit()
    config = root / "campaign.yaml"
    config.write_text(yaml.safe_dump({
        "name": "attacked", "data": {"store": str(store)},
        "search": {"kind": "pulse", "threshold": 5.0, "decimation": [8, 8]},
        "background": {"slides": 10}, "plan": {"chunk": 32.0},
        "cluster": {"kind": "in-process"}, "backend": "numpy"}))
    references = {(): untouched(store, config, root / "reference", [])}
    assert len(references[()]["candidates.parquet"]) >= 1
    return store, config, references


def untouched(store: Path, config: Path, out: Path, sets: list[str]) -> dict:
    """The tables of a run with the ``--set`` items ``sets`` on the untouched store, into a new directory."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", str(config), "--out", str(out), "--no-progress", "--set", f"data.store={store}",
                     *sets]) == 0
    return {name: read_table(out / name) for name in TABLES}


def out_attack():
    """What is in the output directory before the run: a symlink, a file or a directory under one
    of the run's own names, a foreign file, or nothing."""
    return st.one_of(
        st.none(), st.none(), st.none(),
        st.tuples(st.just("link"), st.sampled_from(OWN)),
        st.tuples(st.just("file"), st.sampled_from(OWN), st.binary(max_size=64)),
        st.tuples(st.just("dir"), st.sampled_from(OWN)),
        st.just(("foreign",)),
    )


EXTREMES = ["1e308", "-1e308", "0", "-0.0", "1e-300", "true", "false", "null", "''", ".nan", ".inf", "[]", "{}",
            "'7'", "7", "99999999999999999999999", "[1, true]"]
KEYS = ["search.threshold", "plan.chunk", "data.start", "data.duration", "conditioning.f_low",
        "conditioning.filter_duration", "background.slides", "background.slide_step", "coincidence.window",
        "data.zero_gap", "search.decimation", "conditioning.whiten", "coincidence.min_ifos", "data.ifos"]
overrides = st.one_of(st.just([]), st.just([]), st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(EXTREMES)),
                                                         min_size=1, max_size=2))


def prepare_out(out: Path, victim: Path, step) -> None:
    if step is None:
        return
    out.mkdir()
    if step[0] == "foreign":
        (out / "notes.txt").write_text("mine\n")
        return
    (out / ".gwbatch-run").write_text("{}")
    target = out / step[1]
    if target.exists():
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    if step[0] == "link":
        target.symlink_to(victim)
    elif step[0] == "file":
        target.write_bytes(step[2])
    else:
        target.mkdir()


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
@given(store_steps=st.one_of(st.just([]), st.just([]), attacks), out_step=out_attack(), sets=overrides,
       flags=st.sampled_from([[], ["--resume"], ["--overwrite"]]))
def test_an_attacked_run_ends_known_and_never_wrong(world, store_steps, out_step, sets, flags):
    store0, config, references = world
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store, out, victim = tmp / "store.zarr", tmp / "out", tmp / "victim"
        shutil.copytree(store0, store)
        victim.write_text("precious\n")
        for step in store_steps:
            with contextlib.suppress(Exception):  # an attack with nothing left to apply to
                attack(store, step)
        prepare_out(out, victim, out_step)
        argv = ["run", str(config), "--out", str(out), "--no-progress", "--set", f"data.store={store}", *flags]
        extra = [a for key, value in sets for a in ("--set", f"{key}={value}")]
        argv += extra
        err = io.StringIO()
        started = time.monotonic()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = main(argv)
        elapsed = time.monotonic() - started
        message = err.getvalue()
        assert status in EXITS, (status, message)
        event(f"exit {status} ({EXITS[status]})")
        assert elapsed < 10, (elapsed, argv)
        assert "Traceback" not in message
        if status != 0:
            assert "gwbatch: error:" in message, message
        assert victim.read_text() == "precious\n" and victim.is_file()
        if status == 0:  # the same tables as these settings on the untouched store
            if tuple(extra) not in references:
                references[tuple(extra)] = untouched(store0, config, tmp / "untouched", extra)
            for name, table in references[tuple(extra)].items():
                pd.testing.assert_frame_equal(read_table(out / name), table, check_exact=True, obj=name)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 2 * 2**20  # KiB: 2 GiB
