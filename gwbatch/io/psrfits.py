"""Read PSRFITS search-mode files into a :class:`~gwbatch.io.filterbank.Filterbank` (issue 28).

Format: the PSRFITS definition (ATNF, https://www.atnf.csiro.au/research/pulsar/psrfits_definition/
Psrfits.html; Hotan, van Straten & Manchester 2004, PASA 21, 302), with polarisation products as in
van Straten et al. 2010 (PASA 27, 104).  The primary header has ``OBS_MODE`` ``SEARCH`` (or
``SRCH``) and the start ``STT_IMJD`` (UTC day) + ``STT_SMJD`` (s) + ``STT_OFFS`` (s).  The
``SUBINT`` table has one row per ``NSBLK`` spectra, ``TBIN`` seconds apart; a row's ``DATA`` holds
them time first, then ``NPOL`` polarisations, then ``NCHAN`` channels, ``NBITS`` unsigned bits
each (8-bit ``SIGNINT`` 1 data are signed).  Samples of 1, 2 and 4 bits are packed with the first
in the most significant bits, PSRFITS's order and the reverse of SIGPROC's: in the Parkes UWL
file of the test data the mean correlation of neighbouring channels that straddle a byte is 0.032
in this order and 0.014 in the other (0.036 for neighbours within a byte).

What is trusted: ``NBITS``, ``NPOL``, ``NCHAN`` and ``NSBLK`` define the layout, and the ``DATA``
column must hold exactly ``NSBLK * NPOL * NCHAN * NBITS / 8`` bytes a row; ``DAT_FREQ`` and
``DAT_WTS`` must hold ``NCHAN`` values, ``DAT_SCL`` and ``DAT_OFFS`` ``NCHAN * NPOL``.  ``TDIM``
is not used (the template's ``(NCHAN, NPOL, NSBLK * NBITS / 8)`` is a byte count, and writers
differ).  Every disagreement is a :class:`~gwbatch.errors.DataError`, never a guess.

What is returned (SIGPROC header keys, so that downstream code cannot tell the formats apart):

- ``fch1``/``foff`` from ``DAT_FREQ`` (channel centres, MHz), which must be the same on every row
  and evenly spaced by ``CHAN_BW`` (sign included); ``tsamp`` is ``TBIN``; ``nifs`` is 1.
- ``tstart`` (UTC MJD) is the start plus the first row's offset: its ``OFFS_SUB`` (the row's centre)
  less half a row, as PRESTO does, rows being contiguous (``OFFS_SUB`` a row apart); without an
  ``OFFS_SUB`` column, ``NSUBOFFS`` rows.  ``NSTOT``, when below the rows' total, drops the padding.
- Total intensity: AA + BB for ``POL_TYPE`` ``AABB`` and ``AABBCRCI``, I for ``IQUV``, the one
  product when ``NPOL`` is 1.  Cross products and Stokes Q, U, V are dropped.
- Values: a sample's value is ``((DATA - ZERO_OFF) * DAT_SCL + DAT_OFFS) * DAT_WTS``.  When
  ``DAT_SCL``, ``DAT_OFFS`` and ``DAT_WTS`` each hold one value for every row, polarisation and
  channel, that is one affine map, which no search that normalises its channels sees: the recorded
  integers are kept (uint8 for 1-8 bits, uint16 for 16, float32 for 32; AA + BB widens 8-bit to
  uint16 and 16-bit to float32), ``nbits`` telling the width.  Otherwise, or for signed data, the
  values are float32 (``nbits`` 32): per-row scales make the raw integers of two rows
  incomparable.
- Extra keys ``psrfits_telescope``, ``psrfits_pol_type``, ``psrfits_npol``, ``psrfits_nbits`` (as
  recorded) and ``psrfits_scaled`` (whether the float32 values above were computed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
from astropy.io import fits

from gwbatch.errors import DataError
from gwbatch.io.filterbank import Filterbank
from gwbatch.io.sigproc import TELESCOPES, tstart_gps
from gwbatch.io.store import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE

SEARCH_MODES = ("SEARCH", "SRCH")
NBITS = (1, 2, 4, 8, 16, 32)
#: POL_TYPE values gwbatch makes total intensity from, per NPOL (NPOL 1: any single product).
POL_TYPES = {2: ("AABB",), 4: ("AABBCRCI", "IQUV")}
_SUMMED = ("AABB", "AABBCRCI")
#: The type AA + BB of recorded samples of NBITS bits is summed in, exactly.
_SUM_DTYPES = {1: np.uint8, 2: np.uint8, 4: np.uint8, 8: np.uint16, 16: np.float32, 32: np.float32}
_COLUMNS = ("DATA", "DAT_FREQ", "DAT_WTS", "DAT_OFFS", "DAT_SCL")
_TELESCOPE_IDS = {name.upper(): number for number, name in TELESCOPES.items()}
_SEXAGESIMAL = re.compile(r"\s*([+-]?)(\d+):(\d+):(\d+(?:\.\d*)?)\s*\Z")


def unpack_msb_first(raw: np.ndarray, nbits: int) -> np.ndarray:
    """Bytes of ``nbits``-bit samples (1, 2 or 4) to one uint8 per sample, the first sample in the
    most significant bits of each byte (PSRFITS's order)."""
    per_byte = 8 // nbits
    shifts = ((per_byte - 1 - np.arange(per_byte, dtype=np.uint8)) * nbits)[None, :]
    mask = np.uint8((1 << nbits) - 1)
    return ((raw.reshape(-1)[:, None] >> shifts) & mask).reshape(-1)


def _key(header: fits.Header, key: str, path: Path, hdu: str, kind=(int, float)):
    """``header[key]``, refused when absent, a ``*`` placeholder or not of ``kind``."""
    value = header.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise DataError(f"{path}: PSRFITS {hdu} header key {key!r} is {value!r}; expected "
                        f"{'a string' if kind is str else 'a number'}")
    return value


def _optional_number(header: fits.Header, key: str, path: Path, default: float) -> float:
    """A number that PSRFITS lets be absent or ``*`` (then ``default``)."""
    if header.get(key, "*") == "*":
        return default
    return _key(header, key, path, "SUBINT")


def _layout(sub: fits.Header, path: Path) -> dict:
    """The SUBINT keys that define ``DATA``, each checked."""
    layout = {key: _key(sub, key, path, "SUBINT", int) for key in ("NBITS", "NPOL", "NCHAN", "NSBLK")}
    if layout["NBITS"] not in NBITS:
        raise DataError(f"{path}: NBITS={layout['NBITS']} is not supported; expected one of {list(NBITS)}")
    if layout["NPOL"] not in (1, 2, 4):
        raise DataError(f"{path}: NPOL={layout['NPOL']}; expected 1, 2 or 4")
    for key in ("NCHAN", "NSBLK"):
        if layout[key] < 1:
            raise DataError(f"{path}: {key}={layout[key]}; expected a positive count")
    layout["POL_TYPE"] = _key(sub, "POL_TYPE", path, "SUBINT", str).strip().upper()
    allowed = POL_TYPES.get(layout["NPOL"])
    if allowed and layout["POL_TYPE"] not in allowed:
        raise DataError(f"{path}: POL_TYPE={layout['POL_TYPE']!r} with NPOL={layout['NPOL']}; "
                        f"expected one of {list(allowed)}")
    layout["SIGNINT"] = int(_optional_number(sub, "SIGNINT", path, 0))
    if layout["SIGNINT"] not in (0, 1) or (layout["SIGNINT"] and layout["NBITS"] != 8):
        raise DataError(f"{path}: SIGNINT={layout['SIGNINT']} with NBITS={layout['NBITS']}; signed "
                        f"samples (SIGNINT 1) are read for NBITS 8 only")
    tbin = _key(sub, "TBIN", path, "SUBINT")
    lo, hi = 1.0 / MAX_SAMPLE_RATE, 1.0 / MIN_SAMPLE_RATE
    if not (np.isfinite(tbin) and lo <= tbin <= hi):
        raise DataError(f"{path}: TBIN={tbin!r} s; expected a finite sample interval in [{lo:g}, {hi:g}] s")
    layout["TBIN"] = float(tbin)
    layout["CHAN_BW"] = float(_key(sub, "CHAN_BW", path, "SUBINT"))
    if not (np.isfinite(layout["CHAN_BW"]) and layout["CHAN_BW"] != 0):
        raise DataError(f"{path}: CHAN_BW={layout['CHAN_BW']} MHz; a channel width must be finite and non-zero")
    return layout


def _check_columns(table: fits.BinTableHDU, layout: dict, path: Path) -> None:
    """Each column present and as wide as the layout says."""
    missing = [name for name in _COLUMNS if name not in table.columns.names]
    if missing:
        raise DataError(f"{path}: the SUBINT table has no column {', '.join(missing)} "
                        f"(it holds: {', '.join(table.columns.names)})")
    data = table.columns["DATA"]
    if data.bzero not in (None, 0) or data.bscale not in (None, 1):
        raise DataError(f"{path}: the DATA column has TZERO={data.bzero}, TSCAL={data.bscale}; PSRFITS samples "
                        f"are unscaled (NBITS, SIGNINT and ZERO_OFF define them)")
    nchan, npol = layout["NCHAN"], layout["NPOL"]
    bits = layout["NSBLK"] * npol * nchan * layout["NBITS"]
    width = table.data.dtype["DATA"].itemsize
    if bits % 8 or width != bits // 8:
        raise DataError(f"{path}: the DATA column holds {width} bytes a row, but NSBLK*NPOL*NCHAN*NBITS/8 = "
                        f"{layout['NSBLK']}*{npol}*{nchan}*{layout['NBITS']}/8 = {bits / 8:g}")
    for name, count in (("DAT_FREQ", nchan), ("DAT_WTS", nchan), ("DAT_OFFS", nchan * npol), ("DAT_SCL", nchan * npol)):
        size = int(np.prod(table.data.dtype[name].shape))
        if size != count:
            raise DataError(f"{path}: column {name} holds {size} values a row; expected {count} "
                            f"(NCHAN={nchan}, NPOL={npol})")


def _channel_grid(dat_freq: np.ndarray, chan_bw: float, path: Path) -> tuple[float, float]:
    """``fch1, foff`` (MHz) of ``DAT_FREQ`` rows that agree and step by ``CHAN_BW``."""
    first = dat_freq[0]
    tolerance = 1e-3 * abs(chan_bw)
    if not np.all(np.isfinite(dat_freq)) or np.any(dat_freq <= 0):
        raise DataError(f"{path}: DAT_FREQ holds {dat_freq[~(dat_freq > 0)][:3].tolist()} MHz; every channel "
                        f"centre must be a finite frequency above 0 MHz")
    changed = np.flatnonzero(np.any(np.abs(dat_freq - first) > tolerance, axis=1))
    if changed.size:
        raise DataError(f"{path}: DAT_FREQ of row {changed[0]} differs from row 0's; a filterbank's channels "
                        f"must be the same throughout")
    steps = np.diff(first)
    if steps.size and np.any(np.abs(steps - chan_bw) > tolerance):
        bad = steps[np.argmax(np.abs(steps - chan_bw))]
        raise DataError(f"{path}: DAT_FREQ steps by {bad:g} MHz where CHAN_BW is {chan_bw:g} MHz; expected "
                        f"channel centres evenly spaced by CHAN_BW")
    return float(first[0]), chan_bw


def _row_offset(table: fits.BinTableHDU, layout: dict, path: Path) -> float:
    """Seconds from the file's start time to its first sample (module docstring)."""
    row_length = layout["NSBLK"] * layout["TBIN"]
    if "OFFS_SUB" not in table.columns.names:
        return _optional_number(table.header, "NSUBOFFS", path, 0) * row_length
    centres = np.asarray(table.data["OFFS_SUB"], dtype=np.float64)
    broken = ~np.isfinite(centres)
    broken[1:] |= ~(np.abs(np.diff(centres) - row_length) <= layout["TBIN"] / 2)
    if np.any(broken):
        row = int(np.argmax(broken))
        raise DataError(f"{path}: OFFS_SUB of row {row} is {centres[row]!r} s, but rows of NSBLK*TBIN = "
                        f"{row_length:g} s must be contiguous (a row is missing, or OFFS_SUB is wrong)")
    offset = centres[0] - row_length / 2
    if offset < -layout["TBIN"] / 2:
        raise DataError(f"{path}: OFFS_SUB of row 0 is {centres[0]} s, less than half a row ({row_length / 2:g} s): "
                        f"the first row would start before STT_OFFS")
    return float(offset)


def _start_mjd(primary: fits.Header, offset: float, path: Path) -> float:
    """UTC MJD of the first sample: STT_IMJD + (STT_SMJD + STT_OFFS + ``offset``) / 86400."""
    day, second, fraction = (_key(primary, key, path, "primary") for key in ("STT_IMJD", "STT_SMJD", "STT_OFFS"))
    mjd = day + (second + fraction + offset) / 86400.0
    try:
        tstart_gps(mjd, path)
    except DataError:
        raise DataError(f"{path}: STT_IMJD={day}, STT_SMJD={second}, STT_OFFS={fraction} give MJD {mjd!r}; "
                        f"expected a start within the GPS era (MJD 44244 to ~93954)") from None
    return float(mjd)


def _recorded(raw: np.ndarray, layout: dict) -> np.ndarray:
    """Rows of bytes ``(rows, bytes)`` as recorded samples ``(rows, NSBLK, NPOL, NCHAN)``."""
    nbits = layout["NBITS"]
    if nbits < 8:
        values = unpack_msb_first(raw, nbits)
    elif nbits == 8:
        values = raw.view(np.int8 if layout["SIGNINT"] else np.uint8)
    else:  # FITS is big-endian
        values = raw.reshape(-1).view(">u2" if nbits == 16 else ">f4").astype(np.uint16 if nbits == 16 else np.float32)
    return values.reshape(raw.shape[0], layout["NSBLK"], layout["NPOL"], layout["NCHAN"])


def _uniform(*columns: np.ndarray) -> bool:
    return all(np.all(column == column.flat[0]) for column in columns)


def _calibrated(values: np.ndarray, scales: np.ndarray, offsets: np.ndarray, weights: np.ndarray,
                zero_off: float) -> np.ndarray:
    """``((values - ZERO_OFF) * DAT_SCL + DAT_OFFS) * DAT_WTS`` as float32; ``values`` are
    ``(rows, NSBLK, npol, NCHAN)``, the columns ``(rows, npol, NCHAN)`` and ``(rows, NCHAN)``."""
    out = values.astype(np.float32)
    out -= np.float32(zero_off)
    out *= scales[:, None].astype(np.float32)
    out += offsets[:, None].astype(np.float32)
    out *= weights[:, None, None].astype(np.float32)
    return out


def _total_intensity(values: np.ndarray, pol_type: str, sum_dtype) -> np.ndarray:
    """``(..., NPOL, NCHAN)`` to ``(..., NCHAN)``: AA + BB as ``sum_dtype``, or the first product
    (module docstring)."""
    if pol_type not in _SUMMED:
        return values[..., 0, :]
    return values[..., 0, :].astype(sum_dtype) + values[..., 1, :].astype(sum_dtype)


def _spectra(values: np.ndarray, columns: dict, layout: dict, zero_off: float, path: Path) -> tuple[np.ndarray, bool]:
    """Total-intensity spectra ``(samples, NCHAN)`` of recorded ``values`` ``(rows, NSBLK, NPOL,
    NCHAN)``, and whether they were scaled to float32 (module docstring)."""
    for name in ("DAT_WTS", "DAT_OFFS", "DAT_SCL"):
        if not np.all(np.isfinite(columns[name])):
            raise DataError(f"{path}: column {name} holds non-finite values; expected finite numbers")
    if not np.any(columns["DAT_WTS"]):
        raise DataError(f"{path}: every channel has DAT_WTS 0 (no valid data)")
    rows, npol, nchan = values.shape[0], layout["NPOL"], layout["NCHAN"]
    scales, offsets = (columns[name].reshape(rows, npol, nchan) for name in ("DAT_SCL", "DAT_OFFS"))
    scaled = bool(layout["SIGNINT"]) or not _uniform(scales, offsets, columns["DAT_WTS"])
    used = slice(0, 2) if layout["POL_TYPE"] in _SUMMED else slice(0, 1)
    values = values[:, :, used]
    if scaled:
        values = _calibrated(values, scales[:, used], offsets[:, used], columns["DAT_WTS"], zero_off)
    sum_dtype = np.float32 if scaled else _SUM_DTYPES[layout["NBITS"]]
    return _total_intensity(values, layout["POL_TYPE"], sum_dtype).reshape(-1, nchan), scaled


def _sigproc_angle(text, path: Path, key: str) -> float | None:
    """A PSRFITS ``hh:mm:ss.s`` / ``dd:mm:ss.s`` string as SIGPROC's ``hhmmss.s`` number (None if unset)."""
    if not isinstance(text, str) or text.strip() in ("", "*"):
        return None
    match = _SEXAGESIMAL.match(text)
    if not match:
        raise DataError(f"{path}: PSRFITS primary header key {key!r} is {text!r}; expected [+-]dd:mm:ss.s")
    sign, whole, minutes, seconds = match.groups()
    value = int(whole) * 10000 + int(minutes) * 100 + float(seconds)
    return -value if sign == "-" else value


def _sigproc_header(primary: fits.Header, layout: dict, fch1: float, foff: float, tstart: float,
                    nbits: int, scaled: bool, path: Path) -> dict:
    telescope = str(primary.get("TELESCOP", "")).strip()
    header = {"rawdatafile": path.name, "source_name": str(primary.get("SRC_NAME", "")).strip(), "data_type": 1,
              "fch1": fch1, "foff": foff, "nchans": layout["NCHAN"], "nifs": 1, "tstart": tstart,
              "tsamp": layout["TBIN"], "nbits": nbits}
    if telescope.upper() in _TELESCOPE_IDS:
        header["telescope_id"] = _TELESCOPE_IDS[telescope.upper()]
    for key, sigproc_key in (("RA", "src_raj"), ("DEC", "src_dej")):
        angle = _sigproc_angle(primary.get(key), path, key)
        if angle is not None:
            header[sigproc_key] = angle
    header.update(psrfits_telescope=telescope, psrfits_pol_type=layout["POL_TYPE"], psrfits_npol=layout["NPOL"],
                  psrfits_nbits=layout["NBITS"], psrfits_scaled=scaled)
    return header


def _open(path: Path) -> fits.HDUList:
    if not path.is_file():
        raise DataError(f"input file {path} does not exist (expected a PSRFITS search-mode file)")
    try:
        return fits.open(path, memmap=True)
    except (OSError, ValueError) as err:
        raise DataError(f"{path} is not a FITS file ({err}); expected a PSRFITS search-mode file") from None


def read_psrfits(path: str | os.PathLike) -> Filterbank:
    """Read a PSRFITS search-mode file as total-intensity spectra ``(samples, 1, NCHAN)`` (module
    docstring: the layout, what is trusted, and what is returned).

    Raises
    ------
    DataError
        Not a FITS file; not search mode; no SUBINT table, a key or column missing or out of range
        (named); a DATA column whose size disagrees with NSBLK*NPOL*NCHAN*NBITS/8; channel
        frequencies that change between rows, are not evenly spaced by CHAN_BW or are not above
        0 MHz; rows that are not contiguous; weights that are all zero; NSTOT above the rows' total.
    """
    path = Path(path)
    with _open(path) as hdus:
        primary = hdus[0].header
        mode = str(primary.get("OBS_MODE", "")).strip().upper()
        if mode not in SEARCH_MODES:
            raise DataError(f"{path}: OBS_MODE={primary.get('OBS_MODE')!r}; expected a search-mode file "
                            f"(OBS_MODE one of {list(SEARCH_MODES)})")
        if "SUBINT" not in hdus:
            raise DataError(f"{path}: no SUBINT table (HDUs: {', '.join(hdu.name for hdu in hdus)}); "
                            f"not a PSRFITS search-mode file")
        table = hdus["SUBINT"]
        layout = _layout(table.header, path)
        if table.data is None or len(table.data) == 0:
            raise DataError(f"{path}: the SUBINT table has no rows")
        _check_columns(table, layout, path)
        rows = len(table.data)
        columns = {name: np.array(table.data[name], dtype=np.float64).reshape(rows, -1) for name in _COLUMNS[1:]}
        fch1, foff = _channel_grid(columns["DAT_FREQ"], layout["CHAN_BW"], path)
        tstart = _start_mjd(primary, _row_offset(table, layout, path), path)
        raw = np.ascontiguousarray(table.data.view(np.ndarray)["DATA"]).view(np.uint8).reshape(rows, -1)
        values = _recorded(raw, layout)
        zero_off = _optional_number(table.header, "ZERO_OFF", path, 0.0)
        nstot = int(_optional_number(table.header, "NSTOT", path, rows * layout["NSBLK"]))
    if not 1 <= nstot <= rows * layout["NSBLK"]:
        raise DataError(f"{path}: NSTOT={nstot}, but {rows} rows of NSBLK={layout['NSBLK']} hold "
                        f"{rows * layout['NSBLK']} spectra (truncated file?)")
    spectra, scaled = _spectra(values, columns, layout, zero_off, path)
    nbits = layout["NBITS"] if not scaled and layout["POL_TYPE"] not in _SUMMED else 8 * spectra.dtype.itemsize
    header = _sigproc_header(primary, layout, fch1, foff, tstart, nbits, scaled, path)
    return Filterbank(path, header, spectra[:nstot, None, :])
