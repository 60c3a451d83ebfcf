"""A minimal ctypes binding of libespeak-ng (as shipped by the ``espeakng-loader`` wheel).

The library keeps global state and is not thread-safe: concurrent calls crash the process. So this
module holds one instance per process, loaded lazily on first use, and serialises every call with a
process-wide lock. A forked child (a Celery prefork worker) initialises the library again before use,
and gets a new lock in case another thread of the parent held it at the fork.

Synthesis is synchronous: a callback collects the 16-bit samples and, for :func:`synthesize_words`, the
word events (:class:`WordEvent`). Before every call the binding selects the voice again, reseeds the
noise generator and resets the waveform generator's static variables (found in the library's ELF symbol
table), so that the same text renders the same samples; :func:`is_deterministic` says whether that
reset is available. Rates of 450 wpm and above are never used: espeak-ng then hands its output to
libsonic, whose stream outlives the call.

See docs/engines.md, "The espeak engine" (what carries over between calls, and how each is reset).
Reference: ``espeak-ng/speak_lib.h`` (API revision 12).
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from worker.engines.base import EngineError

__all__ = [
    "RATE_MAX",
    "RATE_MIN",
    "RATE_NORMAL",
    "EspeakError",
    "SynthParams",
    "WordEvent",
    "data_path",
    "is_deterministic",
    "library_version",
    "list_voices",
    "sample_rate",
    "synthesize",
    "synthesize_words",
    "voice_exists",
]

# espeak_AUDIO_OUTPUT
_AUDIO_OUTPUT_SYNCHRONOUS = 2
# espeak_Initialize options: return an error instead of calling exit(1)
_INITIALIZE_DONT_EXIT = 0x8000
# espeak_ERROR
_EE_OK = 0
_ERROR_NAMES = {-1: "EE_INTERNAL_ERROR", 1: "EE_BUFFER_FULL", 2: "EE_NOT_FOUND"}
# espeak_POSITION_TYPE
_POS_CHARACTER = 1
# espeak_Synth flags
_CHARS_UTF8 = 1
# espeak_EVENT_TYPE
_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1
# A callback's event list is terminated, but a loop over C memory should not trust that blindly: espeak-ng
# allocates 200 events per second of its buffer plus 20 (32 for the default 60 ms buffer).
_MAX_EVENTS_PER_CALLBACK = 1024
# espeak_PARAMETER
_PARAM_RATE = 1
_PARAM_VOLUME = 2
_PARAM_PITCH = 3
_PARAM_RANGE = 4
_PARAM_WORDGAP = 7

RATE_MIN = 80  # espeakRATE_MINIMUM
# espeakRATE_MAXIMUM is 450, but at 450 espeak-ng switches to libsonic time compression (stateful across
# calls, and measured slower: "Hello there, how are you?" is 8939 samples at 449 wpm, 11177 at 450).
RATE_MAX = 449
RATE_NORMAL = 175  # espeakRATE_NORMAL

_RAND_SEED = 1  # the breath-noise seed set before every call


class EspeakError(EngineError):
    """libespeak-ng reported an error (or could not be loaded/initialised)."""


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    """``espeak_EVENT``."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


