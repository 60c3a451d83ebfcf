"""Files written without their own fsyncs (a render task's chunks) and made durable together."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

from worker.audio import read_wav, write_wav_atomic
from worker.storage.atomic import TEMP_SUFFIX, sync_files


def _batch(folder: Path, count: int) -> list[Path]:
    paths = []
    for n in range(count):
        path = folder / f"{n:03d}.wav"
        write_wav_atomic(path, np.full(800, 0.01 * (n + 1), dtype=np.float32), 8000, durable=False)
        paths.append(path)
    return paths


def test_a_batch_written_without_fsyncs_is_complete_and_syncs_together(tmp_path: Path) -> None:
    paths = _batch(tmp_path, 11)  # more files than fsync threads
    assert not [p for p in os.listdir(tmp_path) if p.endswith(TEMP_SUFFIX)]  # renamed, as ever
    sync_files(paths)
    for n, path in enumerate(paths):
        samples, rate = read_wav(path)
        assert rate == 8000
        assert len(samples) == 800
        assert np.allclose(samples, 0.01 * (n + 1), atol=1e-4)
    sync_files([])  # nothing to do


def test_a_file_that_is_gone_is_an_error_not_a_silent_success(tmp_path: Path) -> None:
    paths = _batch(tmp_path, 3)
    paths[1].unlink()
    with pytest.raises(FileNotFoundError):
        sync_files(paths)
    with pytest.raises(FileNotFoundError):
        sync_files([paths[1]])


def _sync_in_child(folder: str) -> None:
    sync_files(_batch(Path(folder), 4))


def test_a_forked_child_syncs_with_its_own_threads(tmp_path: Path) -> None:
    parent_folder = tmp_path / "parent"
    parent_folder.mkdir()
    sync_files(_batch(parent_folder, 4))  # the parent's fsync threads exist now
    child_folder = tmp_path / "child"
    child_folder.mkdir()
    child = multiprocessing.get_context("fork").Process(target=_sync_in_child, args=(str(child_folder),))
    child.start()
    child.join(60)
    assert child.exitcode == 0  # the parent's pool, copied by the fork, has no threads: a new one
    assert len(list(child_folder.glob("*.wav"))) == 4
