"""Shared fixtures: backends (NumPy always, CuPy where a GPU is present) and small simulated stores."""

from __future__ import annotations

import os
from pathlib import Path

# Dask worker processes start from a forkserver that has already imported distributed, NumPy and
# pandas, instead of spawning a fresh interpreter each (what distributed's own test suite does): a
# worker then starts in a fraction of the CPU time, and the many local clusters of the suite add up
# to about a fifth of its CPU time otherwise.  The processes are as independent as spawned ones (the
# server is single-threaded and never runs a task); campaigns keep Dask's default, spawn.  The
# variable reaches the `gwbatch` commands the tests start too.  A forked worker has the server's
# environment, not the test's of the moment: tests of what a worker inherits, or of the worker
# processes themselves, take the ``spawned_workers`` fixture.
START_METHOD = "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD"
os.environ.setdefault(START_METHOD, "forkserver")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from gwbatch._xp import cupy_available

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent


def pytest_collection_modifyitems(config, items):
    """GPU tests run only where CuPy sees a device (on the GPU machine: pytest -m gpu)."""
    if cupy_available():
        return
    skip = pytest.mark.skip(reason="needs CuPy and a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def spawned_workers(monkeypatch):
    """Dask's default start method, spawn, for this test's workers and the commands it starts."""
    import dask

    monkeypatch.setenv(START_METHOD, "spawn")
    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}):
        yield


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    """The array module of each backend; tests written once run on both."""
    if request.param == "numpy":
        return np
    import cupy

    return cupy


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory) -> Path:
    """The `make demo` store (1024 s of H1, L1, V1 at 2048 Hz, 60 injections, seed 1)."""
    from gwbatch.simulate import simulate_store
    from gwbatch.simulate.injections import InjectionSpec

    path = tmp_path_factory.mktemp("stores") / "demo.zarr"
    return simulate_store(path, ifos=("H1", "L1", "V1"), duration=1024, sample_rate=2048, seed=1,
                          injections=InjectionSpec(count=60))


@pytest.fixture(scope="session")
def small_filterbank(tmp_path_factory) -> Path:
    """200 s of two beams of 8-bit radio spectra, 32 channels x 2 MHz from 1500 MHz at 1 ms: Gaussian
    noise around 128 (radio campaign tests)."""
    from gwbatch.io.store import SampleLayout, StoreWriter

    path = tmp_path_factory.mktemp("stores") / "filterbank.zarr"
    rng = np.random.default_rng(11)
    layout = SampleLayout("uint8", tuple(1500.0 - 2.0 * np.arange(32)))
    n = 200_000
    with StoreWriter(path, ifos=("B01", "B02"), sample_rate=1000.0, t0="1300000000", n_samples=n, chunk_samples=1 << 16,
                     dq_bits=("DATA",), layout=layout) as writer:
        for beam in ("B01", "B02"):
            writer.write_spectra(beam, 0, np.clip(np.rint(rng.normal(128, 12, (32, n))), 0, 255).astype(np.uint8))
            writer.write_dq(beam, 0, np.ones(200, np.uint8))
        return writer.commit()


@pytest.fixture(scope="session")
def small_store(tmp_path_factory) -> Path:
    """256 s of H1 and L1 at 1024 Hz with 8 loud injections: fast campaign tests."""
    from gwbatch.simulate import simulate_store
    from gwbatch.simulate.injections import InjectionSpec

    path = tmp_path_factory.mktemp("stores") / "small.zarr"
    spec = InjectionSpec(count=8, snr=(15.0, 30.0), f0=(100.0, 300.0))
    return simulate_store(path, ifos=("H1", "L1"), duration=256, sample_rate=1024, seed=3, injections=spec)