class _Voice(ctypes.Structure):
    """``espeak_VOICE``. ``languages`` is a sequence of (priority byte, NUL-terminated name) pairs."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_void_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


# int (t_espeak_callback)(short *wav, int numsamples, espeak_EVENT *events)
_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
)


@dataclass(frozen=True)
class SynthParams:
    """Everything that determines one rendering (all of it is set before every call).

    ``voice`` is an espeak voice name, optionally with a variant (``"en-us+f3"``); ``rate`` is in words
    per minute (clamped to ``RATE_MIN..RATE_MAX``), ``pitch`` and ``pitch_range`` are espeak's 0..100
    scales (50 = the voice's own), ``volume`` is 0..200 (100 = normal).
    """

    voice: str
    rate: int = RATE_NORMAL
    pitch: int = 50
    pitch_range: int = 50
    volume: int = 100


@dataclass(frozen=True)
class WordEvent:
    """An ``espeakEVENT_WORD``: espeak-ng starts a word of the text at ``sample`` of the rendering.

    ``position`` is espeak's ``text_position`` minus 1: espeak counts Unicode code points from 1, so this
    is a Python ``str`` index into the text given to :func:`synthesize_words` (checked on accented,
    decomposed, astral, CJK and control characters). It is usually the word's first character, but not
    always (measured with libespeak-ng 1.52.0): after a full stop that does not end a sentence
    ("a b. c") it is the space before the word; a number read as several words ("123", "3.5", "1984")
    gives one event per spoken word, all inside the number; a symbol read as words gives events on the
    symbol ("$", "%", "@"), and an emoji read as two words a second event on the space after it.
    :mod:`worker.engines.espeak` maps events to words with that in mind. ``sample`` is exact: the
    number of samples the waveform generator had produced, from the start of the call, when it reached
    the word (the word's first phoneme, which may begin with a pause).
    """

    position: int
    sample: int


@dataclass
class _Reset:
    """Writes that put the generator's carried-over static variables back to their initial values."""

    writes: list[tuple[int, bytes]] = field(default_factory=list)

    def apply(self) -> None:
        for address, raw in self.writes:
            ctypes.memmove(address, raw, len(raw))


@dataclass
class _State:
    lib: ctypes.CDLL | None = None
    pid: int = 0  # the pid that initialised the library in this address space (0: never)
    sample_rate: int = 0
    reset: _Reset | None = None  # None: renderings are not guaranteed to be reproducible
    chunks: list[bytes] | None = None  # samples collected by the callback during one espeak_Synth call
    words: list[WordEvent] | None = None  # word events collected with them (None: not wanted)


_state = _State()
_lock = threading.Lock()


def _reset_lock_in_child() -> None:
    # Another thread of the parent may have held the lock at fork time; the child must not inherit that.
    global _lock  # noqa: PLW0603
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock_in_child)


def _on_samples(
    wav: ctypes._Pointer[ctypes.c_short], numsamples: int, events: ctypes._Pointer[_Event]
) -> int:
    chunks = _state.chunks
    if chunks is not None and numsamples > 0 and wav:
        chunks.append(ctypes.string_at(wav, numsamples * 2))
    words = _state.words
    if words is not None and events:
        for i in range(_MAX_EVENTS_PER_CALLBACK):
            event = events[i]
            if event.type == _EVENT_LIST_TERMINATED:
                break
            if event.type == _EVENT_WORD:
                words.append(WordEvent(position=event.text_position - 1, sample=event.sample))
    return 0  # 0: continue synthesis


# Module-level reference: the C library keeps the pointer, so the thunk must never be garbage collected.
_CALLBACK = _SynthCallback(_on_samples)


def data_path() -> str:
    """The espeak-ng-data directory of the espeakng-loader wheel (never NULL: that makes espeak exit)."""
    import espeakng_loader

    path = str(espeakng_loader.get_data_path())
    if not Path(path).is_dir():
        raise EspeakError(f"espeak-ng data directory not found: {path}")
    return path


def _library_path() -> str:
    import espeakng_loader

    return str(espeakng_loader.get_library_path())


def _load() -> ctypes.CDLL:
    """dlopen the library and declare the prototypes (no initialisation; caller holds the lock)."""
    if _state.lib is not None:
        return _state.lib
    try:
        lib = ctypes.CDLL(_library_path())
    except OSError as exc:
        raise EspeakError(f"cannot load libespeak-ng: {exc}") from exc
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
    lib.espeak_SetSynthCallback.restype = None
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_SetParameter.restype = ctypes.c_int
    lib.espeak_Synth.argtypes = [
        ctypes.c_void_p,  # text
        ctypes.c_size_t,  # size
        ctypes.c_uint,  # position
        ctypes.c_int,  # position_type
        ctypes.c_uint,  # end_position
        ctypes.c_uint,  # flags
        ctypes.POINTER(ctypes.c_uint),  # unique_identifier
        ctypes.c_void_p,  # user_data
    ]
    lib.espeak_Synth.restype = ctypes.c_int
    lib.espeak_Synchronize.argtypes = []
    lib.espeak_Synchronize.restype = ctypes.c_int
    lib.espeak_Info.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    lib.espeak_Info.restype = ctypes.c_char_p
    lib.espeak_ListVoices.argtypes = [ctypes.POINTER(_Voice)]
    lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_Voice))
    if hasattr(lib, "espeak_ng_SetRandSeed"):
        lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
        lib.espeak_ng_SetRandSeed.restype = ctypes.c_int
    _state.lib = lib
    return lib


