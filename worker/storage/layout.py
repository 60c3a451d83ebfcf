"""Where every file of Tome lives under the data directory (pure module).

One place for the on-disk layout, so that the API, the workers and the sweeper agree on it::

    <root>/tome.db                               embedded SQLite database
    <root>/broker/{queue,control}/               embedded Celery broker (filesystem transport)
    <root>/uploads/upload-*                      uploads being received (removed when decoded)
    <root>/voices/<voice id>/reference-*.wav     a voice's reference recording (decoded, mono 16-bit)
    <root>/voices/<voice id>/prompt-*.safetensors its speaker prompts, one file per build
    <root>/jobs/<job id>/chunks/<seq>-<token>.wav a chunk's audio, one file per attempt
    <root>/jobs/<job id>/output-<token>.<format>  the stitched output, one file per stitch
    <root>/jobs/<job id>/files-<token>/<name>     chapter files, ZIP, subtitles, manifest, ACX report,
                                                 read-along EPUB
    <root>/jobs/<job id>/script-<digest>.epub     an EPUB script kept for its read-along (webapi.jobs)

Every name below the root is generated here from ids, tokens and hashes, never from user input, and
:func:`confine` refuses anything that would resolve outside the root (a symlinked folder included).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

_FILE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,80}\.[a-z0-9]{1,8}")


class UnsafePath(ValueError):
    """A path would leave the data root, or a name part is not what the layout generates."""


def confine(root: Path, path: Path) -> Path:
    """``path`` resolved, refusing anything that escapes ``root``."""
    resolved_root = root.resolve()
    resolved = path.resolve()
    if not resolved.is_relative_to(resolved_root):
        raise UnsafePath(f"path {path} is outside the data root")
    return resolved


def _uuid(value: uuid.UUID | str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError as exc:
        raise UnsafePath(f"{value!r} is not an id") from exc


def _token(value: str, length: int | None = None) -> str:
    part = value[:length] if length else value
    if not part or not part.isascii() or not part.isalnum():
        raise UnsafePath("a token in a file name is ASCII letters and digits only")
    return part


@dataclass(frozen=True)
class Layout:
    """The layout under one data directory (resolved once; every method returns a confined path)."""

    root: Path

    @classmethod
    def under(cls, data_dir: Path) -> Layout:
        return cls(data_dir.resolve())

    def _inside(self, *parts: str) -> Path:
        return confine(self.root, self.root.joinpath(*parts))

    # -- the database, the broker, uploads -------------------------------------------------------------

    @property
    def database(self) -> Path:
        return self.root / "tome.db"

    @property
    def broker(self) -> Path:
        return self.root / "broker"

    @property
    def uploads(self) -> Path:
        return self.root / "uploads"

    @property
    def beat_schedule(self) -> Path:
        return self.root / "celerybeat-schedule"

    @property
    def admin_key(self) -> Path:
        return self.root / "admin.key"

    @property
    def secret_key(self) -> Path:
        return self.root / "secret.key"

    # -- voices ----------------------------------------------------------------------------------------

    @property
    def voices(self) -> Path:
        return self.root / "voices"

    def voice_dir(self, voice_id: uuid.UUID | str) -> Path:
        return self._inside("voices", _uuid(voice_id))

    def new_reference(self, voice_id: uuid.UUID | str) -> Path:
        """A fresh name for a voice's reference: a re-upload never overwrites a file a build may read."""
        return self.voice_dir(voice_id) / f"reference-{uuid.uuid4().hex[:12]}.wav"

    def new_embedding(self, voice_id: uuid.UUID | str) -> Path:
        """A fresh name for the speaker-embedding file of a voice made from one (instead of a recording)."""
        return self.voice_dir(voice_id) / f"embedding-{uuid.uuid4().hex[:12]}.safetensors"

    def prompt(self, voice_id: uuid.UUID | str, key: str, build: str = "") -> Path:
        """``voices/<uuid>/prompt-<sha of key>[-<build>].safetensors``.

        ``build`` (the build's token) gives every build its own file, so a build that is thrown away can
        delete its file without touching the file of another build of the same key.
        """
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
        suffix = f"-{_token(build, 16)}" if build else ""
        return self._inside("voices", _uuid(voice_id), f"prompt-{digest}{suffix}.safetensors")

    # -- jobs ------------------------------------------------------------------------------------------

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    def job_dir(self, job_id: uuid.UUID | str) -> Path:
        return self._inside("jobs", _uuid(job_id))

    def chunk_audio(self, job_id: uuid.UUID | str, seq: int, token: str) -> Path:
        """One file per attempt: an attempt that lost its claim removes its own file, never the winner's."""
        return self.job_dir(job_id) / "chunks" / f"{int(seq):06d}-{_token(token)}.wav"

    def output(self, job_id: uuid.UUID | str, token: str, fmt: str) -> Path:
        return self.job_dir(job_id) / f"output-{_token(token)}.{_token(fmt)}"

    def job_file(self, job_id: uuid.UUID | str, token: str, name: str) -> Path:
        """One of a finished job's files beside the book (chapter files, subtitles, report), one folder
        per stitch; ``name`` is generated by the stitcher (lower-case letters, digits, ``-`` and ``.``)."""
        if not _FILE_NAME.fullmatch(name):
            raise UnsafePath(f"{name!r} is not a file name the stitcher makes")
        return self.job_files(job_id, token) / name

    def job_files(self, job_id: uuid.UUID | str, token: str) -> Path:
        """The folder of one stitch's files beside the book."""
        return self.job_dir(job_id) / f"files-{_token(token)}"
