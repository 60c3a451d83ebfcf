"""Fixtures and helpers of the speaker-prompt cache tests: a Runtime on a migrated SQLite database in a temp
dir, and voices inserted the way ``webapi/voices.py`` stores them (a reference WAV under a new,
server-generated name in ``<data_dir>/voices/<uuid>/``, the row pending)."""

from __future__ import annotations

import functools
import hashlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from sqlalchemy import update

from models import CacheStatus, Voice, unit_of_work, utcnow
from tests.support.apps import close_engine, migrate
from tests.support.audio import TRANSCRIPT, speak
from worker import counters
from worker.audio import write_wav_atomic
from worker.config import load_settings
from worker.runtime import Runtime
from worker.voices import prompts as voice_prompts

Samples = npt.NDArray[np.float32]


def make_runtime(data_dir: Path) -> Runtime:
    """A Runtime on a fresh SQLite database at head, with its data under ``data_dir``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = load_settings({}, data_dir=data_dir)
    migrate(settings.sqlalchemy_url)
    return Runtime(settings)


def voice_folder(rt: Runtime, voice_id: uuid.UUID) -> Path:
    return rt.settings.storage.data_dir.resolve() / "voices" / str(voice_id)


def write_reference(rt: Runtime, voice_id: uuid.UUID, samples: Samples, sample_rate: int) -> tuple[Path, str]:
    """A reference WAV under a new name in the voice's folder (as the API keeps it) and its SHA-256."""
    folder = voice_folder(rt, voice_id)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"reference-{uuid.uuid4().hex[:12]}.wav"
    write_wav_atomic(path, samples, sample_rate)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def insert_voice(
    rt: Runtime,
    samples: Samples,
    sample_rate: int,
    ref_text: str,
    *,
    name: str | None = None,
    owner: str = "alice",
    language: str = "en",
) -> uuid.UUID:
    """Insert a live, pending voice with its reference WAV written by ``write_wav_atomic``."""
    voice_id = uuid.uuid4()
    path, sha = write_reference(rt, voice_id, samples, sample_rate)
    with unit_of_work(rt.sessions) as session:
        session.add(
            Voice(
                id=voice_id,
                owner=owner,
                name=name or f"voice-{voice_id.hex[:8]}",
                language=language,
                ref_text=ref_text,
                audio_path=str(path),
                audio_sha256=sha,
                audio_duration=round(samples.size / sample_rate, 3),
                audio_sample_rate=sample_rate,
            )
        )
    return voice_id


def replace_reference(
    rt: Runtime, voice_id: uuid.UUID, samples: Samples, sample_rate: int, ref_text: str
) -> Path:
    """What ``PUT /v1/voices/{id}`` does: a new reference file, the row pointed at it and reset to pending
    (lease cleared), then the old reference removed. Returns the new reference path."""
    path, sha = write_reference(rt, voice_id, samples, sample_rate)
    with unit_of_work(rt.sessions) as session:
        voice = session.get(Voice, voice_id)
        assert voice is not None
        assert voice.deleted_at is None
        old_audio = voice.audio_path
        voice.audio_path, voice.audio_sha256 = str(path), sha
        voice.audio_duration, voice.audio_sample_rate = round(samples.size / sample_rate, 3), sample_rate
        voice.ref_text = ref_text
        voice.cache_status, voice.cache_error, voice.cache_lease_until = CacheStatus.PENDING.value, None, None
    Path(old_audio).unlink(missing_ok=True)
    return path


def delete_voice(rt: Runtime, voice_id: uuid.UUID) -> None:
    """What ``DELETE /v1/voices/{id}`` does: mark the row deleted, then remove the voice's folder."""
    with unit_of_work(rt.sessions) as session:
        session.execute(update(Voice).where(Voice.id == voice_id).values(deleted_at=utcnow()))
    shutil.rmtree(voice_folder(rt, voice_id), ignore_errors=True)


def get_voice(rt: Runtime, voice_id: uuid.UUID) -> Voice:
    with rt.sessions() as session:
        voice = session.get(Voice, voice_id)
        assert voice is not None
        return voice


def counter(rt: Runtime, name: str) -> float:
    with rt.sessions() as session:
        return counters.read_all(session).get((name, rt.engine().name), 0.0)


def prompt_files(rt: Runtime, voice_id: uuid.UUID) -> list[Path]:
    folder = voice_folder(rt, voice_id)
    return sorted(folder.glob("prompt-*.safetensors")) if folder.is_dir() else []


@functools.cache
def spoken(text: str = TRANSCRIPT, f0_hz: float | None = None) -> tuple[Samples, int]:
    """espeak reading ``text`` (at a median pitch of ``f0_hz`` if given); cached, read-only."""
    prompt = None if f0_hz is None else {"f0_median_hz": np.array([f0_hz], dtype=np.float32)}
    wave, rate = speak(text, prompt)
    samples: Samples = np.asarray(wave, dtype=np.float32)
    samples.flags.writeable = False
    return samples, rate


@pytest.fixture(autouse=True)
def fresh_process_lru() -> Iterator[None]:
    """The prompt LRU is per process and module-global: every test starts (and leaves) it empty."""
    voice_prompts._lru = None
    yield
    voice_prompts._lru = None


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = make_runtime(tmp_path / "var")
    yield runtime
    close_engine(runtime.db)


@pytest.fixture
def voice_id(rt: Runtime) -> uuid.UUID:
    """A live, pending voice reading the lighthouse transcript at espeak's default pitch."""
    samples, rate = spoken()
    return insert_voice(rt, samples, rate, TRANSCRIPT, name="Keeper")
