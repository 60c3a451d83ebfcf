"""Decoding and checking an uploaded reference recording, in helper processes of the API process.

The analysis (decode under the caps, the signal checks, the mono 16-bit WAV written) is bounded by the
caps on bytes, seconds and sample rate, but it is CPU work: on the API's event loop (gunicorn's gevent
worker) it would stall every other request of that process while it runs, and several uploads at once
would stall them for the sum. So :class:`AnalyserPool` runs it in a few long-lived helper processes
(``python -m worker.voices.analysis``, one JSON line in and one out per upload), started on first use,
at most ``size`` at once, each answer awaited with ``select`` (which gevent makes cooperative) within a
deadline; a helper past its deadline is killed and replaced. The loop only copies bytes and waits.

:func:`analyse` is the analysis itself (also what the helper runs); its answer is JSON: ``{"ok": {...}}``
with what the voice row records, ``{"refused": {...}}`` for a recording the checks refuse (a signal that
is not speech, unless forced; silence), ``{"invalid": {...}}`` for a file that is not acceptable audio.
No Flask or Celery imports.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from worker.audio import AudioError, AudioLimits, decode_reference, write_wav_atomic
from worker.qa.reference import NOT_SPEECH, check_reference

_ROOT = Path(__file__).resolve().parents[2]  # where ``worker`` is importable from
_MAX_ANSWER = 1 << 20
QUEUE_FACTOR = 4


class AnalysisUnavailable(Exception):
    """No helper answered in time (all busy past the deadline, or the helper hung or died)."""


def analyse(upload: str, dest: str, limits: dict[str, Any], force: bool) -> dict[str, Any]:
    """Decode ``upload`` under ``limits`` (:class:`AudioLimits` fields), check its signal, and write it as
    mono 16-bit WAV at ``dest`` unless refused. ``force`` keeps a recording found not to be speech (the
    finding then comes back as a warning)."""
    try:
        decoded = decode_reference(upload, AudioLimits(**{**limits, "formats": frozenset(limits["formats"])}))
    except AudioError as exc:
        return {"invalid": {"code": exc.code, "message": exc.message}}
    report = check_reference(decoded.samples, decoded.sample_rate)
    kept = report.refusal is not None and report.refusal.code == NOT_SPEECH and force
    if report.refusal is not None and not kept:
        return {"refused": report.refusal.to_json()}
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    write_wav_atomic(Path(dest), decoded.samples, decoded.sample_rate)
    data = Path(dest).read_bytes()
    found = (report.refusal, *report.warnings) if kept and report.refusal is not None else report.warnings
    return {
        "ok": {
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "duration": round(decoded.duration, 3),
            "sample_rate": decoded.sample_rate,
            "warnings": [finding.to_json() for finding in found],
        }
    }


def limits_json(limits: AudioLimits) -> dict[str, Any]:
    return {**asdict(limits), "formats": sorted(limits.formats)}


class AnalyserPool:
    """At most ``size`` analyses at once, each in a helper process: an upload waits at most
    ``QUEUE_FACTOR * timeout`` seconds for a free helper (holding only its greenlet), then its analysis
    is answered within ``timeout`` seconds (a new helper's start included), or
    :class:`AnalysisUnavailable`."""

    def __init__(self, size: int, timeout: float) -> None:
        self.size, self.timeout = size, timeout
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    def run(self, upload: Path, dest: Path, limits: AudioLimits, force: bool) -> dict[str, Any]:
        waiting = QUEUE_FACTOR * self.timeout
        if not self._slots.acquire(timeout=waiting):
            raise AnalysisUnavailable(f"every reference analyser stayed busy for {waiting:g} s")
        deadline = time.monotonic() + self.timeout
        try:
            child = self._take()
            request = {
                "upload": str(upload),
                "dest": str(dest),
                "limits": limits_json(limits),
                "force": force,
            }
            try:
                answer = _ask(child, request, deadline)
            except BaseException:
                _kill(child)
                raise
            with self._lock:
                self._idle.append(child)
            return answer
        finally:
            self._slots.release()

    def close(self) -> None:
        """End the idle helpers (their input closes: they exit)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            _kill(child)

    def _take(self) -> subprocess.Popen[bytes]:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.poll() is None:
                    return child
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])),
        }
        env.setdefault("OMP_NUM_THREADS", "1")
        return subprocess.Popen(
            [sys.executable, "-m", "worker.voices.analysis"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=_ROOT,
            env=env,
        )


def _ask(child: subprocess.Popen[bytes], request: dict[str, Any], deadline: float) -> dict[str, Any]:
    assert child.stdin is not None
    assert child.stdout is not None
    os.write(child.stdin.fileno(), json.dumps(request).encode() + b"\n")
    out = child.stdout.fileno()
    answer = b""
    while not answer.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AnalysisUnavailable("the reference analysis did not finish in time")
        ready, _, _ = select.select([out], [], [], left)
        if not ready:
            continue
        block = os.read(out, 65536)
        if not block:
            raise AnalysisUnavailable(f"the reference analyser ended (exit status {child.wait()})")
        answer += block
        if len(answer) > _MAX_ANSWER:
            raise AnalysisUnavailable("the reference analyser answered too much")
    result: dict[str, Any] = json.loads(answer)
    return result


def _kill(child: subprocess.Popen[bytes]) -> None:
    if child.stdin is not None:
        child.stdin.close()
    if child.poll() is None:
        child.kill()
    child.wait()
    if child.stdout is not None:
        child.stdout.close()


_pool: tuple[int, AnalyserPool] | None = None


def process_pool(size: int, timeout: float) -> AnalyserPool:
    """This process's pool (a forked child, such as a gunicorn worker, starts with its own)."""
    global _pool  # noqa: PLW0603 - one pool per process, by design
    if _pool is not None and _pool[0] == os.getpid() and (_pool[1].size, _pool[1].timeout) != (size, timeout):
        _pool[1].close()
        _pool = None
    if _pool is None or _pool[0] != os.getpid():
        _pool = (os.getpid(), AnalyserPool(size, timeout))
        atexit.register(_pool[1].close)
    return _pool[1]


def main() -> None:
    """The helper: one JSON request a line on stdin, one JSON answer a line on stdout, until stdin ends."""
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            answer = analyse(request["upload"], request["dest"], request["limits"], bool(request["force"]))
        except Exception:  # an unreadable file is the upload's problem, not the helper's end
            answer = {"invalid": {"code": "audio_undecodable", "message": "the audio file cannot be decoded"}}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