def _elf_symbols(path: str) -> dict[str, list[tuple[int, int, int]]]:
    """``name -> [(type, value, size)]`` from the ``.symtab`` of a little-endian ELF64 shared object.

    GCC names function-local statics ``name.NNNN``; the suffix is dropped. Empty for other formats or a
    stripped library.
    """
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # ELFCLASS64, ELFDATA2LSB
        return {}
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out: dict[str, list[tuple[int, int, int]]] = {}
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != 2 or entsize == 0:  # SHT_SYMTAB
            continue
        strtab = sections[link][4]
        for j in range(size // entsize):
            st_name, st_info, _other, _shndx, value, st_size = struct.unpack_from(
                "<IBBHQQ", data, offset + j * entsize
            )
            end = data.index(b"\x00", strtab + st_name)
            name = data[strtab + st_name : end].decode("ascii", "replace").split(".")[0]
            out.setdefault(name, []).append((st_info & 0xF, value, st_size))
    return out


_STT_OBJECT = 1
_STT_FUNC = 2
# (name, initial value) of the waveform generator's statics that carry over between calls (wavegen.c).
_INT_RESETS = (("Flutter_ix", 0), ("cycle_count", 0), ("agc", 256))


def _build_reset(lib: ctypes.CDLL, rate: int) -> _Reset | None:
    """Locate the carried-over statics (right after initialisation) or return None if that fails."""
    try:
        symbols = _elf_symbols(_library_path())
    except (OSError, ValueError, struct.error):
        return None

    def unique(name: str, kind: int) -> tuple[int, int] | None:
        found = [(value, size) for t, value, size in symbols.get(name, []) if t == kind]
        return found[0] if len(found) == 1 else None

    anchor = unique("espeak_Synth", _STT_FUNC)
    synth_address = ctypes.cast(lib.espeak_Synth, ctypes.c_void_p).value
    if anchor is None or synth_address is None:
        return None
    base = synth_address - anchor[0]

    def address(name: str, size: int) -> int | None:
        found = unique(name, _STT_OBJECT)
        if found is None or found[1] != size:
            return None
        return base + found[0]

    # Sanity check of the addresses: two variables whose values initialisation fixes.
    samplerate_at, flutter_inc_at = address("samplerate", 4), address("Flutter_inc", 4)
    if samplerate_at is None or flutter_inc_at is None:
        return None
    if ctypes.c_int.from_address(samplerate_at).value != rate:
        return None
    if ctypes.c_int.from_address(flutter_inc_at).value != 64:
        return None
    reset = _Reset()
    for name, value in _INT_RESETS:
        at = address(name, 4)
        if at is None:
            return None
        reset.writes.append((at, struct.pack("<i", value)))
    return reset


def _ensure_initialised() -> ctypes.CDLL:
    """Initialise the library in this process if it is not yet (caller holds the lock)."""
    lib = _load()
    pid = os.getpid()
    if _state.pid == pid:
        return lib
    rate = lib.espeak_Initialize(
        _AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path().encode("utf-8"), _INITIALIZE_DONT_EXIT
    )
    if rate <= 0:
        raise EspeakError(f"espeak_Initialize failed (returned {rate})")
    lib.espeak_SetSynthCallback(_CALLBACK)
    _state.sample_rate = int(rate)
    _state.reset = _build_reset(lib, int(rate)) if hasattr(lib, "espeak_ng_SetRandSeed") else None
    _state.pid = pid
    return lib


@contextmanager
def _locked() -> Iterator[ctypes.CDLL]:
    """Hold the process-wide lock, with the library initialised in *this* process."""
    with _lock:
        yield _ensure_initialised()


def _check(result: int, what: str) -> None:
    if result != _EE_OK:
        raise EspeakError(f"{what} failed: {_ERROR_NAMES.get(result, str(result))}")


def library_version() -> str:
    """The espeak-ng version string (``espeak_Info``; does not initialise the library)."""
    with _lock:
        raw: bytes | None = _load().espeak_Info(None)
    return raw.decode("utf-8", "replace").strip() if raw else "unknown"


def sample_rate() -> int:
    """The output sample rate in Hz (22050 for the espeak-ng voices)."""
    with _locked():
        return _state.sample_rate


def is_deterministic() -> bool:
    """Whether renderings are reproducible sample for sample (see the module docstring)."""
    with _locked():
        return _state.reset is not None


def _set_voice(lib: ctypes.CDLL, voice: str) -> None:
    if not voice or "\x00" in voice:
        raise EspeakError(f"invalid espeak voice name {voice!r}")
    _check(lib.espeak_SetVoiceByName(voice.encode("utf-8")), f"espeak_SetVoiceByName({voice!r})")


def voice_exists(voice: str) -> bool:
    """Whether ``espeak_SetVoiceByName(voice)`` succeeds."""
    with _locked() as lib:
        try:
            _set_voice(lib, voice)
        except EspeakError:
            return False
        return True


def list_voices() -> list[tuple[str, str, list[str]]]:
    """The installed voices as (name, identifier, languages) tuples (``espeak_ListVoices(NULL)``)."""
    out: list[tuple[str, str, list[str]]] = []
    with _locked() as lib:
        array = lib.espeak_ListVoices(None)
        i = 0
        while array and array[i]:
            voice = array[i].contents
            languages: list[str] = []
            if voice.languages:
                pos = int(voice.languages)
                while ctypes.string_at(pos, 1) != b"\x00":  # priority byte; 0 ends the list
                    name = ctypes.string_at(pos + 1)
                    languages.append(name.decode("utf-8", "replace"))
                    pos += 2 + len(name)
            name_raw: bytes = voice.name or b""
            identifier_raw: bytes = voice.identifier or b""
            out.append(
                (name_raw.decode("utf-8", "replace"), identifier_raw.decode("utf-8", "replace"), languages)
            )
            i += 1
    return out


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, int(value)))


