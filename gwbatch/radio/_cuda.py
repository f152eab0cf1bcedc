"""Dedispersion on the GPU: the shift-and-add kernel ``shift_add`` behind brute force and both
stages of the sub-band scheme (:mod:`gwbatch.radio.dedisperse`).

What it computes, for one pass (:class:`~gwbatch.radio.dedisperse.ShiftAdd`)::

    out[o, t] = sum over q < Q (in order) of in[row_base[o] + q * row_stride, t + delays[o, q]]

for ``t < n_out``, float32 accumulated from 0, samples past the end of a row read as 0: the same
additions in the same order as the CPU twin, so the results are bitwise equal.

Layout (the direct algorithm of Barsdell et al. 2012, staged through shared memory).  A block owns
a tile of up to ``TILE`` outputs that read the same rows (consecutive trials of one level, or of one
nominal DM) and ``THREADS * SPT`` consecutive samples; each thread keeps ``TILE x SPT`` sums in
registers, its samples ``THREADS`` apart so that a warp's reads are consecutive words (no bank
conflicts).  Rows come ``CH`` at a time, in two shared-memory buffers: while the block adds one
chunk, the next chunk's windows (``THREADS * SPT`` samples plus the spread of the tile's delays on
the row) are in flight as asynchronous copies (``cp.async``, coalesced), and the delays of the chunk
after that are in registers, their least per row found by warp shuffles.  A staged sample serves
every output of the tile: global (mostly L2) traffic is ``4 / TILE`` bytes per addition,
shared-memory traffic one load per addition.  Tiles are cut on the host (:func:`tiles`) so that no
tile's spread exceeds ``MAX_SPREAD`` samples, which bounds the shared memory.  Blocks run the tiles
fastest (``blockIdx.x``) and the time tiles slowest, so the blocks in flight share one stretch of
the input and it stays in L2.

The arithmetic of the target (:mod:`gwbatch.radio.dmplan`'s plan of the SKA-MID-like band: 4096
channels of 0.198 MHz from 1670 MHz, 64 us, DM 0-3000 at tolerance 1.25, 5697 trials on 5
decimation levels): brute force adds ``sum_i nchan / (d_i tsamp) = 1.78e11`` values per second of
data (3.65e11 without decimation), so 100x real time needs 1.8e13 additions/s.  One shared-memory
load per addition caps the kernel at 32 additions per cycle per multiprocessor, 8.4e12/s on an H100
or H200 (132 SMs at 1.98 GHz): brute force cannot reach 100x real time (47x at the cap).  The
two-stage scheme with 256 sub-bands of 16 channels and nominal DMs grouped within a sub-band
tolerance of 1.1 (380 nominal DMs; :func:`~gwbatch.radio.dmplan.subband_plan`) adds 1.23e10
values per second in stage 1 and 1.11e10 in stage 2, 2.34e10 in all, 7.6x fewer (stage 1 also
computes, per block, its rows' share of the overlap: 8% more for 8 s blocks).  100x real time then
needs 2.3e12 additions/s, 28% of the cap.  A nominal DM serves about ``c nsub`` trials (15 here,
``c`` = 0.06), so ``nchan / (c nsub) + nsub`` additions per trial sample are fewest near
``nsub = sqrt(nchan / c)``: the saving grows only as ``sqrt(nchan)``.

Shape: blocks of 128 threads with 4 samples each, tiles of 16 outputs, rows staged 8 at a time, and
``__launch_bounds__(128, 5)`` (96 registers, no spill; five blocks' shared memory fit a
multiprocessor).  A sweep of about thirty shapes (threads, samples per thread, tile, rows per chunk, spread and
launch bounds) on the SKA-MID-like plan (32 s blocks, H200; benchmarks/RESULTS.md) put this one first: the whole sub-band dedispersion in 0.203 s a block
(158x real time) against 0.236 s (136x) for the previous 256 threads x 2 samples with four blocks
asked for; asking for six blocks (80 registers) spills and is slower (0.209 s).  Every shape gives
the same bits.

Measured (benchmarks/radio_dedisperse.py, one H200, 32 s blocks): brute force 1.32 s a block (4.3e12
additions/s, 24x real time), the two-stage scheme 0.203 s (158x real time, 3.7e12 additions/s), a
plain CuPy brute force (gather and ``cupy.sum`` per trial) 144 s (0.22x), the numba twin on 16 cores
0.005x (brute force) and 0.0024x (two stages).

CPU twin: :func:`gwbatch.radio.dedisperse.shift_add_numpy`.

The source is plain CUDA C++: ``nvcc -arch=sm_90 -cubin`` compiles it on machines without a GPU
(tests/test_cuda_compile.py, from :func:`compile_cases`).
"""

from __future__ import annotations

import functools

import numpy as np

#: NVRTC options of every compile (the compile test passes them to nvcc as well).
OPTIONS = ("-std=c++17",)

