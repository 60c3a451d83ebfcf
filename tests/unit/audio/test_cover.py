"""load_cover: JPEG or PNG only, bounded, decodable; every refusal says why. as_jpeg: a PNG as JPEG."""

from __future__ import annotations

import base64
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from worker.audio.binary import ffmpeg_exe
from worker.audio.cover import MAX_COVER_BYTES, MAX_COVER_SIDE, Cover, CoverError, as_jpeg, load_cover


def image(tmp_path: Path, codec: str, size: str = "320x200", pix_fmt: str | None = None) -> bytes:
    path = tmp_path / f"img.{codec}"
    cmd = [
        ffmpeg_exe(),
        "-loglevel",
        "error",
        "-y",
        "-f",
        "lavfi",
        "-i",
        f"testsrc=s={size}",
        "-frames:v",
        "1",
    ]
    cmd += ["-pix_fmt", pix_fmt] if pix_fmt else []
    subprocess.run([*cmd, "-c:v", codec, "-f", "image2", str(path)], check=True)
    return path.read_bytes()


def png_header_only(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk


def test_jpeg(tmp_path: Path) -> None:
    data = image(tmp_path, "mjpeg")
    cover = load_cover(data)
    assert cover == Cover(data, "image/jpeg", 320, 200, 24, 0)
    assert cover.ffmpeg_format == "jpeg_pipe"


def test_png_rgb_and_palette(tmp_path: Path) -> None:
    data = image(tmp_path, "png", "64x48")
    assert load_cover(data) == Cover(data, "image/png", 64, 48, 24, 0)
    indexed = load_cover(image(tmp_path, "png", "64x48", "pal8"))
    assert (indexed.width, indexed.height, indexed.depth) == (64, 48, 8)
    assert 0 < indexed.colors <= 256
    assert load_cover(bytearray(data)).data == data


def test_picture_block_is_a_flac_picture(tmp_path: Path) -> None:
    cover = load_cover(image(tmp_path, "png", "64x48"))
    block = cover.picture_block()
    kind, mime_len = struct.unpack_from(">II", block)
    assert (kind, block[8 : 8 + mime_len]) == (3, b"image/png")
    rest = block[8 + mime_len :]
    assert struct.unpack_from(">IIIIII", rest) == (0, 64, 48, 24, 0, len(cover.data))
    assert rest[24:] == cover.data
    assert base64.b64decode(cover.picture_comment()) == block


@pytest.mark.parametrize(
    ("data", "code", "match"),
    [
        (b"", "cover_empty", "empty"),
        (b"GIF89a" + b"\0" * 100, "cover_not_image", "not a JPEG or PNG"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "cover_not_image", "not a JPEG or PNG"),
        (b"\xff\xd8\xff" + b"\0" * MAX_COVER_BYTES, "cover_too_large", f"at most {MAX_COVER_BYTES} bytes"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "cover_undecodable", "header is damaged"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "cover_undecodable", "header is damaged"),
        (png_header_only(MAX_COVER_SIDE + 1, 10), "cover_too_many_pixels", f"{MAX_COVER_SIDE + 1}x10"),
        (png_header_only(10, 60_000), "cover_too_many_pixels", "at most 6000 pixels a side"),
        (png_header_only(0, 10), "cover_too_many_pixels", "0x10"),
        (png_header_only(10, 10), "cover_undecodable", "could not be decoded"),
    ],
)
def test_refusals_name_the_problem(data: bytes, code: str, match: str) -> None:
    with pytest.raises(CoverError, match=match) as info:
        load_cover(data)
    assert info.value.code == code
    assert isinstance(info.value, ValueError)


def test_damaged_images_are_refused(tmp_path: Path) -> None:
    jpeg = image(tmp_path, "mjpeg")
    with pytest.raises(CoverError, match="could not be decoded") as info:
        load_cover(jpeg[: len(jpeg) // 2])
    assert info.value.code == "cover_undecodable"
    assert "0x" not in info.value.message  # ffmpeg's log prefixes are stripped
    png = bytearray(image(tmp_path, "png"))
    png[len(png) // 2] ^= 0xFF
    with pytest.raises(CoverError, match="could not be decoded"):
        load_cover(bytes(png))


def test_not_bytes() -> None:
    with pytest.raises(CoverError, match="must be image bytes, got str"):
        load_cover("cover.jpg")  # type: ignore[arg-type]


def test_as_jpeg_keeps_a_jpeg_and_converts_a_png_with_transparency_on_white(tmp_path: Path) -> None:
    jpeg = load_cover(image(tmp_path, "mjpeg"))
    assert as_jpeg(jpeg) is jpeg
    # a 64x32 PNG, fully transparent on its left half, opaque red on its right half
    png = subprocess.run(
        [ffmpeg_exe(), "-loglevel", "error", "-f", "lavfi", "-i", "color=c=red@1.0:s=64x32,format=rgba",
         "-vf", "geq=r='255':g='0':b='0':a='if(lt(X,32),0,255)'", "-frames:v", "1", "-f", "image2pipe",
         "-c:v", "png", "-"],
        capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    converted = as_jpeg(load_cover(png))
    assert converted.mime_type == "image/jpeg"
    assert (converted.width, converted.height) == (64, 32)
    again = load_cover(converted.data)  # a real, decodable JPEG of the same size
    assert (again.mime_type, again.width, again.height) == ("image/jpeg", 64, 32)
    rgb = subprocess.run(
        [ffmpeg_exe(), "-loglevel", "error", "-f", "jpeg_pipe", "-i", "-", "-f", "rawvideo", "-pix_fmt",
         "rgb24", "-"],
        input=converted.data, capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    left, right = (
        rgb[(16 * 64 + 8) * 3 : (16 * 64 + 8) * 3 + 3],
        rgb[(16 * 64 + 56) * 3 : (16 * 64 + 56) * 3 + 3],
    )
    assert min(left) > 230  # transparent: white, not black
    assert right[0] > 200 > max(right[1], right[2]) + 100  # opaque red stays red
