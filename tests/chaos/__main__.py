"""`make chaos`: the full battery. Prints one figures line per scenario and exits non-zero if any
invariant broke. Options shrink or grow it; defaults are the issue's sizes."""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import replace

from tests.chaos.battery import ChaosConfig, scenario_a, scenario_b


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through every finally: workers, Redis, PostgreSQL stopped


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", choices=["A", "B", "all"], default="all")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--seconds-per-chunk", type=float, default=0.15)
    parser.add_argument("--kill-every", type=float, default=20.0)
    parser.add_argument("--stop-seconds", type=float, default=90.0)
    parser.add_argument("--b-jobs", type=int, default=20)
    parser.add_argument("--chunks-per-task", type=int, default=4)
    parser.add_argument("--redis-restarts", type=int, default=1)
    parser.add_argument("--pg-restarts", type=int, default=1)
    parser.add_argument("--stop-at", type=float, default=30.0)
    parser.add_argument("--redis-at", type=float, default=60.0)
    parser.add_argument("--pg-at", type=float, default=120.0)
    parser.add_argument("--deadline", type=float, default=3600.0, help="seconds for every job to end")
    parser.add_argument("--keep", action="store_true", help="keep scenario A's folder (logs, data)")
    args = parser.parse_args()
    config = ChaosConfig(
        jobs=args.jobs,
        chunks_per_job=args.chunks,
        seconds_per_chunk=args.seconds_per_chunk,
        kill_every=args.kill_every,
        stop_seconds=args.stop_seconds,
        chunks_per_task=args.chunks_per_task,
        redis_restarts=args.redis_restarts,
        pg_restarts=args.pg_restarts,
        stop_at=args.stop_at,
        redis_at=args.redis_at,
        pg_at=args.pg_at,
        deadline_seconds=args.deadline,
    )
    results = []
    if args.scenario in ("A", "all"):
        results.append(scenario_a(config, keep=args.keep))
    if args.scenario in ("B", "all"):
        results.append(
            scenario_b(replace(config, jobs=args.b_jobs, stop_seconds=0, submit_threads=20), keep=args.keep)
        )
    for figures in results:
        print(figures.details())
        for problem in figures.problems[:20]:
            print(f"  problem: {problem}")
        print(figures.line())
    return 0 if all(f.ok for f in results) else 1


if __name__ == "__main__":
    sys.exit(main())
