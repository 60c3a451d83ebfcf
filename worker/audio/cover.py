"""Cover images: checked before they go into an output file (kind, size, dimensions, decodable).

A cover is JPEG or PNG bytes, as the user uploaded them: :func:`load_cover` checks the magic bytes, the
size, the dimensions in the header, and that ffmpeg decodes the whole image, and raises
:class:`CoverError` (a ``ValueError``) naming the problem otherwise. The bytes are embedded unchanged.
"""

from __future__ import annotations

import base64
import re
import struct
import subprocess
from dataclasses import dataclass

from worker.audio.binary import ffmpeg_exe

MAX_COVER_BYTES = 5 * 1024 * 1024
"""Largest cover accepted, in bytes."""

MAX_COVER_SIDE = 6_000
"""Largest width or height accepted, in pixels (stores ask for 1,400 to 3,000 pixels square)."""

_JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Start-of-frame markers: baseline, extended, progressive, lossless, and their arithmetic-coded forms.
_JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_FRONT_COVER = 3
"""ID3/FLAC picture type "Cover (front)"."""
_LOG_PREFIX = re.compile(r"\[[^\]]*@ 0x[0-9a-f]+\]\s*")


class CoverError(ValueError):
    """A cover image was refused. ``code``: ``cover_empty``, ``cover_too_large``, ``cover_not_image``,
    ``cover_too_many_pixels`` or ``cover_undecodable``; ``message`` names the problem and the limit."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Cover:
    """A checked cover image: its bytes, MIME type and what its header says (``depth`` in bits per
    pixel, ``colors`` the palette size of an indexed PNG, else 0). Build one with :func:`load_cover`."""

    data: bytes
    mime_type: str
    width: int
    height: int
    depth: int
    colors: int

    @property
    def ffmpeg_format(self) -> str:
        """ffmpeg's demuxer for the image (never probed: the kind is known)."""
        return "jpeg_pipe" if self.mime_type == "image/jpeg" else "png_pipe"

    def picture_block(self) -> bytes:
        """The image as a FLAC METADATA_BLOCK_PICTURE body (front cover, no description)."""
        mime = self.mime_type.encode("ascii")
        return b"".join(
            (
                struct.pack(">II", _FRONT_COVER, len(mime)),
                mime,
                struct.pack(">IIIIII", 0, self.width, self.height, self.depth, self.colors, len(self.data)),
                self.data,
            )
        )

    def picture_comment(self) -> str:
        """The Vorbis comment value that embeds the image in Ogg (base64 of :meth:`picture_block`)."""
        return base64.b64encode(self.picture_block()).decode("ascii")


