"""Loudness figures of a chunk (ITU-R BS.1770 loudness, RMS, sample and true peak, noise floor).

A chunk is measured once, when it is rendered; its :class:`Levels` are stored on the chunk row (as
JSON) so that stitching can level and master the book from the stored figures without reading audio
twice. ``energy`` (the sum of squares) makes the RMS of any concatenation of chunks exact to predict
(:func:`worker.audio.master.predicted_rms_db`).

The true peak is the 4x oversampled peak of BS.1770 Annex 2, computed with
:func:`scipy.signal.resample_poly`. Only the parts of the signal that can reach the peak are oversampled
(see :func:`oversampled_peak`), which keeps :func:`measure` at a few milliseconds per 20 s chunk.

``pyloudnorm`` and SciPy are imported where they are used, not with this module: importing them costs
about a second of CPU, which a process that never measures or masters audio (the API, beat, the CLI) need
not pay. :func:`load_numerics` imports them ahead, in a worker's main process before its pool forks.
"""

from __future__ import annotations

import functools
import importlib
import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

import numpy as np
import numpy.typing as npt

__all__ = [
    "FLOOR_PERCENTILE",
    "FLOOR_WINDOW_S",
    "GATE_BLOCK_S",
    "MIN_LOUDNESS_S",
    "OVERSAMPLE",
    "Levels",
    "load_numerics",
    "measure",
    "oversampled_peak",
    "true_peak_envelope",
]

GATE_BLOCK_S = 0.4
"""BS.1770 gating block: chunks at least this long get the standard gated integrated loudness."""

MIN_LOUDNESS_S = 0.1
"""Below this a chunk is a click or a breath, not speech to level: its loudness is ``None``."""

ABSOLUTE_GATE_LUFS = -70.0
"""BS.1770 absolute gate: quieter blocks do not count (a chunk of them has no loudness)."""

FLOOR_WINDOW_S = 0.05
FLOOR_PERCENTILE = 10.0
"""Noise floor: the RMS of the window at this percentile of the 50 ms windows' RMS, quietest first."""

OVERSAMPLE = 4
"""True-peak oversampling factor (BS.1770-4 Annex 2 asks for at least 4x at 48 kHz)."""

_REACH = 11
"""Input samples on each side that an oversampled point depends on (resample_poly's 4x kernel spans +-10)."""

_BLOCK = 512
"""Granularity, in input samples, of the parts of a signal that :func:`oversampled_peak` oversamples."""


@dataclass(frozen=True)
class Levels:
    """What :func:`measure` found in one chunk. Levels are dB relative to full scale (1.0); ``None``
    where there is nothing to measure (see :func:`measure`). ``energy`` is the sum of the squared
    samples, so that RMS of several chunks, each with a gain, is ``sum(energy * g**2) / sum(samples)``.
    """

    lufs: float | None
    rms_db: float | None
    peak_db: float | None
    true_peak_db: float | None
    floor_db: float | None
    samples: int
    energy: float

    def __post_init__(self) -> None:
        for name in ("lufs", "rms_db", "peak_db", "true_peak_db", "floor_db"):
            value = getattr(self, name)
            if value is not None and not _is_finite_number(value):
                raise ValueError(f"Levels.{name} must be a finite number or None, got {value!r}")
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 0:
            raise ValueError(f"Levels.samples must be a non-negative integer, got {self.samples!r}")
        if not _is_finite_number(self.energy) or self.energy < 0:
            raise ValueError(f"Levels.energy must be a finite non-negative number, got {self.energy!r}")
        if self.samples == 0 and self.energy != 0:
            raise ValueError(f"Levels.energy must be 0 for 0 samples, got {self.energy!r}")

    def to_json(self) -> dict[str, float | int | None]:
        """The figures as a JSON-ready mapping (every field, by name)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Levels:
        """The inverse of :meth:`to_json`. Strict: every field must be present, with a number (an integer
        for ``samples``; ``None`` allowed for the dB figures), finite, and nothing else may be there;
        anything else is a ``ValueError`` naming the field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"levels must be a JSON object, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data]
        unknown = sorted(str(k) for k in data if k not in names)
        if missing:
            raise ValueError(f"levels lack {', '.join(missing)}")
        if unknown:
            raise ValueError(f"levels have unknown fields {', '.join(unknown)}")
        samples = data["samples"]
        if isinstance(samples, bool) or not isinstance(samples, int):
            raise ValueError(f"levels.samples must be an integer, got {samples!r}")
        return cls(
            lufs=_optional_number(data, "lufs"),
            rms_db=_optional_number(data, "rms_db"),
            peak_db=_optional_number(data, "peak_db"),
            true_peak_db=_optional_number(data, "true_peak_db"),
            floor_db=_optional_number(data, "floor_db"),
            samples=samples,
            energy=_number(data, "energy"),
        )


