"""``python -m bench.storage_stitch``: peak memory of a stitch whose chunks and output live on the local
disk or in an S3 bucket (moto's server, a child process on 127.0.0.1), on a book and on one 10x longer.

The chunks (24 kHz mono 16-bit, 5-15 s of a noisy tone each) are written and stored once per backend;
then each case runs in a fresh ``python -m bench.storage_stitch --case ...`` process that stitches them
to MP3 with ``worker.audio.stitch`` through the storage layer (``worker.jobs.files``: on S3 each chunk
is measured by a ranged read and downloaded only while it is sent) and publishes the book (S3: a
multipart upload). The case reports its own ``VmHWM`` (peak RSS of the Python process; ffmpeg's is the
same on both backends and not counted). Exits 1 if a case failed or memory is not flat: on each backend
the long book's peak may exceed the short one's by at most 15% plus 16 MB. S3's constant extra (boto3 and
its botocore data, imported once) is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

SAMPLE_RATE = 24_000
FLAT = (1.15, 16.0)
REPO = Path(__file__).resolve().parents[1]


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _settings(kind: str, root: Path, endpoint: str, bucket: str) -> object:
    from worker.config import load_settings

    extra = {"storage": "s3", "s3_bucket": bucket, "s3_endpoint_url": endpoint} if kind == "s3" else {}
    return load_settings({}, data_dir=root, **extra)


def write_book(kind: str, root: Path, endpoint: str, bucket: str, minutes: float, job: str) -> list[str]:
    """Store chunks of ``minutes`` of audio for ``job``; returns their stored paths in order."""
    from worker.audio import write_wav_atomic
    from worker.config import Settings

    settings = _settings(kind, root, endpoint, bucket)
    assert isinstance(settings, Settings)
    storage = settings.open_storage()
    rng = np.random.default_rng(7)
    t = np.arange(15 * SAMPLE_RATE) / SAMPLE_RATE
    pool = (0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
    paths, total, seq = [], 0.0, 0
    while total < minutes * 60:
        seconds = float(rng.uniform(5, 15))
        path = settings.layout.chunk_audio(job, seq, "bench")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_wav_atomic(path, pool[: round(seconds * SAMPLE_RATE)], SAMPLE_RATE)
        storage.publish(path)
        paths.append(str(path))
        total += seconds
        seq += 1
    return paths


def run_case(
    kind: str, root: Path, endpoint: str, bucket: str, paths: list[str], job: str
) -> dict[str, float]:
    from worker.audio import StitchPiece, stitch
    from worker.config import Settings
    from worker.jobs.files import stored_files

    settings = _settings(kind, root, endpoint, bucket)
    assert isinstance(settings, Settings)
    storage = settings.open_storage()
    out = settings.layout.output(job, "bench", "mp3")
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    pieces = [StitchPiece(p, "sentence", n * 10 // len(paths)) for n, p in enumerate(paths)]
    result = stitch(pieces, out, "mp3", SAMPLE_RATE, bitrate_kbps=64, files=stored_files(storage))
    storage.publish(out)
    wall = time.perf_counter() - started
    assert storage.size(str(out)) == result.bytes
    return {"chunks": len(paths), "audio_s": result.duration, "wall_s": wall, "python_mb": _hwm_mb()}


def measure(
    kind: str, root: Path, endpoint: str, bucket: str, paths: list[str], job: str
) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(paths, f)
    cmd = [sys.executable, "-m", "bench.storage_stitch", "--case", kind, "--root", str(root),
           "--endpoint", endpoint, "--bucket", bucket, "--paths", f.name, "--job", job]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} case failed: {done.stderr[-2000:]}")
    report: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=6.0, help="the short book; the long one is 10x")
    parser.add_argument("--case", choices=["local", "s3"])
    parser.add_argument("--root", type=Path)
    parser.add_argument("--endpoint", default="")
    parser.add_argument("--bucket", default="")
    parser.add_argument("--paths", type=Path)
    parser.add_argument("--job", default="")
    args = parser.parse_args()
    if args.case:
        paths = json.loads(args.paths.read_text())
        print(json.dumps(run_case(args.case, args.root, args.endpoint, args.bucket, paths, args.job)))
        return 0

    problems, lines = run_storage_stitch_bench(args.minutes)
    print("\n".join(lines))
    for problem in problems:
        print("NOT FLAT:", problem)
    return 1 if problems else 0


def run_storage_stitch_bench(minutes: float = 6.0) -> tuple[list[str], list[str]]:
    """Both backends, a book of ``minutes`` and one 10x longer: the problems (memory not flat) and the
    report's lines."""
    from tests.support.s3 import moto_server

    rows: dict[tuple[str, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tome-storage-bench-") as tmp, moto_server(Path(tmp)) as server:
        bucket = server.new_bucket()
        for kind in ("local", "s3"):
            root = Path(tmp) / kind
            for label, length in (("short", minutes), ("10x", minutes * 10)):
                job = str(uuid.uuid4())
                paths = write_book(kind, root, server.endpoint_url, bucket, length, job)
                rows[(kind, label)] = measure(kind, root, server.endpoint_url, bucket, paths, job)
    lines = [f"{'backend':8} {'book':6} {'chunks':>7} {'audio min':>10} {'wall s':>8} {'peak RSS MB':>12}"]
    for (kind, label), r in rows.items():
        lines.append(f"{kind:8} {label:6} {r['chunks']:7.0f} {r['audio_s'] / 60:10.1f} {r['wall_s']:8.1f} "
                     f"{r['python_mb']:12.1f}")  # fmt: skip
    factor, slack = FLAT
    problems = []
    for kind in ("local", "s3"):
        short, long = rows[(kind, "short")]["python_mb"], rows[(kind, "10x")]["python_mb"]
        if long > short * factor + slack:
            problems.append(f"{kind}: {long:.0f} MB on the 10x book against {short:.0f} MB")
    for label in ("short", "10x"):  # boto3's import: a constant, not growth
        local, s3 = rows[("local", label)]["python_mb"], rows[("s3", label)]["python_mb"]
        lines.append(f"{label}: S3 costs {s3 - local:+.1f} MB over the local disk")
    return [f"storage stitch memory not flat: {p}" for p in problems], lines


if __name__ == "__main__":
    sys.exit(main())