def load_cover(data: bytes | bytearray | memoryview, timeout: float = 30.0) -> Cover:
    """Check ``data`` as a cover image and return it; :class:`CoverError` says what is wrong otherwise.

    Refused: anything but bytes, empty data, more than :data:`MAX_COVER_BYTES`, anything but JPEG or PNG
    (by magic bytes), a header without dimensions, more than :data:`MAX_COVER_SIDE` pixels on a side,
    and an image that ffmpeg cannot decode without error (truncated or corrupt data).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CoverError("cover_not_image", f"the cover must be image bytes, got {type(data).__name__}")
    raw = bytes(data)
    if not raw:
        raise CoverError("cover_empty", "the cover image is empty (0 bytes)")
    if len(raw) > MAX_COVER_BYTES:
        raise CoverError(
            "cover_too_large",
            f"the cover image is {len(raw)} bytes; at most {MAX_COVER_BYTES} bytes are accepted",
        )
    if raw.startswith(_JPEG_MAGIC):
        mime, header = "image/jpeg", _jpeg_header(raw)
    elif raw.startswith(_PNG_MAGIC):
        mime, header = "image/png", _png_header(raw)
    else:
        raise CoverError("cover_not_image", "the cover is not a JPEG or PNG image (by its first bytes)")
    if header is None:
        raise CoverError("cover_undecodable", f"the cover's {mime} header is damaged: no dimensions found")
    width, height, depth, colors = header
    if not (0 < width <= MAX_COVER_SIDE and 0 < height <= MAX_COVER_SIDE):
        raise CoverError(
            "cover_too_many_pixels",
            f"the cover is {width}x{height} pixels; at most {MAX_COVER_SIDE} pixels a side are accepted",
        )
    cover = Cover(raw, mime, width, height, depth, colors)
    _check_decodes(cover, timeout)
    return cover


def _jpeg_header(data: bytes) -> tuple[int, int, int, int] | None:
    """(width, height, bits per pixel, 0) from the first start-of-frame segment, or None."""
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # segments without a length
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, or entropy-coded data before any frame header
            return None
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if marker in _JPEG_SOF:
            if pos + 10 > len(data) or length < 8:
                return None
            precision, height, width, components = struct.unpack_from(">BHHB", data, pos + 4)
            return width, height, precision * components, 0
        pos += 2 + length
    return None


def _png_header(data: bytes) -> tuple[int, int, int, int] | None:
    """(width, height, bits per pixel, palette size) from IHDR (and PLTE), or None."""
    if len(data) < 33 or data[12:16] != b"IHDR":
        return None
    width, height, bit_depth, color_type = struct.unpack_from(">IIBB", data, 16)
    channels = _PNG_CHANNELS.get(color_type)
    if channels is None:
        return None
    colors = 0
    if color_type == 3:
        pos = 8
        while pos + 8 <= len(data):
            length, kind = struct.unpack_from(">I4s", data, pos)
            if kind == b"PLTE":
                colors = length // 3
                break
            if kind == b"IDAT":
                break
            pos += 12 + length
    return width, height, bit_depth * channels, colors


def as_jpeg(cover: Cover, timeout: float = 30.0) -> Cover:
    """The cover as JPEG: itself when it is one, else the image re-encoded (transparent areas on white), for
    the places that name it ``cover.jpg`` (the library layout, Audiobookshelf)."""
    if cover.mime_type == "image/jpeg":
        return cover
    white = f"color=white:s={cover.width}x{cover.height}[bg]"  # behind the image: transparency stays white
    args = [
        *("-filter_complex", f"{white};[bg][0:v]overlay=format=auto:shortest=1,format=yuvj444p"),
        *("-frames:v", "1", "-q:v", "2", "-f", "image2pipe", "-c:v", "mjpeg", "pipe:1"),
    ]
    data = _ffmpeg_image(cover, [], args, timeout, "converted to JPEG")
    if not data.startswith(_JPEG_MAGIC):
        raise CoverError("cover_undecodable", "the cover could not be converted to JPEG (no JPEG came out)")
    return Cover(data, "image/jpeg", cover.width, cover.height, 24, 0)


def _check_decodes(cover: Cover, timeout: float) -> None:
    strict = ["-err_detect", "explode", "-max_pixels", str(MAX_COVER_SIDE * MAX_COVER_SIDE)]
    _ffmpeg_image(cover, strict, ["-frames:v", "1", "-f", "null", "-"], timeout, "decoded")


def _ffmpeg_image(cover: Cover, before: list[str], after: list[str], timeout: float, done: str) -> bytes:
    """ffmpeg's output for the cover read from stdin (``before``: input options, ``after``: the rest);
    :class:`CoverError` naming what could not be ``done`` and ffmpeg's first complaint otherwise."""
    cmd = [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-nostdin", *before]
    cmd += ["-f", cover.ffmpeg_format, "-i", "pipe:0", *after]
    try:
        proc = subprocess.run(cmd, input=cover.data, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise CoverError(
            "cover_undecodable", f"the cover took over {timeout:g} seconds to be {done}"
        ) from exc
    if proc.returncode != 0:
        lines = _LOG_PREFIX.sub("", proc.stderr.decode("utf-8", "replace")).strip().splitlines()
        reason = lines[0] if lines else f"exit status {proc.returncode}"
        raise CoverError("cover_undecodable", f"the cover image could not be {done} ({reason})")
    return bytes(proc.stdout)
