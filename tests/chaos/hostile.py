"""A corpus of hostile requests for ``POST /v1/voices`` and ``POST /v1/jobs``, and a runner that sends each
through the Flask test client and measures it.

``build_corpus(...)`` returns labelled items: malformed and lying audio files (0 bytes, the upload limit
+ 1 byte, foreign magic numbers, random bytes, WAV/FLAC/AIFF headers that claim absurd sizes, a truncated
MP3, an Ogg page of garbage, XML entity bombs), file names that try to escape the data directory, voice
names with traversal and control characters, oversized fields and bodies, deeply nested JSON, a script
one character over the limit, and unicode edge cases. Issue 11's inputs (to ``POST /v1/jobs``,
``POST /v1/scripts/preview`` and ``/v1/lexicons``): EPUB zip bombs (honest and lying directories),
DRM-protected and malformed EPUBs, SSML with a DTD, entities or an external entity, text uploads that are
not UTF-8, lexicons over the entry limit or with graphemes that look like regular expressions, and PLS
documents with a DOCTYPE. Those items also name the error ``code`` they expect and words the message must
``say``, so that a refusal for the wrong reason (or a bare 400) is caught too.

``run_hostile(app, headers)`` sends every item twice: once as ``headers``' owner with nothing traced, to
measure its CPU time honestly (:class:`CpuMeter`), and once as a second owner with ``tracemalloc`` on,
to measure the peak of Python allocations (numpy's buffers included) during that request above what
was allocated just before it. The request is fully built before either measurement starts, so only the
server's work is counted. It also records ``ru_maxrss`` before and after the whole corpus, whatever is
left in ``data_dir/uploads``, and any file that appeared outside ``data_dir`` (in its parent, or at any
path a hostile file name points to).

Invariants checked by ``HostileReport.violations``: each item's status is one it allows (by default any
4xx: never a 2xx for garbage, never a 5xx), with the error code and words it expects if it names them,
each request costs under ``time_limit_s`` of CPU, and allocates at most ``memory_limit`` bytes above its
baseline; nothing is left in ``uploads``; nothing escapes.
"""

from __future__ import annotations

import base64
import functools
import io
import itertools
import json
import logging
import os
import random
import resource
import struct
import tempfile
import time
import tracemalloc
import uuid
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from flask import Flask
from werkzeug.datastructures import Headers
from werkzeug.test import EnvironBuilder

from tests.support import epubs
from tests.support.apps import tome_of
from tests.support.cost import CpuMeter
from webapi.cli import mint_key
from worker.config import Settings
from worker.jobs.intake import plan_job
from worker.jobs.preview import preview_script

VOICE = "hostile-seed"
"""The voice hostile jobs name, uploaded for each owner before the corpus runs (a job naming an unknown
voice would stop at that check, before the script is even parsed)."""

TIME_LIMIT_S = 1.0
"""CPU seconds one hostile request may cost (see :class:`CpuMeter`): a refusal must be cheap."""
MEMORY_LIMIT = 64 * 1024 * 1024
"""Peak Python allocation allowed during one hostile request, above what was allocated just before it.

With the settings the tests use (``max_upload_bytes=2_000_000``, ``max_script_chars`` small) the largest
body Werkzeug accepts is about 2.1 MB (``MAX_CONTENT_LENGTH``); file parts over 500 KB are spooled to disk,
and the largest uncompressed reference that fits (2 MB of 8-bit PCM) decodes to 2 M float32 samples, 8 MB,
held twice (the decoded blocks and their concatenation), then written as 16-bit PCM (4 MB) and read back
for its SHA-256 (4 MB): about 25 MB in the worst case that the upload limit bounds. 64 MB leaves room for
that and for the interpreter's own noise, while anything that believes a header (2**31 frames are 8 GiB of
float32), expands an XML entity bomb or decodes without a bound lands far above it. (A compressed file is
not bounded by the upload limit, only by duration x sample rate: uploads are capped at 48 kHz, so a 120 s
reference decodes to at most 23 MB of float32; see the FLAC decompression bomb.)"""

MAX_BODY_CHARS = 400
ACCEPTED_OR_REFUSED = frozenset({202, *range(400, 500)})
"""For items that are hostile in form but valid in content: accepting them is right, a 5xx is not."""


# --------------------------------------------------------------------------------------------------
# Audio and document builders
# --------------------------------------------------------------------------------------------------