def synthesize(text: str, params: SynthParams) -> npt.NDArray[np.int16]:
    """Render ``text`` (plain UTF-8 text, not SSML) and return the int16 samples at :func:`sample_rate`."""
    return _synthesize(text, params, None)


def synthesize_words(text: str, params: SynthParams) -> tuple[npt.NDArray[np.int16], list[WordEvent]]:
    """Like :func:`synthesize` (the same samples), with espeak's word events in the order it sent them
    (see :class:`WordEvent` for what their positions mean)."""
    words: list[WordEvent] = []
    samples = _synthesize(text, params, words)
    return samples, words


def _synthesize(text: str, params: SynthParams, words: list[WordEvent] | None) -> npt.NDArray[np.int16]:
    data = text.replace("\x00", " ").encode("utf-8")  # same length in characters: positions still hold
    with _locked() as lib:
        # Select the voice and set every parameter on every call: a rendering depends on its arguments only.
        _set_voice(lib, params.voice)
        _check(lib.espeak_SetParameter(_PARAM_RATE, _clamp(params.rate, RATE_MIN, RATE_MAX), 0), "rate")
        _check(lib.espeak_SetParameter(_PARAM_PITCH, _clamp(params.pitch, 0, 100), 0), "pitch")
        _check(lib.espeak_SetParameter(_PARAM_RANGE, _clamp(params.pitch_range, 0, 100), 0), "range")
        _check(lib.espeak_SetParameter(_PARAM_VOLUME, _clamp(params.volume, 0, 200), 0), "volume")
        _check(lib.espeak_SetParameter(_PARAM_WORDGAP, 0, 0), "wordgap")
        if _state.reset is not None:
            _state.reset.apply()
            lib.espeak_ng_SetRandSeed(_RAND_SEED)
        chunks: list[bytes] = []
        _state.chunks = chunks
        _state.words = words
        try:
            buffer = ctypes.create_string_buffer(data)
            result = lib.espeak_Synth(buffer, len(data) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
            _check(result, "espeak_Synth")
            _check(lib.espeak_Synchronize(), "espeak_Synchronize")
        finally:
            _state.chunks = None
            _state.words = None
    return np.frombuffer(b"".join(chunks), dtype=np.int16).copy()
