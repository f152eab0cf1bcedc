"""Every CUDA source compiles for sm_90 with nvcc (no GPU needed), without register spills."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gwbatch.coherent import _cuda as coherent_cuda
from gwbatch.pulse import _cuda as pulse_cuda
from gwbatch.spiir import _cuda as spiir_cuda

NVCC = shutil.which("nvcc")
SIGNATURE = ("(const float*, const long long, const long long, const unsigned char*, const long long, "
             "const float*, const float, float*, const long long, unsigned long long*, const long long, "
             "long long*, int*, float*);")
SOURCES = {
    "pulse.boxcar_round": (
        pulse_cuda.SOURCE,
        [f"template __global__ void {pulse_cuda.kernel_name(e, f, l, b)}{SIGNATURE}"
         for e in (True, False) for f, l in ((1, 32), (17, 32), (1, 16), (9, 16)) for b in pulse_cuda.BLOCKS
         if b == 1 or (e and b <= l - f + 1)],
    ),
    **{f"pulse.boxcar_group {spec}": (pulse_cuda.group_source(spec), [])
       for spec in (((1, 32, 8), (17, 32, 8), (17, 32, 8), (17, 32, 4)), ((1, 16, 4), (9, 16, 2), (9, 16, 2)),
                    ((17, 32, 1),), ((1, 32, 1), (17, 32, 1)), ((1, 64, 1), (33, 64, 1), (33, 64, 1), (33, 64, 1)))},
    "spiir.spiir_pass": (
        spiir_cuda.source(),
        [f"template __global__ void {spiir_cuda.pass_name(f)}(const float4*, const int, const long long, "
         "const long long, const long long, const float2*, const float2*, const float2*, const int*, "
         "const float2*, float2*, float2*, const int, const int);" for f in spiir_cuda.CLASSES],
    ),
    **{f"coherent.coherent_max, {profile}": (
        coherent_cuda.source(profile),
        [f"template __global__ void {coherent_cuda.kernel_name(d)}(const float2*, const long long, const int, "
         "const int*, const long long*, const long long*, const int*, const long long*, const long long*, "
         "const float4*, const long long, const int*, const int*, const int*, const int*, const int, const int, "
         "const long long, const long long, const long long, float*, int*);"
         for d in coherent_cuda.INSTANTIATIONS],
    ) for profile in coherent_cuda.PROFILES},
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
