"""Pure audio helpers of the worker: reference decoding, chunk WAVs, waveform edits, stitching.

Nothing here imports Flask or Celery; ffmpeg is the static binary bundled with ``imageio-ffmpeg``.
"""

from worker.audio.decode import AudioLimits, DecodedAudio, decode_reference
from worker.audio.dsp import apply_fades, trim_silence
from worker.audio.errors import AudioError, StitchError
from worker.audio.ffmpeg import FfmpegEncoder, OutputFormat, decode_to_pcm, ffmpeg_exe
from worker.audio.stitch import ChapterMark, Pauses, StitchPiece, StitchResult, stitch
from worker.audio.wavfile import read_wav, write_wav_atomic

__all__ = [
    "AudioError",
    "AudioLimits",
    "ChapterMark",
    "DecodedAudio",
    "FfmpegEncoder",
    "OutputFormat",
    "Pauses",
    "StitchError",
    "StitchPiece",
    "StitchResult",
    "apply_fades",
    "decode_reference",
    "decode_to_pcm",
    "ffmpeg_exe",
    "read_wav",
    "stitch",
    "trim_silence",
    "write_wav_atomic",
]
