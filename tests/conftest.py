"""Shared fixtures: backends (NumPy always, CuPy where a GPU is present) and small simulated stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
def small_store(tmp_path_factory) -> Path:
    """256 s of H1 and L1 at 1024 Hz with 8 loud injections: fast campaign tests."""
    from gwbatch.simulate import simulate_store
    from gwbatch.simulate.injections import InjectionSpec

    path = tmp_path_factory.mktemp("stores") / "small.zarr"
    spec = InjectionSpec(count=8, snr=(15.0, 30.0), f0=(100.0, 300.0))
    return simulate_store(path, ifos=("H1", "L1"), duration=256, sample_rate=1024, seed=3, injections=spec)
