"""Every CUDA source compiles for sm_90 with nvcc (no GPU needed), without register spills."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gwbatch.pulse import _cuda as pulse_cuda

NVCC = shutil.which("nvcc")
SOURCES = {
    "pulse.boxcar_best": (
        pulse_cuda.SOURCE,
        [
            "template __global__ void boxcar_best<true>(const float*, const long long, const int, const int, "
            "const float*, const float*, const float*, float*, int*);",
            "template __global__ void boxcar_best<false>(const float*, const long long, const int, const int, "
            "const float*, const float*, const float*, float*, int*);",
        ],
    ),
}


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", SOURCES)
def test_compiles_for_sm90_without_spills(name, tmp_path):
    source, instantiations = SOURCES[name]
    cu = tmp_path / "k.cu"
    cu.write_text(source + "\n" + "\n".join(instantiations) + "\n")
    out = subprocess.run(
        [NVCC, "-arch=sm_90", "-cubin", "-std=c++17", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(cu)],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stderr
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", out.stderr)]
    assert spills and max(spills) == 0, out.stderr