THREADS = 128
SPT = 4  # samples per thread, THREADS apart
TILE = 16  # outputs per block
CH = 8  # rows per staged chunk
#: Blocks a multiprocessor is asked to hold (``__launch_bounds__``): 96 registers a thread, no spill;
#: the shared memory of five such blocks is 205 KiB of the H100/H200's 228 KiB.
MIN_BLOCKS = 5
#: The widest spread of one tile's delays on a row (samples).  Shared memory, two buffers of CH rows
#: of up to THREADS * SPT + MAX_SPREAD samples, stays below the 48 KiB a launch gets without opt-in.
MAX_SPREAD = 128
#: Time tiles per launch (CUDA's limit on gridDim.y); longer outputs take several launches.
MAX_GRID_Y = 65535

SOURCE = f"""
#define THREADS {THREADS}
#define MAX_SPREAD {MAX_SPREAD}
#define MIN_BLOCKS {MIN_BLOCKS}
""" + r"""
// One 4-byte copy global -> shared that bypasses registers (cp.async, sm_80+); zeros where !valid.
__device__ __forceinline__ void copy4_async(float* dst, const float* src, const bool valid)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(d), "l"(src), "r"(valid ? 4 : 0));
}

// Thread i < CH * TILE holds the delay of output i % TILE on row q0 + i / TILE (INT_MAX past the
// tile or the rows); the others hold INT_MAX.
template <int TILE, int CH>
__device__ __forceinline__ int load_delay(const int* __restrict__ delays, const int first, const int count,
                                          const int nq, const int q0)
{
    const int k = threadIdx.x % TILE, r = threadIdx.x / TILE;
    return threadIdx.x < CH * TILE && k < count && q0 + r < nq ? __ldg(delays + (long long)(first + k) * nq + q0 + r)
                                                                : 0x7fffffff;
}

// From those delays: each row's least delay (s_low) and each output's offset from it (s_off).
template <int TILE, int CH>
__device__ __forceinline__ void store_offsets(const int delay, int* s_off, int* s_low)
{
    if (threadIdx.x / 32 < (CH * TILE + 31) / 32) {  // whole warps: the groups of TILE lanes are aligned
        int low = delay;
#pragma unroll
        for (int m = TILE / 2; m > 0; m >>= 1) low = min(low, __shfl_xor_sync(0xffffffffu, low, m));
        if (threadIdx.x < CH * TILE) {
            s_off[threadIdx.x] = delay == 0x7fffffff ? 0 : delay - low;
            if (threadIdx.x % TILE == 0) s_low[threadIdx.x / TILE] = low;
        }
    }
}

template <int TILE, int SPT, int CH>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
shift_add(const float* __restrict__ in, const long long in_len, const int row_stride,
          const int* __restrict__ tiles, const int* __restrict__ delays, const int nq, const int seg_len,
          float* __restrict__ out, const long long out_len, const long long first_time_tile)
{
    static_assert(TILE % 4 == 0 && CH % 4 == 0 && CH * TILE <= THREADS && 32 % TILE == 0, "tile shape");
    // copies per thread that stage one row of seg_len <= THREADS * SPT + MAX_SPREAD, rounded up to 4
    constexpr int STAGE = (THREADS * SPT + MAX_SPREAD + 3 + THREADS - 1) / THREADS;
    // two buffers b: rows at smem + b CH seg_len, offsets at offs + b CH TILE, least delays at lows + b CH
    extern __shared__ __align__(16) float smem[];
    int* offs = (int*)(smem + 2 * CH * seg_len);
    int* lows = offs + 2 * CH * TILE;
    const int row_base = tiles[3 * blockIdx.x], first = tiles[3 * blockIdx.x + 1];
    const int count = tiles[3 * blockIdx.x + 2];
    const long long t0 = (first_time_tile + blockIdx.y) * (THREADS * SPT);
    const int chunks = (nq + CH - 1) / CH;
    float acc[TILE][SPT];
#pragma unroll
    for (int k = 0; k < TILE; ++k)
#pragma unroll
        for (int s = 0; s < SPT; ++s) acc[k][s] = 0.0f;

    // Chunk c (rows c CH ..) goes to buffer c & 1: offsets from the delays loaded one chunk ahead,
    // then the rows' windows queued as asynchronous copies, waited for just before use.
    int ahead = load_delay<TILE, CH>(delays, first, count, nq, 0);
    auto queue = [&](const int c) {
        const int b = c & 1, q0 = c * CH, nrows = min(CH, nq - q0);
        store_offsets<TILE, CH>(ahead, offs + b * CH * TILE, lows + b * CH);
        __syncthreads();
        ahead = load_delay<TILE, CH>(delays, first, count, nq, q0 + CH);
        for (int r = 0; r < nrows; ++r) {
            const long long start = t0 + lows[b * CH + r];
            const float* src = in + (long long)(row_base + (q0 + r) * row_stride) * in_len + start;
            const long long room = min((long long)seg_len, in_len - start);
            float* dst = smem + (b * CH + r) * seg_len;
#pragma unroll
            for (int i = 0; i < STAGE; ++i) {
                const int k = threadIdx.x + i * THREADS;
                if (k < seg_len) copy4_async(dst + k, k < room ? src + k : in, k < room);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    queue(0);
    for (int c = 0; c < chunks; ++c) {
        if (c + 1 < chunks) {
            queue(c + 1);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const int nrows = min(CH, nq - c * CH);
        const float* seg = smem + (c & 1) * CH * seg_len + threadIdx.x;
        const int* s_off = offs + (c & 1) * CH * TILE;
#pragma unroll
        for (int r = 0; r < CH; ++r) {
            if (r < nrows) {
                const float* row = seg + r * seg_len;
#pragma unroll
                for (int k4 = 0; k4 < TILE; k4 += 4) {
                    if (k4 < count) {  // a tile of fewer outputs skips the empty groups of 4
                        const int4 off = *reinterpret_cast<const int4*>(s_off + r * TILE + k4);
                        const int o[4] = {off.x, off.y, off.z, off.w};
#pragma unroll
                        for (int j = 0; j < 4; ++j)
#pragma unroll
                            for (int s = 0; s < SPT; ++s) acc[k4 + j][s] += row[o[j] + s * THREADS];
                    }
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int k = 0; k < TILE; ++k) {
        if (k < count) {
            float* dst = out + (long long)(first + k) * out_len;
#pragma unroll
            for (int s = 0; s < SPT; ++s) {
                const long long t = t0 + threadIdx.x + s * THREADS;
                if (t < out_len) dst[t] = acc[k][s];
            }
        }
    }
}
"""