def tone_wav(seconds: float = 1.5, rate: int = 16_000, hz: float = 180.0) -> bytes:
    """A valid, audible mono 16-bit WAV reference (a sine tone)."""
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    samples = (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)
    sf.write(buf, samples, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def wav_bytes(
    *,
    channels: int = 1,
    rate: int = 16_000,
    bits: int = 16,
    fmt_tag: int = 1,
    data: bytes = b"",
    data_size: int | None = None,
    riff_size: int | None = None,
    fmt_size: int = 16,
) -> bytes:
    """A RIFF/WAVE file whose header says whatever it is told, followed by ``data``."""
    block_align = max(1, channels * bits // 8) & 0xFFFF
    byte_rate = (rate * block_align) & 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", fmt_tag, channels, rate, byte_rate, block_align, bits)
    size = len(data) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + struct.pack("<I", fmt_size) + fmt + b"data" + struct.pack("<I", size) + data
    riff = len(body) if riff_size is None else riff_size
    return b"RIFF" + struct.pack("<I", riff & 0xFFFFFFFF) + body


def flac_claiming(total_samples: int, rate: int = 44_100, channels: int = 2, bps: int = 16) -> bytes:
    """``fLaC`` with a STREAMINFO block claiming ``total_samples`` (36-bit field), then garbage frames."""
    packed = (rate << 44) | ((channels - 1) << 41) | ((bps - 1) << 36) | (total_samples & (2**36 - 1))
    info = struct.pack(">HH", 4096, 4096) + (0).to_bytes(3, "big") * 2 + packed.to_bytes(8, "big") + bytes(16)
    header = bytes([0x80]) + len(info).to_bytes(3, "big")  # last metadata block, type 0 (STREAMINFO)
    garbage = random.Random(36).randbytes(2048)
    return b"fLaC" + header + info + b"\xff\xf8" + garbage


def aiff_claiming(frames: int, channels: int = 1, bits: int = 16) -> bytes:
    """An AIFF whose COMM chunk claims ``frames`` sample frames at 44.1 kHz; 1 KB of sound follows."""
    rate_80bit = bytes.fromhex("400EAC44000000000000")  # 44100.0 as an IEEE 754 80-bit extended float
    comm = struct.pack(">hIh", channels, frames & 0xFFFFFFFF, bits) + rate_80bit
    ssnd_data = struct.pack(">II", 0, 0) + bytes(1024)
    chunks = b"COMM" + struct.pack(">I", len(comm)) + comm + b"SSND" + struct.pack(">I", len(ssnd_data))
    chunks += ssnd_data
    return b"FORM" + struct.pack(">I", 4 + len(chunks)) + b"AIFF" + chunks


def _ogg_crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def ogg_page(
    payload: bytes, *, serial: int = 0x7A6F6D65, sequence: int = 0, header_type: int = 0x02
) -> bytes:
    """One Ogg page with a correct CRC around ``payload``: the demuxer accepts it, the codec gets garbage."""
    segments = [255] * (len(payload) // 255) + [len(payload) % 255]
    header = b"OggS" + struct.pack("<BBqIII", 0, header_type, 0, serial, sequence, 0)
    header += bytes([len(segments)]) + bytes(segments)
    crc = _ogg_crc(header + payload)
    return header[:22] + struct.pack("<I", crc) + header[26:] + payload


def truncated_mp3(keep: int = 700) -> bytes:
    """The first ``keep`` bytes of an MP3 of a 2 s tone (libsndfile writes MPEG layer III): a frame or two."""
    t = np.arange(2 * 44_100) / 44_100
    buf = io.BytesIO()
    samples = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    sf.write(buf, samples, 44_100, format="MP3", subtype="MPEG_LAYER_III")
    return buf.getvalue()[:keep]


def flac_decompression_bomb(seconds: int = 119, rate: int = 192_000) -> bytes:
    """A ~130 KB FLAC within every configured limit (under 120 s, 192 kHz, mono): one second of tone and
    then digital silence, which FLAC stores in a few bytes per block but which decodes to ``seconds * rate``
    float32 samples (91 MB at the defaults)."""
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", samplerate=rate, channels=1, format="FLAC", subtype="PCM_16") as out:
        t = np.arange(rate) / rate
        out.write((3000 * np.sin(2 * np.pi * 200 * t)).astype(np.int16))
        silence = np.zeros(rate, dtype=np.int16)
        for _ in range(seconds - 1):
            out.write(silence)
    return buf.getvalue()


def png_bytes() -> bytes:
    """A valid 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0\0\0\0"))
        + chunk(b"IEND", b"")
    )


def elf_bytes() -> bytes:
    """A 64-bit little-endian ELF header followed by zeros."""
    ident = b"\x7fELF\x02\x01\x01" + bytes(9)
    return (
        ident + struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0x401000, 64, 0, 0, 64, 56, 0, 64, 0, 0) + bytes(512)
    )


def zip_bytes() -> bytes:
    """A zip archive holding a valid WAV (the server must not look inside)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("reference.wav", tone_wav())
    return buf.getvalue()


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<speak>&lol9;</speak>
"""

XXE = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE speak [
 <!ENTITY xxe SYSTEM "file:///etc/passwd">
 <!ENTITY remote SYSTEM "http://127.0.0.1:9/tome-xxe">
]>
<speak>&xxe;&remote;</speak>
"""


def nested_json(depth: int, key: str | None = None) -> bytes:
    """A JSON value nested ``depth`` levels deep: arrays, or objects under ``key``."""
    if key is None:
        return b"[" * depth + b"]" * depth
    opener = json.dumps({key: 0})[:-2].encode()  # b'{"key": '
    return opener * depth + b"1" + b"}" * depth


MIB = 2**20
_ZERO_MIB = bytes(MIB)


@functools.cache
def zeros_deflated(mib: int) -> tuple[bytes, int]:
    """A raw deflate stream of ``mib`` MiB of zero bytes, and their CRC-32. Built from one compressed MiB
    (after a full flush the compressor starts afresh, so every MiB compresses to the same bytes): a GiB
    costs milliseconds and 1 MB, not the seconds a real compression of it takes."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(_ZERO_MIB) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(_ZERO_MIB, crc)
    return block * mib + compressor.flush(), crc


def _deflated(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def raw_zip(entries: Sequence[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip of ``(name, payload, method, crc, size)`` entries, headers written as given (``size`` is the
    uncompressed size both headers declare): what the author of a zip bomb writes, lies included."""
    out = bytearray()
    directory = bytearray()
    for name, payload, method, crc, size in entries:
        encoded = name.encode()
        offset = len(out)
        # version needed, flags, method, time, date (2024-01-01), CRC-32, compressed and uncompressed sizes
        common = struct.pack("<HHHHHIII", 20, 0, method, 0, 0x5821, crc, len(payload), size)
        out += b"PK\x03\x04" + common + struct.pack("<HH", len(encoded), 0) + encoded + payload
        directory += b"PK\x01\x02" + struct.pack("<H", 20) + common
        directory += struct.pack("<HHHHHII", len(encoded), 0, 0, 0, 0, 0, offset) + encoded
    count = len(entries)
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(directory), len(out), 0)
    return bytes(out + directory + end)


def epub_bomb(mib: int = 1024, *, declared: int | None = None, member: str = "OEBPS/chapter1.xhtml") -> bytes:
    """The default test book (tests/support/epubs.py) with ``member`` replaced by ``mib`` MiB of zeros,
    deflated (about 1 KB on the wire per MiB). Its headers declare the true size, or ``declared``: a
    directory that lies so that the book passes every check made before inflating."""
    entries: list[tuple[str, bytes, int, int, int]] = []
    for name, data in epubs.epub_files(epubs.DEFAULT_CHAPTERS).items():
        if name == member:
            payload, crc = zeros_deflated(mib)
            entries.append(
                (name, payload, zipfile.ZIP_DEFLATED, crc, mib * MIB if declared is None else declared)
            )
        elif name == "mimetype":
            entries.append((name, data, zipfile.ZIP_STORED, zlib.crc32(data), len(data)))
        else:
            entries.append((name, _deflated(data), zipfile.ZIP_DEFLATED, zlib.crc32(data), len(data)))
    return raw_zip(entries)


def encryption_xml(algorithm: str, uri: str) -> bytes:
    """META-INF/encryption.xml saying that ``uri`` is encrypted with ``algorithm``."""
    return (
        '<?xml version="1.0"?>\n<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
        f'<enc:EncryptionMethod Algorithm="{algorithm}"/><enc:KeyInfo/>'
        f'<enc:CipherData><enc:CipherReference URI="{uri}"/></enc:CipherData>'
        "</enc:EncryptedData></encryption>"
    ).encode()


AES_CBC = "http://www.w3.org/2001/04/xmlenc#aes128-cbc"
FONT_OBFUSCATION = "http://www.idpf.org/2008/embedding"
PLS_NS = "http://www.w3.org/2005/01/pronunciation-lexicon"


def pls_document(lexemes: Iterable[tuple[str, str]], doctype: str = "") -> bytes:
    """A W3C PLS lexicon of ``(grapheme, alias)`` lexemes; ``doctype`` goes before the root element."""
    body = "".join(
        f"<lexeme><grapheme>{grapheme}</grapheme><alias>{alias}</alias></lexeme>"
        for grapheme, alias in lexemes
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n{doctype}<lexicon version="1.0" xmlns="{PLS_NS}" '
        f'alphabet="ipa" xml:lang="en">{body}</lexicon>'
    ).encode()


LAUGHS_DTD = BILLION_LAUGHS[BILLION_LAUGHS.index("<!DOCTYPE") : BILLION_LAUGHS.index("]>") + 3].replace(
    "lolz", "lexicon"
)
"""The billion laughs' internal DTD alone, for a PLS ``<lexicon>``."""


# --------------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostileItem:
    """One hostile request. ``form`` and ``file`` make a multipart upload; otherwise ``body`` is sent raw
    with ``content_type``. ``allowed`` is the set of acceptable statuses (``None``: any 4xx)."""

    label: str
    path: str
    form: Mapping[str, str] | None = None
    file: tuple[str, bytes] | None = None
    body: bytes | None = None
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    allowed: frozenset[int] | None = None
    max_chunks: int | None = None
    """For a job that may legitimately be accepted: the most chunks it may make (no entity expansion)."""
    bug: str | None = None
    """A known server bug this item triggers; the CI test expects it to break an invariant (xfail)."""
    file_field: str = "audio"
    """The multipart field ``file`` is sent as (``script`` for a job's script file)."""
    code: str | None = None
    """The error code a refusal must carry (``{"error": {"code": ...}}``); None: any."""
    says: tuple[str, ...] = ()
    """Words a refusal's message must contain (case-insensitive): it names the problem."""

    def accepts(self, status: int) -> bool:
        return 400 <= status < 500 if self.allowed is None else status in self.allowed

    def misnamed(self, status: int, body: bytes) -> str | None:
        """What a refusal (a 4xx) fails to say of what this item expects it to say; None if all is said."""
        if not 400 <= status < 500 or (self.code is None and not self.says):
            return None
        try:
            error = json.loads(body)["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            return "the refusal is not the JSON error shape"
        wanted = f"expected code {self.code!r}" if self.code else "expected"
        missing = [word for word in self.says if word.casefold() not in message.casefold()]
        if (self.code is not None and code != self.code) or missing:
            return f"{wanted} and a message saying {list(self.says)}; got {code!r}: {message!r}"
        return None


@dataclass(frozen=True)
class Corpus:
    items: tuple[HostileItem, ...]
    escape_targets: tuple[Path, ...]
    """Every path a hostile file name could reach that did not exist: none may exist after the run."""
    guarded: tuple[Path, ...]
    """Existing files a hostile name could reach (``/etc/passwd``): they must be unchanged."""


_names = itertools.count(1)


def _upload(label: str, audio: bytes, filename: str = "reference.wav", **overrides: Any) -> HostileItem:
    """A voice upload under a name of its own (an item that is accepted must not turn the rest into 409s);
    ``force``: the valid audio here is a tone, which is kept only when asked (what is hostile is the file)."""
    form = {
        "name": f"hostile {next(_names)}",
        "ref_text": "a hostile reference",
        "force": "true",
        **overrides.pop("form", {}),
    }
    return HostileItem(label, "/v1/voices", form=form, file=(filename, audio), **overrides)


def _job(label: str, **overrides: Any) -> HostileItem:
    payload: dict[str, Any] = {"title": "hostile", "script": "Hello there.", "voice": VOICE}
    payload.update(overrides.pop("payload", {}))
    body = json.dumps(payload).encode()
    return HostileItem(label, "/v1/jobs", body=body, content_type="application/json", **overrides)


def _raw_job(label: str, body: bytes, content_type: str = "application/json", **kw: Any) -> HostileItem:
    return HostileItem(label, "/v1/jobs", body=body, content_type=content_type, **kw)


def _script_file(label: str, data: bytes, filename: str, path: str = "/v1/jobs", **kw: Any) -> HostileItem:
    """A job (or, with ``path``, a preview) whose script is the uploaded file ``filename``."""
    form = {"job": json.dumps({"title": "hostile", "voice": VOICE})}
    return HostileItem(label, path, form=form, file=(filename, data), file_field="script", **kw)


def _lexicon(label: str, entries: list[dict[str, Any]], **kw: Any) -> HostileItem:
    body = json.dumps({"name": "hostile", "entries": entries}).encode()
    return HostileItem(label, "/v1/lexicons", body=body, content_type="application/json", **kw)


def _pls(label: str, document: bytes, **kw: Any) -> HostileItem:
    path = "/v1/lexicons?name=hostile"
    return HostileItem(label, path, body=document, content_type="application/pls+xml", **kw)


def _escape_names(data_dir: Path, tag: str) -> tuple[list[str], list[Path], list[Path]]:
    """Hostile file names, the paths they could reach from any folder the server writes in, and the
    existing files they name (which must be left alone)."""
    outside = data_dir.parent / f"tome-hostile-{tag}"
    tmp = Path(tempfile.gettempdir())
    names = [
        "../../etc/passwd",
        "../" * 12 + f"tmp/tome-hostile-{tag}-up.wav",
        f"../../../tome-hostile-{tag}/rel.wav",
        f"{outside}/abs.wav",
        f"{tmp}/tome-hostile-{tag}-abs.wav",
        f"..\\..\\..\\tome-hostile-{tag}-win.wav",
        f"ok.wav\x00../../../tome-hostile-{tag}-nul.wav",
        f"./uploads/../../tome-hostile-{tag}-dot.wav",
        f"tome-hostile-{tag}-" + "A" * 4096 + ".wav",
        f"\u202evaw.{tag}-rtl.exe",
    ]
    bases = [
        data_dir,
        data_dir / "uploads",
        data_dir / "voices",
        data_dir / "voices" / "x",
        Path.cwd(),
        Path("/"),
    ]
    paths: set[Path] = {outside}
    for name in names:
        for candidate in {name, name.replace("\\", "/"), name.split("\x00", 1)[-1]}:
            paths.update(Path(os.path.normpath(base / candidate)) for base in bases)
    guarded = {path for path in paths if _exists(path)}  # /etc/passwd: must be left as it is
    return names, sorted(paths - guarded), sorted(guarded)


def build_corpus(settings: Settings, tag: str) -> Corpus:
    """The hostile items for an app with these settings. ``tag`` makes the escape targets unique."""
    limit = settings.limits.max_upload_bytes
    script_limit = settings.limits.max_script_chars
    valid = tone_wav()
    items: list[HostileItem] = []

    # --- uploads: the file itself --------------------------------------------------------------------
    over_limit = wav_bytes(rate=8_000, bits=8, data_size=limit + 1 - 44) + bytes(limit + 1 - 44)
    at_limit = wav_bytes(rate=8_000, bits=8, data_size=limit - 44) + bytes(range(256)) * ((limit - 44) // 256)
    at_limit += bytes(limit - len(at_limit))
    assert len(over_limit) == limit + 1
    assert len(at_limit) == limit
    rng = random.Random(1234)
    nan_samples = np.full(24_000, np.nan, dtype="<f4").tobytes()
    items += [
        _upload("upload: 0-byte file", b""),
        _upload(f"upload: exactly the limit + 1 byte ({limit + 1} bytes)", over_limit),
        _upload(f"upload: exactly the limit ({limit} bytes of 8 kHz PCM, too long)", at_limit),
        _upload("upload: PNG image", png_bytes(), "x.png"),
        _upload("upload: ELF executable", elf_bytes(), "x.wav"),
        _upload("upload: zip holding a valid WAV", zip_bytes(), "x.zip"),
        _upload("upload: %PDF header", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\n" + bytes(256)),
        _upload("upload: 64 KB of random bytes", rng.randbytes(64 * 1024)),
        _upload("upload: RIFF/WAVE header only", wav_bytes(data_size=0)),
        _upload(
            "upload: WAV claiming 2**31 frames (8-bit mono, data size 2**31)",
            wav_bytes(bits=8, data_size=2**31, data=bytes(4096)),
        ),
        _upload("upload: WAV claiming 65535 channels", wav_bytes(channels=65535, data=bytes(4096))),
        _upload("upload: WAV claiming 0 channels", wav_bytes(channels=0, data=bytes(4096))),
        _upload("upload: WAV with sample rate 2**31-1", wav_bytes(rate=2**31 - 1, data=bytes(4096))),
        _upload("upload: WAV with sample rate 0", wav_bytes(rate=0, data=bytes(4096))),
        _upload(
            "upload: WAV data chunk larger than the file (0xFFFFFFF0)",
            wav_bytes(data=valid[44:1044], data_size=0xFFFFFFF0),
        ),
        _upload(
            "upload: WAV with RIFF size 0xFFFFFFFF around valid samples (tolerated)",
            wav_bytes(data=valid[44:], riff_size=0xFFFFFFFF),
            allowed=ACCEPTED_OR_REFUSED,
        ),
        _upload(
            "upload: WAV with fmt chunk size 0xFFFFFFFF", wav_bytes(data=bytes(4096), fmt_size=0xFFFFFFFF)
        ),
        _upload("upload: WAV with 0 bits per sample", wav_bytes(bits=0, data=bytes(4096))),
        _upload("upload: WAV with format tag 0xFFFF", wav_bytes(fmt_tag=0xFFFF, data=bytes(4096))),
        _upload("upload: float WAV of NaN samples", wav_bytes(bits=32, fmt_tag=3, data=nan_samples)),
        _upload("upload: valid WAV of digital silence", wav_bytes(data=bytes(48_000))),
        _upload("upload: valid WAV of 0.2 s", tone_wav(seconds=0.2)),
        _upload("upload: FLAC header claiming 2**36-1 samples", flac_claiming(2**36 - 1)),
        _upload("upload: AIFF claiming 2**32-1 frames", aiff_claiming(2**32 - 1)),
        _upload("upload: truncated MP3 (first 700 bytes)", truncated_mp3(700), "x.mp3"),
        _upload("upload: ID3 tag and nothing else", b"ID3\x04\x00\x00\x00\x00\x7f\x7f" + bytes(64), "x.mp3"),
        _upload(
            "upload: Ogg page (valid CRC) of garbage",
            ogg_page(rng.randbytes(1000)) + ogg_page(rng.randbytes(500), sequence=1, header_type=0),
            "x.ogg",
        ),
        _upload("upload: Ogg capture pattern and bad CRC", b"OggS\x00\x02" + rng.randbytes(2000), "x.ogg"),
        _upload(
            "upload: Ogg Vorbis identification header claiming 255 channels",
            ogg_page(b"\x01vorbis" + struct.pack("<IBIiii", 0, 255, 44100, 0, 0, 0) + b"\xb8\x01"),
            "x.ogg",
        ),
        _upload("upload: XML entity bomb (billion laughs)", BILLION_LAUGHS.encode(), "bomb.xml"),
        _upload("upload: XML external entity (XXE)", XXE.encode(), "xxe.xml"),
        _upload(
            "upload: FLAC decompression bomb (130 KB -> 119 s at 192 kHz)",
            flac_decompression_bomb(),
            "bomb.flac",
            allowed=ACCEPTED_OR_REFUSED,
        ),
    ]

    # --- uploads: file names that try to escape (the audio fails late, after it was saved) ----------
    names, targets, guarded = _escape_names(settings.storage.data_dir.resolve(), tag)
    short = tone_wav(seconds=0.2)  # decodes, then fails the length check: saved first, refused after
    for name in names:
        items.append(_upload(f"file name {name[:48]!r}{'...' if len(name) > 48 else ''}", short, name))
    items.append(
        _upload(
            "file name '../../../tome-hostile-…' with valid audio (accepted; stored under a server name)",
            valid,
            names[2],
            form={"name": f"escape {tag}"},
            allowed=frozenset({202}),
        )
    )

    # --- uploads: text fields --------------------------------------------------------------------------
    for label, name in [
        ("voice name '../../etc/passwd'", "../../etc/passwd"),
        ("voice name 'a/../../b'", "a/../../b"),
        ("voice name '..'", ".."),
        ("voice name with NUL", "voice\x00name"),
        ("voice name with ESC sequence", "voice\x1b[2J"),
        ("voice name with CRLF header injection", "voice\r\nX-Injected: 1"),
        ("voice name with RTL override", "voice\u202egnp.exe"),
        ("voice name with leading U+FEFF", "\ufeffvoice"),
        ("voice name of 65 characters", "v" * 65),
        ("voice name empty", ""),
    ]:
        items.append(_upload(label, valid, form={"name": name}))
    items += [
        _upload("language '../../../etc'", valid, form={"language": "../../../etc"}),
        _upload("ref_text of 10 MB", valid, form={"ref_text": "a" * (10 * 1024 * 1024)}),
        _upload("ref_text of 5001 characters", valid, form={"ref_text": "a" * 5001}),
        _upload("ref_text empty", valid, form={"ref_text": ""}),
        _upload(
            "unknown form field owner=root (ignored: the key decides the owner)",
            valid,
            form={"owner": "root"},
            allowed=ACCEPTED_OR_REFUSED,
        ),
        HostileItem(
            "upload: audio sent as a text field",
            "/v1/voices",
            form={"name": "hostile", "ref_text": "x", "audio": "UklGRiQAAABXQVZF"},
        ),
        HostileItem(
            "upload: multipart without a boundary",
            "/v1/voices",
            body=b"--x\r\nContent-Disposition: form-data; name=name\r\n\r\nv\r\n--x--\r\n",
            content_type="multipart/form-data",
        ),
        HostileItem(
            "upload: JSON instead of multipart",
            "/v1/voices",
            body=b'{"name": "v", "ref_text": "x"}',
            content_type="application/json",
        ),
    ]

    # --- jobs --------------------------------------------------------------------------------------------
    max_chars = settings.limits.max_script_chars
    items += [
        _job(
            "job: XML entity bomb as the script (text; accepted without expansion)",
            payload={"script": BILLION_LAUGHS},
            allowed=ACCEPTED_OR_REFUSED,
            max_chunks=40,
        ),
        _job(
            "job: XXE document as a markdown script (text; accepted without fetching)",
            payload={"script": XXE, "script_format": "markdown"},
            allowed=ACCEPTED_OR_REFUSED,
            max_chunks=40,
        ),
        _raw_job(
            "job: XML entity bomb as the body (application/xml)", BILLION_LAUGHS.encode(), "application/xml"
        ),
        _raw_job("job: XXE document as the body (text/xml)", XXE.encode(), "text/xml"),
        _raw_job("job: JSON nested 10,000 levels deep (arrays)", nested_json(10_000)),
        _raw_job(
            "job: JSON nested 10,000 levels deep (objects under 'output')",
            b'{"title": "t", "script": "Hi.", "voice": "'
            + VOICE.encode()
            + b'", "output": '
            + nested_json(10_000, "format")
            + b"}",
        ),
        _raw_job("job: JSON nested 500 levels deep (under the recursion limit)", nested_json(500, "output")),
        _job(
            f"job: script of max_script_chars + 1 ({max_chars + 1}) characters",
            payload={"script": "a" * (max_chars + 1)},
        ),
        _job("job: script of 10 MB", payload={"script": "Hello there. " * (10 * 1024 * 1024 // 13)}),
        _raw_job(
            "job: lone surrogate in the title",
            b'{"title": "\\ud800", "script": "Hi.", "voice": "' + VOICE.encode() + b'"}',
        ),
        _raw_job(
            "job: lone low surrogate in the script",
            b'{"title": "t", "script": "Hi \\udfff.", "voice": "' + VOICE.encode() + b'"}',
        ),
        _raw_job(
            "job: half a surrogate pair as the voice", b'{"title": "t", "script": "Hi.", "voice": "\\ud83d"}'
        ),
        _job("job: voice name behind an RTL override", payload={"voice": "\u202e" + VOICE}),
        _job(
            "job: script of only U+FEFF and bidi controls",
            payload={"script": "\ufeff\u202e\u202d\u202c\u2066"},
        ),
        _job("job: NUL in the script", payload={"script": "Hello\x00 there."}),
        _job("job: voice path traversal", payload={"voice": "../../etc/passwd"}),
        _job("job: webhook_url file:///etc/passwd", payload={"webhook_url": "file:///etc/passwd"}),
        _job("job: webhook_url to loopback", payload={"webhook_url": "http://127.0.0.1:9/hook"}),
        # urlsplit raises ValueError for these two; until webapi/jobs.py catches it, they are 500s.
        _job("job: webhook_url with port 99999", payload={"webhook_url": "http://example.com:99999/"}),
        _job("job: webhook_url with an unbalanced '['", payload={"webhook_url": "http://[::1/hook"}),
        _job("job: Idempotency-Key of 201 characters", headers={"Idempotency-Key": "k" * 201}),
        _job("job: unknown field '__proto__'", payload={"__proto__": {"admin": True}}),
        _raw_job(
            "job: bitrate 1e400 (infinity)",
            b'{"title": "t", "script": "Hi.", "voice": "'
            + VOICE.encode()
            + b'", "output": {"bitrate_kbps": 1e400}}',
        ),
        _raw_job(
            "job: NaN pause",
            b'{"title": "t", "script": "Hi.", "voice": "'
            + VOICE.encode()
            + b'", "pauses": {"sentence": NaN}}',
        ),
        _raw_job("job: JSON array body", b"[]"),
        _raw_job("job: JSON string body", b'"hello"'),
        _raw_job("job: truncated JSON", b'{"title": "t", "script": '),
        _raw_job("job: empty body", b""),
        _raw_job("job: invalid UTF-8 in JSON", b'{"title": "\xff\xfe", "script": "Hi.", "voice": "v"}'),
        _raw_job("job: text/plain body", b"Hello there.", "text/plain"),
        # The multi-tenant report: scripts that held an API worker for minutes (each must now be answered
        # within the item time limit: planned at once if short, by a worker if long), a 2 KB request for
        # 6,339 s of WAV, and webhook addresses that passed.
        *(
            _job(
                f"job: {label}, as long as the script limit allows ({script_limit} characters)",
                payload={"script": (unit * (script_limit // len(unit)))[:script_limit], "script_format": fmt},
                allowed=ACCEPTED_OR_REFUSED,
            )
            for label, unit, fmt in (
                ("'![' repeated (quadratic sentence splitting)", "![", "plain"),
                ("'![ ' repeated, Markdown", "![ ", "markdown"),
                ("abbreviations and decimals repeated", "Dr. Mr. St. e.g. i.e. 3.5 U.S.A. ", "plain"),
                ("headings without blank lines", "# h\n", "markdown"),
                ("one sentence with no end", "and then ", "plain"),
            )
        ),
        _job(
            "job: 200 headings with 30 s chapter pauses as WAV (silence amplifier)",
            payload={
                "script": "".join(f"# {i}\n\n" for i in range(200)),
                "script_format": "markdown",
                "pauses": {"chapter": 30},
                "output": {"format": "wav"},
            },
        ),
        *(
            _job(f"job: webhook_url {url}", payload={"webhook_url": url})
            for url in (
                "http://[::127.0.0.1]/hook",
                "http://[::ffff:127.0.0.1]/hook",
                "http://[64:ff9b::7f00:1]/hook",
                "http://[2002:7f00:1::1]/hook",
                "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",
                "http://93.184.216.34:22/hook",
                "http://93.184.216.34/ho\tok",
                "http://93.184.216.34/hook\r\nX-Injected: 1",
            )
        ),
    ]
    items += issue_11_items()
    return Corpus(tuple(items), tuple(targets), tuple(guarded))


def issue_11_items() -> list[HostileItem]:
    """EPUB, SSML, text uploads and lexicons (issue 11): each a 4xx with its code, naming the problem."""
    return [*_epub_items(), *_ssml_and_text_items(), *_lexicon_items()]


def _epub_items() -> list[HostileItem]:
    script: dict[str, Any] = {"code": "script_invalid"}
    bomb = epub_bomb(1024)
    bombed = ("chapter1.xhtml", "unpacks to more than")
    valid = epubs.build_epub()
    rng = random.Random(11)

    def drm(uri: str) -> bytes:
        return epubs.build_epub(files={"META-INF/encryption.xml": encryption_xml(AES_CBC, uri)})

    fonts = epubs.build_epub(
        files={
            "META-INF/encryption.xml": encryption_xml(FONT_OBFUSCATION, "OEBPS/font.otf"),
            "OEBPS/font.otf": rng.randbytes(512),
        }
    )
    return [
        # Zip bombs: refused from the zip's directory, before inflating; when the directory lies, while
        # inflating, at the size it declared.
        _script_file(
            f"epub: zip bomb, one file inflates to 1 GiB ({len(bomb):,} bytes sent)",
            bomb,
            "bomb.epub",
            says=bombed,
            **script,
        ),
        _script_file(
            "epub: the same zip bomb, previewed",
            bomb,
            "bomb.epub",
            path="/v1/scripts/preview",
            says=bombed,
            **script,
        ),
        _job(
            "epub: the same zip bomb, base64 in a JSON job",
            payload={"script": base64.b64encode(bomb).decode(), "script_format": "epub"},
            says=bombed,
            **script,
        ),
        *(
            _script_file(
                f"epub: zip bomb whose directory lies (declares {label}, inflates to 1 GiB)",
                epub_bomb(1024, declared=declared),
                "liar.epub",
                says=("chapter1.xhtml",),
                **script,
            )
            for label, declared in (("4 KB", 4096), ("40 MB", 40 * MIB))
        ),
        # DRM: encryption.xml that is not font obfuscation.
        _script_file(
            "epub: DRM, encryption.xml encrypts a chapter (AES)",
            drm("OEBPS/chapter1.xhtml"),
            "drm.epub",
            says=("DRM", "chapter1.xhtml"),
            **script,
        ),
        _script_file(
            "epub: DRM, encryption.xml encrypts the package document (AES)",
            drm(epubs.OPF_PATH),
            "drm.epub",
            says=("DRM", "content.opf"),
            **script,
        ),
        _script_file(
            "epub: font obfuscation only (not DRM: accepted)", fonts, "fonts.epub", allowed=frozenset({202})
        ),
        # Malformed.
        _script_file(
            "epub: not a zip at all",
            b"This is not an EPUB. " * 50,
            "book.epub",
            says=("not an EPUB", "zip"),
            **script,
        ),
        _script_file(
            "epub: zip signature, then garbage",
            b"PK\x03\x04" + rng.randbytes(4096),
            "book.epub",
            says=("not an EPUB",),
            **script,
        ),
        _script_file(
            "epub: the first half of a valid EPUB",
            valid[: len(valid) // 2],
            "book.epub",
            says=("not an EPUB",),
            **script,
        ),
        _script_file(
            "epub: a zip without META-INF/container.xml",
            epubs.build_epub(files={"META-INF/container.xml": None}),
            "book.epub",
            says=("container.xml", "missing"),
            **script,
        ),
        _script_file(
            "epub: container.xml names a package document that is missing",
            epubs.build_epub(files={epubs.OPF_PATH: None}),
            "book.epub",
            says=("package", "missing"),
            **script,
        ),
        *(
            _script_file(
                f"epub: a chapter with {what}",
                epubs.build_epub(files={"OEBPS/chapter1.xhtml": document}),
                "book.epub",
                says=("chapter1.xhtml", "entit"),  # entity, entities
                **script,
            )
            for what, document in (
                ("a DTD and entity declarations (billion laughs)", epubs.BILLION_LAUGHS),
                ("an external entity (file:///etc/passwd)", epubs.EXTERNAL_ENTITY),
            )
        ),
    ]


def _ssml_and_text_items() -> list[HostileItem]:
    script: dict[str, Any] = {"code": "script_invalid"}
    parameter = '<!DOCTYPE speak [<!ENTITY % remote SYSTEM "http://127.0.0.1:9/tome.dtd"> %remote;]>\n'
    ssml = (
        ("a DTD with entity declarations (billion laughs)", BILLION_LAUGHS, ("DOCTYPE",)),
        ("external entities (file:// and http://)", XXE, ("DOCTYPE",)),
        ("an external parameter entity", parameter + "<speak>Hi.</speak>", ("DOCTYPE",)),
        ("an undeclared entity, no DTD", "<speak>Hello &xxe; there.</speak>", ("entity", "&xxe;")),
    )
    not_utf8 = (
        ("Latin-1", "Caf\u00e9 au lait, s'il vous pla\u00eet.".encode("latin-1"), "book.txt"),
        ("an encoded surrogate", b"Hello \xed\xa0\x80 there.", "book.txt"),
        ("an overlong '/'", b"Hello \xc0\xaf there.", "book.md"),
        ("cut mid-character", "Hello \u20ac".encode()[:-1], "book.txt"),
    )
    return [
        *(
            _job(f"ssml: {what}", payload={"script": text, "script_format": "ssml"}, says=says, **script)
            for what, text, says in ssml
        ),
        _script_file(
            "ssml: billion laughs uploaded as a .ssml file",
            BILLION_LAUGHS.encode(),
            "laughs.ssml",
            says=("DOCTYPE",),
            **script,
        ),
        _script_file(
            "ssml: billion laughs, previewed",
            BILLION_LAUGHS.encode(),
            "laughs.ssml",
            path="/v1/scripts/preview",
            says=("DOCTYPE",),
            **script,
        ),
        *(
            _script_file(f"text upload: {what} (invalid UTF-8)", data, name, says=("UTF-8",), **script)
            for what, data, name in not_utf8
        ),
    ]


def _lexicon_items() -> list[HostileItem]:
    lexicon: dict[str, Any] = {"code": "lexicon_invalid"}
    w3c_dtd = '<!DOCTYPE lexicon SYSTEM "http://www.w3.org/TR/pronunciation-lexicon/pls.dtd">\n'
    external = '<!DOCTYPE lexicon [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
    return [
        _lexicon(
            "lexicon: 5,000 entries (JSON; the limit is 1,000)",
            [{"grapheme": f"word{i}", "alias": "x"} for i in range(5000)],
            code="validation_error",
            says=("entries", "1000"),
        ),
        _pls(
            "lexicon: 5,000 lexemes (PLS; the limit is 1,000)",
            pls_document((f"word{i}", "x") for i in range(5000)),
            says=("1000",),
            **lexicon,
        ),
        *(
            _lexicon(
                f"lexicon: grapheme {grapheme!r} (looks like a regular expression)",
                [{"grapheme": grapheme, "alias": "x"}],
                says=("pattern",),
                **lexicon,
            )
            for grapheme in (".*", "(a+)+", "[a-z]+", "a|b", "^Tome$", "\\d+", "x{1000}")
        ),
        _pls("lexicon: PLS grapheme '(a+)+'", pls_document([("(a+)+", "x")]), says=("pattern",), **lexicon),
        *(
            _pls(
                f"lexicon: PLS with {what}", pls_document([(word, alias)], doctype), says=("DTD",), **lexicon
            )
            for what, doctype, word, alias in (
                ("a DOCTYPE (the W3C DTD)", w3c_dtd, "Tome", "tohm"),
                ("a DTD with entity declarations (billion laughs)", LAUGHS_DTD, "lol", "&lol9;"),
                ("an external entity (file:///etc/passwd)", external, "secret", "&xxe;"),
            )
        ),
    ]


# --------------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostileResult:
    label: str
    status: int
    memory_status: int
    cpu_s: float
    peak_bytes: int
    accepted: bool
    response: str
    traceback: str | None
    bug: str | None
    chunks: int | None
    misnamed: str | None = None
    """How the refusal failed to name the problem the item expects it to name (see HostileItem.says)."""

    def describe(self) -> str:
        line = (
            f"{self.label}: {self.status}/{self.memory_status} in {self.cpu_s * 1000:.0f} ms of CPU, "
            f"peak +{self.peak_bytes / 2**20:.1f} MiB"
        )
        if self.chunks is not None:
            line += f", {self.chunks} chunks"
        return line + (f" [known bug: {self.bug[:60]}...]" if self.bug else "")


@dataclass
class HostileReport:
    results: list[HostileResult]
    leftover_uploads: list[str]
    escaped: list[str]
    maxrss_before_kib: int
    maxrss_after_kib: int
    seconds: float

    def slowest(self, include_bugs: bool = False) -> HostileResult:
        return max((r for r in self.results if include_bugs or r.bug is None), key=lambda r: r.cpu_s)

    def heaviest(self, include_bugs: bool = False) -> HostileResult:
        return max((r for r in self.results if include_bugs or r.bug is None), key=lambda r: r.peak_bytes)

    def item_violations(
        self, result: HostileResult, time_limit_s: float = TIME_LIMIT_S, memory_limit: int = MEMORY_LIMIT
    ) -> list[str]:
        problems = []
        if not result.accepted:
            problems.append(f"status {result.status}/{result.memory_status}: {result.response}")
            if result.traceback:
                problems.append(result.traceback)
        if result.misnamed:
            problems.append(result.misnamed)
        if result.cpu_s > time_limit_s:
            problems.append(f"cost {result.cpu_s:.2f} s of CPU (limit {time_limit_s} s)")
        if result.peak_bytes > memory_limit:
            problems.append(
                f"allocated {result.peak_bytes / 2**20:.0f} MiB (limit {memory_limit / 2**20:.0f})"
            )
        return problems

    def violations(
        self,
        time_limit_s: float = TIME_LIMIT_S,
        memory_limit: int = MEMORY_LIMIT,
        include_bugs: bool = False,
    ) -> list[str]:
        found = []
        for result in self.results:
            if result.bug is not None and not include_bugs:
                continue
            for problem in self.item_violations(result, time_limit_s, memory_limit):
                found.append(f"{result.label}: {problem}")
        found += [f"left in uploads: {name}" for name in self.leftover_uploads]
        found += [f"escaped the data dir: {path}" for path in self.escaped]
        return found

    def summary(self) -> str:
        clean = [r for r in self.results if r.bug is None]
        slowest, heaviest = self.slowest(), self.heaviest()
        lines = [
            f"{len(self.results)} hostile items ({len(self.results) - len(clean)} on known bugs) in "
            f"{self.seconds:.1f} s; statuses: "
            + ", ".join(f"{s}: {n}" for s, n in sorted(_count(r.status for r in self.results).items())),
            f"costliest (bug-free) item: {slowest.label}: {slowest.cpu_s * 1000:.0f} ms of CPU",
            f"largest peak (bug-free): {heaviest.label}: +{heaviest.peak_bytes / 2**20:.1f} MiB",
            f"ru_maxrss: {self.maxrss_before_kib / 1024:.0f} -> {self.maxrss_after_kib / 1024:.0f} MiB",
        ]
        lines += [r.describe() for r in self.results]
        return "\n".join(lines)


def _count(values: Iterable[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


class _ErrorLog(logging.Handler):
    """Keeps the traceback the app logs for an unhandled error (its 500 handler logs, then answers)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(logging.Formatter().formatException(record.exc_info))


@contextmanager
def capture_app_errors() -> Iterator[_ErrorLog]:
    handler = _ErrorLog()
    logger = logging.getLogger("webapi.errors")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _request(item: HostileItem, headers: Mapping[str, str]) -> EnvironBuilder:
    merged = Headers({**headers, **item.headers})
    if item.form is not None or item.file is not None:
        data: dict[str, Any] = dict(item.form or {})
        if item.file is not None:
            filename, content = item.file
            data[item.file_field] = (io.BytesIO(content), filename)
        return EnvironBuilder(path=item.path, method="POST", headers=merged, data=data)
    return EnvironBuilder(
        path=item.path, method="POST", headers=merged, data=item.body or b"", content_type=item.content_type
    )


@dataclass(frozen=True)
class _Sent:
    status: int
    cpu_s: float
    peak_bytes: int
    body: bytes
    traceback: str | None


def _send(app: Flask, item: HostileItem, headers: Mapping[str, str], trace: bool) -> _Sent:
    builder = _request(item, headers)
    try:
        request = builder.get_request()  # the body is encoded here, before anything is measured
    finally:
        builder.close()
    client = app.test_client()
    with capture_app_errors() as errors:
        base = 0
        if trace:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
        meter = CpuMeter()
        response = client.open(request, buffered=True)
        first = response.get_data()
        elapsed = meter.seconds()  # the request's own cost: what an API worker spends on it
        status, body = _settled(app, response.status_code, first, headers)
        peak = tracemalloc.get_traced_memory()[1] - base if trace else 0
        response.close()
    return _Sent(status, elapsed, max(0, peak), body, errors.records[-1] if errors.records else None)


def _settled(app: Flask, status: int, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
    """The answer the client ends with when the request was handed to a worker (an EPUB job, a preview
    over the inline cap): the worker's task body runs here, then the preview is read back (200, or the
    error the inline path would have answered), or the job: one that failed planning counts as the 422
    its ``error_detail`` names."""
    if status != 202:
        return status, body
    answer = json.loads(body)
    client = app.test_client()
    rt = tome_of(app).runtime
    if "preview" in answer:
        preview_script(rt, uuid.UUID(answer["preview"]))
        read = client.get(answer["url"], headers=dict(headers))
        return read.status_code, read.get_data()
    if answer.get("status") != "queued" or answer["progress"]["chunks_total"]:
        return status, body
    plan_job(rt, uuid.UUID(answer["id"]), lambda *_: None)
    read = client.get(f"/v1/jobs/{answer['id']}", headers=dict(headers))
    job = read.get_json()
    if job["status"] == "failed" and job.get("error_detail"):
        return 422, json.dumps({"error": job["error_detail"]}).encode()
    return status, read.get_data()  # accepted (202), planned


def seed_voice(app: Flask, headers: Mapping[str, str], name: str = VOICE) -> None:
    """Upload a valid voice called ``name`` for ``headers``' owner (already there is fine)."""
    response = app.test_client().post(
        "/v1/voices",
        headers=dict(headers),
        data={
            "name": name,
            "ref_text": "a steady tone",
            "force": "true",  # a tone is not speech: kept only when asked
            "audio": (io.BytesIO(tone_wav()), "seed.wav"),
        },
        content_type="multipart/form-data",
    )
    if response.status_code not in (202, 409):
        raise RuntimeError(f"could not upload the voice {name!r}: {response.status_code} {response.data!r}")


def _files_outside(data_dir: Path) -> set[Path]:
    """Every file under ``data_dir``'s parent that is not under ``data_dir`` itself."""
    found: set[Path] = set()
    for root, dirs, files in os.walk(data_dir.parent):
        here = Path(root)
        if here == data_dir.parent:
            dirs[:] = [d for d in dirs if here / d != data_dir]
        found.update(here / f for f in files)
    return found


def _exists(path: Path) -> bool:
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):  # a name too long for the file system cannot exist
        return False


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _chunks(body: bytes) -> int | None:
    try:
        data = json.loads(body)
        return int(data["progress"]["chunks_total"])
    except (ValueError, KeyError, TypeError):
        return None


def run_hostile(app: Flask, headers: Mapping[str, str], corpus: Corpus | None = None) -> HostileReport:
    """Send every corpus item (see the module docstring) and report statuses, times and memory."""
    started = time.perf_counter()
    settings: Settings = tome_of(app).settings
    data_dir = settings.storage.data_dir.resolve()
    tag = os.urandom(4).hex()
    corpus = corpus or build_corpus(settings, tag)
    memory_headers = {
        "Authorization": f"Bearer {mint_key(app, owner=f'hostile-memory-{tag}', name='hostile', admin=False)}"
    }
    for owner_headers in (headers, memory_headers):
        seed_voice(app, owner_headers)
    outside_before = _files_outside(data_dir)
    guarded_before = {path: _stat(path) for path in corpus.guarded}
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    results: list[HostileResult] = []
    was_tracing = tracemalloc.is_tracing()
    for item in corpus.items:
        timed = _send(app, item, headers, trace=False)
        if not was_tracing:
            tracemalloc.start()
        try:
            measured = _send(app, item, memory_headers, trace=True)
        finally:
            if not was_tracing:
                tracemalloc.stop()
        chunks = _chunks(timed.body) if timed.status == 202 else None
        accepted = item.accepts(timed.status) and item.accepts(measured.status)
        if accepted and item.max_chunks is not None and chunks is not None:
            accepted = chunks <= item.max_chunks
        results.append(
            HostileResult(
                label=item.label,
                status=timed.status,
                memory_status=measured.status,
                cpu_s=timed.cpu_s,
                peak_bytes=measured.peak_bytes,
                accepted=accepted,
                response=timed.body[:MAX_BODY_CHARS].decode("utf-8", "replace"),
                traceback=timed.traceback or measured.traceback,
                bug=item.bug,
                chunks=chunks,
                misnamed=item.misnamed(timed.status, timed.body)
                or item.misnamed(measured.status, measured.body),
            )
        )
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    uploads = data_dir / "uploads"
    leftover = sorted(p.name for p in uploads.iterdir()) if uploads.is_dir() else []
    escaped = sorted(str(p) for p in _files_outside(data_dir) - outside_before)
    escaped += [str(path) for path in corpus.escape_targets if _exists(path)]
    escaped += [str(path) for path, before in guarded_before.items() if _stat(path) != before]
    return HostileReport(
        results, leftover, sorted(set(escaped)), maxrss_before, maxrss_after, time.perf_counter() - started
    )
