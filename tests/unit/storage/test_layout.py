"""The on-disk layout (worker/storage/layout.py): server-generated names, every path confined under the
data root, symlinks out of it refused."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from worker.storage.layout import Layout, UnsafePath, confine
from worker.voices.store import cache_key

SHA_A = hashlib.sha256(b"first recording").hexdigest()


def test_confine_returns_resolved_paths_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "voices" / "a").mkdir(parents=True)
    assert confine(root, root / "voices" / "a" / "x.safetensors") == root.resolve() / "voices/a/x.safetensors"
    # ".." that stays inside is fine, and comes back normalised.
    assert confine(root, root / "voices" / ".." / "voices" / "a") == root.resolve() / "voices" / "a"
    # A symlink inside the root that points inside the root is fine too.
    (root / "link").symlink_to(root / "voices" / "a")
    assert confine(root, root / "link" / "p") == root.resolve() / "voices" / "a" / "p"


@pytest.mark.parametrize(
    "escape",
    [
        lambda root: root / ".." / "elsewhere",
        lambda root: root / "voices" / ".." / ".." / "data-evil" / "p.safetensors",
        lambda root: Path("/etc/passwd"),
        lambda root: root.parent / "outside.safetensors",
        lambda root: root / "voices" / "out" / "p.safetensors",  # "out" is a symlink leaving the root
        lambda root: root / "voices" / "secret.safetensors",  # a file symlink leaving the root
    ],
    ids=["dotdot", "dotdot-sibling-prefix", "absolute", "absolute-sibling", "dir-symlink", "file-symlink"],
)
def test_confine_refuses_paths_that_escape_the_root(tmp_path: Path, escape: Callable[[Path], Path]) -> None:
    root = tmp_path / "data"
    (root / "voices").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "voices" / "out").symlink_to(tmp_path / "outside", target_is_directory=True)
    (root / "voices" / "secret.safetensors").symlink_to(tmp_path / "outside" / "secret")
    with pytest.raises(UnsafePath, match="outside the data root"):
        confine(root, escape(root))


def test_prompt_path_is_a_server_generated_name_in_the_voice_folder(tmp_path: Path) -> None:
    voice_id = uuid.uuid4()
    key = cache_key("espeak", "1.0", SHA_A, "hello")
    path = Layout.under(tmp_path).prompt(voice_id, key)
    assert path.parent == tmp_path.resolve() / "voices" / str(voice_id)
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    assert path.name == f"prompt-{digest}.safetensors"
    assert Layout.under(tmp_path).prompt(voice_id, key) == path  # deterministic
    assert Layout.under(tmp_path).prompt(voice_id, cache_key("espeak", "1.1", SHA_A, "hello")) != path
    other = Layout.under(tmp_path).prompt(uuid.uuid4(), key)
    assert other.name == path.name
    assert other.parent != path.parent
    # A key full of path syntax still yields a flat file name in the voice's folder.
    odd = Layout.under(tmp_path).prompt(voice_id, "../../../etc/passwd")
    assert odd.parent == path.parent


def test_each_build_gets_its_own_prompt_file(tmp_path: Path) -> None:
    voice_id = uuid.uuid4()
    key = cache_key("espeak", "1.0", SHA_A, "hello")
    plain = Layout.under(tmp_path).prompt(voice_id, key)
    first = Layout.under(tmp_path).prompt(voice_id, key, "0123456789abcdef0123456789abcdef")
    second = Layout.under(tmp_path).prompt(voice_id, key, "fedcba9876543210fedcba9876543210")
    assert first.parent == second.parent == plain.parent
    assert first.name == f"{plain.stem}-0123456789abcdef.safetensors"
    assert len({plain, first, second}) == 3


@pytest.mark.parametrize("build", ["../../x", "a/b", "-", "ab cd", "tok\x00en"])
def test_prompt_path_refuses_a_build_token_that_is_not_alphanumeric(tmp_path: Path, build: str) -> None:
    with pytest.raises(UnsafePath, match="letters and digits"):
        Layout.under(tmp_path).prompt(uuid.uuid4(), "espeak/1/a/b", build)


def test_prompt_path_refuses_a_voice_folder_that_is_a_symlink_out_of_the_root(tmp_path: Path) -> None:
    root, voice_id = tmp_path / "data", uuid.uuid4()
    (root / "voices").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / "voices" / str(voice_id)).symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(UnsafePath, match="outside the data root"):
        Layout.under(root).prompt(voice_id, "espeak/1/a/b")


@pytest.mark.parametrize(
    "bad", ["../../etc", "not-a-uuid", "", "/tmp/x", "5c0ffee0-0000-4000-8000-000000000001/.."]
)
def test_prompt_path_refuses_a_voice_id_that_is_not_a_uuid(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="not an id"):
        Layout.under(tmp_path).prompt(bad, "espeak/1/a/b")
    assert not (tmp_path / "voices").exists()


def test_job_files_are_named_from_ids_and_tokens_only(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    job_id = uuid.uuid4()
    chunk = layout.chunk_audio(job_id, 7, "abc123")
    assert chunk == tmp_path.resolve() / "jobs" / str(job_id) / "chunks" / "000007-abc123.wav"
    assert layout.output(job_id, "tok", "mp3") == tmp_path.resolve() / "jobs" / str(job_id) / "output-tok.mp3"
    for bad_token in ("../x", "a/b", "", "t\x00"):
        with pytest.raises(UnsafePath):
            layout.chunk_audio(job_id, 1, bad_token)
        with pytest.raises(UnsafePath):
            layout.output(job_id, bad_token, "mp3")
    with pytest.raises(UnsafePath):
        layout.output(job_id, "tok", "mp3/../../x")
    with pytest.raises(UnsafePath, match="not an id"):
        layout.job_dir("../../etc")


def test_references_get_a_fresh_name_each_time(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path)
    voice_id = uuid.uuid4()
    first, second = layout.new_reference(voice_id), layout.new_reference(voice_id)
    assert first != second
    assert first.parent == second.parent == layout.voice_dir(voice_id)
