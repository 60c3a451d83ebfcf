"""Render tasks pulling other tasks' chunks into their running Qwen3-TTS batch (``TOME_QWEN3_PULL_CHUNKS``),
on and off, on the same jobs: chunks per wall second and slot occupancy.

Several owners' jobs (``--owners``, ``--chunks`` each, paragraphs of varied length so rows end at
different frames) on the tiny checkpoint (built here unless ``--model-dir``) run in this process through
the real task bodies (bench/inprocess.py: SQLite, the fair scheduler, claims and leases as in a worker),
one process and so one engine, as a GPU worker of one process renders. Occupancy is the frames the loop
made over its slot-steps (rows in flight times frames stepped, counted around the loop's driver), so an
idle slot in a step counts against it. Each mode starts from a fresh database with the engine warm. QA
is off (its checks and re-renders cost the same either way, and the tiny checkpoint's noise fails them).

``python -m bench.qwen3_pull [--model-dir DIR] [--owners 3] [--chunks 8] [--max-batch 8]
[--chunks-per-task 2] [--tasks-in-flight 2] [--json OUT]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from bench.inprocess import run_messages
from models import Chunk, ChunkStatus
from tests.support.apps import app_on, tome_of
from tests.support.audio import reference_wav
from tests.support.factories import submit_job, upload_voice
from webapi.cli import mint_key
from worker.config import load_settings
from worker.jobs.start import StartOutcome, start_job
from worker.voices.prompts import build_voice

_WORDS = (
    "The ferry left the harbour at dawn",
    "and nobody on deck said a word",
    "while the gulls circled the mast",
    "until the island rose out of the fog",
    "and the bell rang twice",
)


@dataclass
class Row:
    pull: bool
    chunks: int
    wall_s: float
    chunks_per_wall_s: float
    render_tasks: int
    loop_calls: int
    occupancy: float


@dataclass
class _Counts:
    calls: int = 0
    frames: int = 0
    slot_steps: int = 0


@contextlib.contextmanager
def _counting(counts: _Counts) -> Iterator[None]:
    """Count the loop's frames made and slot-steps run, around its driver (both runners' paths)."""
    from worker.engines.qwen3_loop import TalkerLoop

    original: Callable[..., Any] = TalkerLoop._drive

    def drive(self: Any, state: Any, take: Any, finish: Any, sink: Any, *rest: Any) -> Iterator[None]:
        counts.calls += 1

        def finished(key: Any, frames: Any) -> None:
            counts.frames += int(frames.shape[0])
            finish(key, frames)

        for _ in original(self, state, take, finished, sink, *rest):
            counts.slot_steps += int(state.slots)
            yield

    TalkerLoop._drive = drive  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        TalkerLoop._drive = original  # type: ignore[method-assign]


def _script(owner: int, chunks: int) -> str:
    """``chunks`` paragraphs of 1 to 5 clauses (rows of different lengths), none another owner's."""
    return "\n\n".join(
        f"Owner {owner}, part {n}: " + ", ".join(_WORDS[: 1 + (n * 7 + owner) % len(_WORDS)]) + "."
        for n in range(chunks)
    )


def run_mode(args: argparse.Namespace, model_dir: Path, folder: Path, pull: bool) -> Row:
    env = {
        "TOME_QWEN3_MODEL_DIR": str(model_dir),
        "TOME_QWEN3_DEVICE": "cpu",
        "TOME_QWEN3_MAX_NEW_TOKENS": str(args.frames),
        "TOME_QWEN3_MAX_BATCH": str(args.max_batch),
        "TOME_QWEN3_PULL_CHUNKS": "1" if pull else "0",
    }
    settings = load_settings(
        env,
        data_dir=folder / ("on" if pull else "off"),
        engine="qwen3-tts",
        chunks_per_task=args.chunks_per_task,
        render_tasks_in_flight=args.tasks_in_flight,
    )
    with app_on(settings) as app:
        client, rt = app.test_client(), tome_of(app).runtime
        audio, transcript = reference_wav(folder, "The old lighthouse keeper climbed the stairs.")
        jobs: list[uuid.UUID] = []
        for owner in range(args.owners):
            user = {"Authorization": f"Bearer {mint_key(app, owner=f'owner{owner}', name='b', admin=False)}"}
            voice = upload_voice(client, user, audio, name="narrator", ref_text=transcript)
            assert build_voice(rt, uuid.UUID(voice.json["id"])).value == "built"
            script = _script(owner, args.chunks)
            job = submit_job(
                client, user, "narrator", title=f"o{owner}", script=script, qa={"enabled": False}
            )
            jobs.append(uuid.UUID(job.json["id"]))
        rt.engine("qwen3-tts").synthesize([])  # loaded before the clock
        messages: list[tuple[str, list[Any]]] = []
        counts = _Counts()
        began = time.perf_counter()
        with _counting(counts):
            for job_id in jobs:
                outcome = start_job(rt, job_id, lambda name, a, *_: messages.append((name, a)))
                assert outcome == StartOutcome.STARTED, outcome
            stats = run_messages(rt, messages)
        wall = time.perf_counter() - began
        with rt.sessions() as session:
            done = session.scalar(
                select(func.count(Chunk.id)).where(
                    Chunk.job_id.in_(jobs), Chunk.status == ChunkStatus.DONE.value
                )
            )
    chunks = int(done or 0)
    return Row(
        pull,
        chunks,
        round(wall, 2),
        round(chunks / wall, 3),
        stats.tasks.get("tome.render_chunks", 0),
        counts.calls,
        round(counts.frames / max(1, counts.slot_steps), 3),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.qwen3_pull", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=None, help="a checkpoint (default: the tiny one)")
    parser.add_argument("--owners", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=8, help="chunks per owner's job")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--frames", type=int, default=40, help="TOME_QWEN3_MAX_NEW_TOKENS")
    parser.add_argument("--chunks-per-task", type=int, default=2)
    parser.add_argument("--tasks-in-flight", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tome-pull-bench-") as tmp:
        folder = Path(tmp)
        model_dir = args.model_dir
        if model_dir is None:
            from tests.qwen3.tiny_checkpoint import build_tiny_checkpoint

            model_dir = build_tiny_checkpoint(folder / "tiny-base")
        rows = [run_mode(args, model_dir, folder, pull) for pull in (False, True)]
    for row in rows:
        print(json.dumps(asdict(row)))
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    return 0 if all(r.chunks == args.owners * args.chunks for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