def measure(samples: npt.NDArray[np.floating], sample_rate: int) -> Levels:
    """Measure a mono chunk (float samples, full scale 1.0) at ``sample_rate``.

    - ``lufs``: BS.1770-4 gated integrated loudness from ``pyloudnorm`` for chunks of at least 400 ms;
      a chunk from 100 ms up to 400 ms is measured as one gating block as long as the chunk, so that
      one-word chunks ("Yes.") are levelled like their neighbours (see docs/api.md, "Mastering"). Under
      100 ms, or when every block is gated out (silence, or quieter than -70 LUFS), ``None``.
    - ``rms_db``: unweighted RMS of all samples (a full-scale sine reads -3.01 dB).
    - ``peak_db``: largest absolute sample; ``true_peak_db``: the same on the 4x oversampled signal
      (never below ``peak_db``).
    - ``floor_db``: RMS of the 10th percentile of the chunk's 50 ms windows (non-overlapping; a chunk
      shorter than one window is one window): the level of the pauses between words.
    - every dB figure is ``None`` when its signal is digital silence (all zeros), never NaN or -inf.

    Raises ``ValueError`` for a multi-channel array, NaN or infinite samples, or a bad ``sample_rate``.
    """
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    x = np.asarray(samples)
    if x.ndim != 1:
        raise ValueError(f"samples must be a 1-D mono array, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"samples must be floating point, got {x.dtype}")
    x64 = x.astype(np.float64)
    if not np.isfinite(x64).all():
        bad = "NaN" if np.isnan(x64).any() else "infinite"
        raise ValueError(f"samples contain {bad} values")
    n = int(x64.size)
    energy = float(np.square(x64).sum())  # not np.dot: BLAS threads cost more than they save here
    if n == 0 or energy == 0.0:
        return Levels(None, None, None, None, None, n, 0.0)
    peak = float(np.max(np.abs(x64)))
    return Levels(
        lufs=_loudness(x64, sample_rate),
        rms_db=_db_power(energy / n),
        peak_db=_db(peak),
        true_peak_db=_db(oversampled_peak(x64, peak)),
        floor_db=_floor_db(x64, sample_rate),
        samples=n,
        energy=energy,
    )


def load_numerics() -> None:
    """Import the numerical libraries that measuring (this module) and mastering (:mod:`.master`,
    :mod:`.roomtone`) use, so that the processes forked after this call share one import of them."""
    for name in ("pyloudnorm", "scipy.signal", "scipy.ndimage"):
        importlib.import_module(name)


def oversampled_peak(x: npt.NDArray[np.floating], sample_peak: float | None = None) -> float:
    """Largest absolute value of ``x`` and of ``x`` oversampled 4x by ``resample_poly`` (linear).

    Equal to ``max(|x|.max(), |resample_poly(x, 4, 1)|.max())`` but cheaper: an oversampled point is a
    sum over the ~20 input samples around it, so it cannot exceed the sample peak unless one of those is
    above ``sample_peak / L1`` (L1: the largest sum of absolute coefficients of one polyphase branch,
    about 2.24). Only the 512-sample blocks near such samples are oversampled, with enough context on
    each side that their points are bit-identical to those of the whole signal.
    """
    if x.size == 0:
        return 0.0
    peak = float(np.max(np.abs(x))) if sample_peak is None else sample_peak
    if peak == 0.0:
        return 0.0
    best = peak
    for _start, _stop, points in _oversampled_runs(x, peak):
        best = max(best, float(np.max(points)))
    return best


def true_peak_envelope(x: npt.NDArray[np.floating], threshold: float) -> npt.NDArray[np.float64]:
    """Per input sample ``n``, the largest absolute oversampled value in ``[n, n + 1)`` where that can
    reach ``threshold`` (linear), and 0 where it cannot (the limiter's detector in :mod:`.master`)."""
    env = np.zeros(x.size, dtype=np.float64)
    for start, stop, points in _oversampled_runs(x, threshold):
        env[start:stop] = points.reshape(-1, OVERSAMPLE).max(axis=1)
    return env


def _oversampled_runs(
    x: npt.NDArray[np.floating], threshold: float
) -> list[tuple[int, int, npt.NDArray[np.float64]]]:
    """``(start, stop, |oversampled x[start:stop]|)`` for every run of blocks whose oversampled points
    may reach ``threshold``; the points of sample ``n`` are ``[4 (n - start), 4 (n - start) + 4)``."""
    n = int(x.size)
    hot = np.flatnonzero(np.abs(x) >= threshold / _kernel_l1())
    if hot.size == 0:
        return []
    blocks = np.zeros((n + _BLOCK - 1) // _BLOCK, dtype=bool)
    for shift in (-_REACH, 0, _REACH):  # _REACH < _BLOCK: the neighbours' blocks are enough
        blocks[np.clip(hot + shift, 0, n - 1) // _BLOCK] = True
    edges = np.flatnonzero(np.diff(np.concatenate(([False], blocks, [False])).astype(np.int8)))
    runs = []
    for first, last in zip(edges[::2], edges[1::2], strict=True):
        start, stop = int(first) * _BLOCK, min(n, int(last) * _BLOCK)
        lo, hi = max(0, start - 2 * _REACH), min(n, stop + 2 * _REACH)
        up = _upsample(np.asarray(x[lo:hi], dtype=np.float64))
        points = np.abs(up[OVERSAMPLE * (start - lo) : OVERSAMPLE * (stop - lo)])
        runs.append((start, stop, points))
    return runs


def _upsample(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``resample_poly(x, 4, 1)`` with its default filter, designed once rather than on every call."""
    from scipy.signal import resample_poly

    out: npt.NDArray[np.float64] = resample_poly(x, OVERSAMPLE, 1, window=_kernel())
    return out


@functools.cache
def _kernel() -> npt.NDArray[np.float64]:
    """resample_poly's default anti-imaging filter for 4x: a Kaiser (beta 5) windowed sinc, 81 taps."""
    from scipy.signal import firwin

    taps: npt.NDArray[np.float64] = firwin(20 * OVERSAMPLE + 1, 1.0 / OVERSAMPLE, window=("kaiser", 5.0))
    return taps


@functools.cache
def _kernel_l1() -> float:
    """The largest sum of absolute coefficients of one branch of resample_poly's 4x polyphase filter."""
    impulse = np.zeros(4 * _REACH + 1)
    impulse[2 * _REACH] = 1.0
    response = np.abs(_upsample(impulse))
    return float(response.reshape(-1, OVERSAMPLE).sum(axis=0).max()) * (1.0 + 1e-9)


def _loudness(x: npt.NDArray[np.float64], sample_rate: int) -> float | None:
    import pyloudnorm

    n = x.size
    if n < MIN_LOUDNESS_S * sample_rate:
        return None
    if n >= GATE_BLOCK_S * sample_rate:
        meter = pyloudnorm.Meter(sample_rate)
    else:
        # One block as long as the chunk (pyloudnorm wants strictly more samples than block_size * rate,
        # so the block is half a sample shorter: its last sample is left out, a 1/n error).
        meter = pyloudnorm.Meter(sample_rate, block_size=(n - 0.5) / sample_rate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        value = float(meter.integrated_loudness(x))
    if not math.isfinite(value) or value < ABSOLUTE_GATE_LUFS:
        return None
    return value


def _floor_db(x: npt.NDArray[np.float64], sample_rate: int) -> float | None:
    window = max(1, round(FLOOR_WINDOW_S * sample_rate))
    count = max(1, x.size // window)
    if x.size < window:
        mean_squares = np.array([np.mean(np.square(x))])
    else:
        mean_squares = np.mean(np.square(x[: count * window]).reshape(count, window), axis=1)
    quiet = float(np.percentile(mean_squares, FLOOR_PERCENTILE, method="lower"))
    return _db_power(quiet)


def _db(amplitude: float) -> float | None:
    return 20.0 * math.log10(amplitude) if amplitude > 0.0 else None


def _db_power(power: float) -> float | None:
    return 10.0 * math.log10(power) if power > 0.0 else None


def _optional_number(data: Mapping[str, object], name: str) -> float | None:
    return None if data[name] is None else _number(data, name)


def _number(data: Mapping[str, object], name: str) -> float:
    value = data[name]
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"levels.{name} must be a finite number, got {value!r}")
    return float(value)


def _is_finite_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
