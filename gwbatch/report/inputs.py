"""Tolerant reads of the report's inputs: a table or a manifest key may be absent (an empty search, a
manifest from before the key existed), and each reader says what it gives then."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gwbatch.report.format import missing, text


def frame(df: pd.DataFrame | None) -> pd.DataFrame:
    """``df``, or an empty table for None."""
    return df if df is not None else pd.DataFrame()


def column(df: pd.DataFrame, name: str) -> np.ndarray | None:
    """``df[name]`` as float64 (None when the column is absent)."""
    if name not in df.columns:
        return None
    return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64)


def flag(df: pd.DataFrame, name: str, default: bool) -> np.ndarray:
    """A boolean column (missing values False); ``default`` everywhere when the column is absent."""
    if name not in df.columns:
        return np.full(len(df), default, dtype=bool)
    return df[name].fillna(False).astype(bool).to_numpy()


def detectors(manifest: dict, *frames: pd.DataFrame) -> list[str]:
    """Detectors: the store's list, else those with ``snr_<ifo>`` columns in the candidates/background."""
    listed = list((manifest.get("store") or {}).get("ifos") or [])
    if listed:
        return [str(i) for i in listed]
    found: list[str] = []
    for df in frames:
        for c in df.columns:
            if isinstance(c, str) and c.startswith("snr_") and c[4:] not in found:
                found.append(c[4:])
    return found


def span_start(manifest: dict, candidates: pd.DataFrame) -> float:
    """GPS start of the analysed span: the plan's, else the store's, else the first candidate's (else 0)."""
    start = (manifest.get("plan") or {}).get("span_start_gps")
    if start is None:
        start = (manifest.get("store") or {}).get("t0")
    try:
        return float(start)
    except (TypeError, ValueError):
        t = column(candidates, "gps_time")
        return float(np.nanmin(t)) if t is not None and np.isfinite(t).any() else 0.0


def livetime(manifest: dict, key: str) -> float:
    """``livetime[key]`` in seconds (0 when absent or unreadable)."""
    try:
        return float((manifest.get("livetime") or {}).get(key) or 0.0)
    except (TypeError, ValueError):
        return 0.0


def gpu_devices(manifest: dict) -> list[dict]:
    """``gpu_utilisation.devices`` with at least one utilisation sample."""
    gpu = manifest.get("gpu_utilisation")
    if not isinstance(gpu, dict):
        return []
    return [d for d in (gpu.get("devices") or []) if isinstance(d, dict) and gpu_samples(d, "utilisation").size > 0]


def gpu_samples(device: dict, key: str) -> np.ndarray:
    """One sampled quantity of a GPU (a list, or an array) as float64; empty when absent or unreadable."""
    value = device.get(key)
    try:
        return np.asarray([] if value is None else value, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return np.zeros(0)


def gpu_label(device: dict) -> str:
    """"GPU <index> (<name>)"."""
    name = device.get("name")
    return f"GPU {text(device.get('index'))}" + (f" ({name})" if name else "")


def gpu_mean(device: dict) -> float:
    """The recorded mean utilisation (%), else the mean of the samples."""
    mean = device.get("mean")
    if not missing(mean):
        return float(mean)
    u = gpu_samples(device, "utilisation")
    return float(np.nanmean(u)) if np.isfinite(u).any() else math.nan
