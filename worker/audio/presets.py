"""What a job delivers: its output format, how it is mastered and split, and what a preset fixes (pure).

A job's ``output`` request (format, bitrate, preset, split, loudness) is resolved here once, when the job
is accepted, into a :class:`Delivery` stored with the job (``to_json`` / ``from_json``); the stitcher
reads it back. A preset fixes what its target asks for and refuses a request that contradicts it, naming
the field, rather than quietly delivering something else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from worker.audio.formats import OutputFormat, check_format
from worker.audio.master import Mastering

Preset = Literal["none", "acx"]
Split = Literal["none", "chapter"]

ACX_SAMPLE_RATE = 44_100
ACX_BITRATE_KBPS = 192
ACX_MAX_PART_MINUTES = 120
ACX_HEAD_SECONDS = 0.75  # ACX: 0.5 to 1 s of room tone before the first words of every file
ACX_TAIL_SECONDS = 2.5  # ACX: 1 to 5 s after the last
ACX_TARGET_LUFS = -20.0  # speech at -20 LUFS gives a file RMS near -21 dB with its pauses: inside -23..-18
ACX_TRUE_PEAK_DB = -3.5  # half a dB below ACX's -3 dBFS, for what MP3 encoding adds to peaks
# ACX measures RMS over the whole file, pauses included: a chapter with many pauses reads quieter than
# its speech. Each chapter file gets one more gain so that its predicted RMS sits here, the middle of
# ACX's -23..-18 window (the limiter takes 0.5-0.7 dB more off, which the window has room for).
ACX_RMS_TARGET_DB = -20.0
MAX_RMS_FIT_DB = 8.0  # never move a file by more than this to meet its RMS target


DEFAULT_MASTERING = Mastering()


class DeliveryError(ValueError):
    """A request the deliverable cannot honour; ``field`` names the request's field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Delivery:
    """Everything the stitcher needs to know about a job's files besides its chunks."""

    format: OutputFormat = "mp3"
    bitrate_kbps: int = 128
    preset: Preset = "none"
    split: Split = "none"
    max_part_seconds: float = 600 * 60.0
    mastering: Mastering | None = DEFAULT_MASTERING
    sample_rate: int | None = None  # None: the engine's own rate
    room_tone: bool = False  # low-level noise instead of digital silence in pauses
    head_seconds: float = 0.0  # lead-in before the first chunk of every file
    tail_seconds: float = 0.0  # at least this much after the last chunk of every file
    report: bool = False  # an ACX report, measured on the encoded files
    rms_target_db: float | None = None  # each file's RMS, pauses included (ACX measures it so)

    def to_json(self) -> dict[str, Any]:
        m = self.mastering
        return {
            "format": self.format,
            "bitrate_kbps": self.bitrate_kbps,
            "preset": self.preset,
            "split": self.split,
            "max_part_seconds": self.max_part_seconds,
            "mastering": None
            if m is None
            else {"target_lufs": m.target_lufs, "true_peak_db": m.true_peak_db},
            "sample_rate": self.sample_rate,
            "room_tone": self.room_tone,
            "head_seconds": self.head_seconds,
            "tail_seconds": self.tail_seconds,
            "report": self.report,
            "rms_target_db": self.rms_target_db,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Delivery:
        m = data.get("mastering")
        return cls(
            format=check_format(str(data["format"])),
            bitrate_kbps=int(data["bitrate_kbps"]),
            preset="acx" if data.get("preset") == "acx" else "none",
            split="chapter" if data.get("split") == "chapter" else "none",
            max_part_seconds=float(data.get("max_part_seconds", cls.max_part_seconds)),
            mastering=None if m is None else Mastering(float(m["target_lufs"]), float(m["true_peak_db"])),
            sample_rate=None if data.get("sample_rate") is None else int(data["sample_rate"]),
            room_tone=bool(data.get("room_tone", False)),
            head_seconds=float(data.get("head_seconds", 0.0)),
            tail_seconds=float(data.get("tail_seconds", 0.0)),
            report=bool(data.get("report", False)),
            rms_target_db=None if data.get("rms_target_db") is None else float(data["rms_target_db"]),
        )


def resolve(
    *,
    fmt: str,
    bitrate_kbps: int,
    preset: str,
    split: str,
    max_part_minutes: int,
    loudness: tuple[float, float] | None,
    given: frozenset[str],
) -> Delivery:
    """The delivery a request asks for. ``given`` names the ``output`` fields the client set itself:
    a preset's values fill the others, and a value the client set that the preset contradicts is a
    :class:`DeliveryError` naming it (``output.format`` for an ACX job asked as m4b, for instance)."""
    mastering = None if loudness is None else Mastering(target_lufs=loudness[0], true_peak_db=loudness[1])
    if preset == "none":
        return Delivery(
            format=check_format(fmt),
            bitrate_kbps=bitrate_kbps,
            split="chapter" if split == "chapter" else "none",
            max_part_seconds=max_part_minutes * 60.0,
            mastering=mastering,
        )
    if preset != "acx":
        raise DeliveryError("output.preset", f"unknown preset {preset!r}; expected none or acx")
    acx: dict[str, object] = {
        "format": "mp3",
        "bitrate_kbps": ACX_BITRATE_KBPS,
        "split": "chapter",
    }
    for name, wanted in acx.items():
        asked = {"format": fmt, "bitrate_kbps": bitrate_kbps, "split": split}[name]
        if name in given and asked != wanted:
            raise DeliveryError(
                f"output.{name}",
                f"the acx preset delivers {name} {wanted}, not {asked}: leave output.{name} out",
            )
    if "max_part_minutes" in given and max_part_minutes > ACX_MAX_PART_MINUTES:
        raise DeliveryError(
            "output.max_part_minutes",
            f"ACX takes files of at most {ACX_MAX_PART_MINUTES} minutes, not {max_part_minutes}",
        )
    if "loudness" in given and loudness is None:
        raise DeliveryError("output.loudness", "the acx preset masters the audio: leave output.loudness out")
    part = max_part_minutes if "max_part_minutes" in given else ACX_MAX_PART_MINUTES
    return Delivery(
        format="mp3",
        bitrate_kbps=ACX_BITRATE_KBPS,
        preset="acx",
        split="chapter",
        max_part_seconds=part * 60.0,
        mastering=mastering
        if "loudness" in given and mastering is not None
        else Mastering(target_lufs=ACX_TARGET_LUFS, true_peak_db=ACX_TRUE_PEAK_DB),
        sample_rate=ACX_SAMPLE_RATE,
        room_tone=True,
        head_seconds=ACX_HEAD_SECONDS,
        tail_seconds=ACX_TAIL_SECONDS,
        report=True,
        rms_target_db=None if "loudness" in given else ACX_RMS_TARGET_DB,
    )
