"""Pure audio helpers of the worker: reference decoding, chunk WAVs, waveform edits, stitching, and the
deliverable's formats, tags, chapters and cover.

Nothing here imports Flask or Celery; ffmpeg is the static binary bundled with ``imageio-ffmpeg``.
"""

from worker.audio.chapters import ChapterMark, ChapterPlan, Pauses, PieceLength, plan_chapters
from worker.audio.cover import MAX_COVER_BYTES, MAX_COVER_SIDE, Cover, CoverError, load_cover
from worker.audio.decode import AudioLimits, DecodedAudio, decode_reference
from worker.audio.dsp import apply_fades, trim_silence
from worker.audio.errors import AudioError, StitchError
from worker.audio.ffmpeg import FfmpegEncoder, decode_to_pcm, ffmpeg_exe
from worker.audio.formats import FORMATS, OUTPUT_FORMATS, FormatInfo, OutputFormat
from worker.audio.stitch import StitchPiece, StitchResult, stitch
from worker.audio.tags import MAX_DESCRIPTION_CHARS, MAX_TAG_CHARS, BookTags
from worker.audio.wavfile import read_wav, write_wav_atomic

__all__ = [
    "FORMATS",
    "MAX_COVER_BYTES",
    "MAX_COVER_SIDE",
    "MAX_DESCRIPTION_CHARS",
    "MAX_TAG_CHARS",
    "OUTPUT_FORMATS",
    "AudioError",
    "AudioLimits",
    "BookTags",
    "ChapterMark",
    "ChapterPlan",
    "Cover",
    "CoverError",
    "DecodedAudio",
    "FfmpegEncoder",
    "FormatInfo",
    "OutputFormat",
    "Pauses",
    "PieceLength",
    "StitchError",
    "StitchPiece",
    "StitchResult",
    "apply_fades",
    "decode_reference",
    "decode_to_pcm",
    "ffmpeg_exe",
    "load_cover",
    "plan_chapters",
    "read_wav",
    "stitch",
    "trim_silence",
    "write_wav_atomic",
]
