"""The library layout (worker.jobs.library) and sealed tokens (worker.sealed): names that stay one path
component whatever the metadata says, and tokens that open only with the key that sealed them."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from worker.jobs.library import MAX_NAME_BYTES, LibraryBook, safe_name, tag_values, write_zip
from worker.sealed import SealError, seal, unseal

KEY = "k" * 40


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Keeper", "The Keeper"),
        ("../../etc/passwd", "_.._etc_passwd"),
        ("..", "fallback"),
        ('a/b\\c:d*e?f"g<h>i|j', "a_b_c_d_e_f_g_h_i_j"),
        ("line\r\nbreak\x00nul\x1b[31m", "line__break_nul_[31m"),
        ("  .hidden. ", "hidden"),
        ("", "fallback"),
        ("Cafe\u0301", "Caf\u00e9"),  # NFC
    ],
)
def test_names_are_single_path_components(text: str, expected: str) -> None:
    assert safe_name(text, "fallback") == expected


def test_long_names_are_cut_to_the_byte_limit_on_a_character_boundary() -> None:
    name = safe_name("é" * 500, "x")
    assert len(name.encode()) <= MAX_NAME_BYTES
    assert set(name) == {"é"}
    book = LibraryBook(title="ü" * 400, author="a")
    assert len(book.book_name(".m4b").encode()) <= MAX_NAME_BYTES
    assert book.book_name(".m4b").endswith(".m4b")


def test_folders_follow_audiobookshelfs_upload_layout() -> None:
    full = LibraryBook(title="Wizard", author="Terry", series="Truth", series_index=1.5)
    assert full.folders == ["Terry", "Truth", "Vol 1.5 - Wizard"]
    assert LibraryBook(title="Wizard", author="Terry", series="Truth", series_index=3).title_folder == (
        "Vol 3 - Wizard"
    )
    assert LibraryBook(title="Wizard", author="Terry").folders == ["Terry", "Wizard"]
    assert LibraryBook(title="Wizard", series="Truth", series_index=2).folders == ["Wizard"], (
        "a series only under an author, as Audiobookshelf places it"
    )
    assert LibraryBook(title="../x", author="..").folders == ["_x"]


def test_the_zip_holds_only_what_the_book_has(tmp_path: Path) -> None:
    audio = tmp_path / "book.mp3"
    audio.write_bytes(b"ID3 not really audio")
    book = LibraryBook.of("Title", {"author": "A", "narrator": "N", "year": 2020})
    size = write_zip(book, audio, ".mp3", None, tmp_path / "out.zip")
    with zipfile.ZipFile(io.BytesIO((tmp_path / "out.zip").read_bytes())) as archive:
        assert archive.namelist() == ["A/Title/Title.mp3", "A/Title/reader.txt"]
        assert archive.read("A/Title/Title.mp3") == audio.read_bytes()
    assert size == (tmp_path / "out.zip").stat().st_size


def test_library_keys_are_not_tags() -> None:
    assert tag_values({"author": "A", "series": "S", "series_index": 1}) == {"author": "A"}


def test_a_sealed_token_opens_only_with_its_key_and_hides_the_token() -> None:
    sealed = seal(KEY, "token-123")
    assert "token-123" not in sealed
    assert seal(KEY, "token-123") != sealed  # a fresh IV each time
    assert unseal(KEY, sealed) == "token-123"
    with pytest.raises(SealError):
        unseal("j" * 40, sealed)
    with pytest.raises(SealError):
        unseal(KEY, sealed[:-4] + "AAAA")
    with pytest.raises(SealError, match="TOME_SECRET_KEY"):
        seal("", "token")