def kernel_name(tile: int = TILE, spt: int = SPT, ch: int = CH) -> str:
    return f"shift_add<{tile}, {spt}, {ch}>"


@functools.cache
def _kernel(tile: int, spt: int, ch: int):
    import cupy

    name = kernel_name(tile, spt, ch)
    module = cupy.RawModule(code=SOURCE, options=OPTIONS, name_expressions=(name,))
    return module.get_function(name)


def tiles(row_base: np.ndarray, delays: np.ndarray, tile: int = TILE, max_spread: int = MAX_SPREAD) -> tuple[np.ndarray, int]:
    """Cut the outputs into tiles ``(row_base, first output, count)`` (int32, ``(ntiles, 3)``) of at
    most ``tile`` consecutive outputs with one ``row_base`` whose delays spread by at most
    ``max_spread`` on every row; and the widest spread of any tile."""
    out, widest = [], 0
    first = 0
    n = delays.shape[0]
    while first < n:
        low = high = delays[first]
        count = 1
        while first + count < n and count < tile and row_base[first + count] == row_base[first]:
            d = delays[first + count]
            lo, hi = np.minimum(low, d), np.maximum(high, d)
            if int((hi - lo).max()) > max_spread:
                break
            low, high, count = lo, hi, count + 1
        widest = max(widest, int((high - low).max()))
        out.append((int(row_base[first]), first, count))
        first += count
    return np.array(out, dtype=np.int32).reshape(-1, 3), widest


@functools.lru_cache(maxsize=32)
def _device_pass(step, device: int, tile: int, max_spread: int):
    """A pass's tables on the device (made once per pass, device and tiling)."""
    import cupy

    table, widest = tiles(step.row_base, step.delays, tile, max_spread)
    return cupy.asarray(table), cupy.asarray(np.ascontiguousarray(step.delays, dtype=np.int32)), widest


def shift_add(inp, step, n_out: int):
    """One pass (``step``, a :class:`~gwbatch.radio.dedisperse.ShiftAdd`) on the GPU, queued on the
    current stream: ``(outputs, n_out)`` float32."""
    import cupy

    inp = cupy.ascontiguousarray(inp, dtype=cupy.float32)
    table, delays, widest = _device_pass(step, cupy.cuda.Device().id, TILE, MAX_SPREAD)
    nq = int(delays.shape[1])
    out = cupy.empty((delays.shape[0], n_out), dtype=cupy.float32)
    seg_len = -(-(THREADS * SPT + widest) // 4) * 4  # keeps the int4 offsets after the rows aligned
    shared = 4 * 2 * (CH * seg_len + CH * TILE + CH)
    time_tiles = -(-n_out // (THREADS * SPT))
    kernel = _kernel(TILE, SPT, CH)
    for first in range(0, time_tiles if table.shape[0] else 0, MAX_GRID_Y):
        kernel((table.shape[0], min(MAX_GRID_Y, time_tiles - first)), (THREADS,),
               (inp, cupy.int64(inp.shape[1]), cupy.int32(step.row_stride), table, delays, cupy.int32(nq),
                cupy.int32(seg_len), out, cupy.int64(n_out), cupy.int64(first)), shared_mem=shared)
    return out


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc, as :func:`_kernel` compiles it:
    ``(label, source, name expressions)``."""
    return [("shift_add", SOURCE, (kernel_name(),))]
