"""The qwen3-tts section of ``make bench`` (bench/qwen3.py) on the tiny checkpoint, on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import qwen3
from tests.qwen3.tiny_checkpoint import build_tiny_checkpoint


def test_one_row_per_batch_size_on_cpu(tmp_path: Path) -> None:
    run = qwen3.measure_checkpoint(
        build_tiny_checkpoint(tmp_path / "tiny"), "cpu", "tiny", (1, 2), repeats=1, max_new_tokens=12
    )
    assert [row.batch for row in run.rows] == [1, 2]
    for row in run.rows:
        assert not row.oom
        assert row.calls == (row.batch,)  # one generate call of the whole batch
        assert row.empty == 0
        assert row.audio_s > 0
        assert row.wall_s > 0
        assert row.throughput == pytest.approx(row.audio_s / row.wall_s)
        assert row.peak_mib is None
        assert qwen3._memory(row) == "n/a (cpu)"
        # at most 12 frames of 80 ms per request
        assert row.audio_s <= row.batch * 12 * 0.08 + 1e-6
    assert qwen3.check(run) == []
    # Per-chunk seeds compared with one shared stream, at the largest measured size up to 8.
    assert run.seeds is not None
    assert run.seeds.batch == 2
    assert run.seeds.seeded_ms > 0
    assert run.seeds.shared_ms > 0
    assert "seeds_cost2=" in qwen3._summary(run)


def test_broken_rows_are_problems() -> None:
    good = qwen3.BatchRow(2, 1.0, 0.0, 3.0, (2,), 0, None, None)
    run = qwen3.CheckpointRun("tiny", "v", 0.0, 0.0, [good])
    assert qwen3.check(run) == []
    split = qwen3.BatchRow(2, 1.0, 0.0, 3.0, (1, 1), 0, None, None)
    silent = qwen3.BatchRow(2, 1.0, 0.0, 3.0, (2,), 1, None, None)
    run = qwen3.CheckpointRun("tiny", "v", 0.0, 0.0, [split, silent])
    assert len(qwen3.check(run)) == 2


def test_auto_without_cuda_skips_with_the_cpu_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert qwen3.run_section("auto", (1,), tmp_path) == ([], "")
    assert qwen3.run_section("skip", (1,), tmp_path) == ([], "")
    problems, summary = qwen3.run_section("cuda", (1,), tmp_path)
    assert len(problems) == 1
    assert summary == ""
    out = capsys.readouterr().out
    assert "--qwen3-device cpu" in out.splitlines()[0]
    assert not list(tmp_path.iterdir())  # nothing built


def test_parse_batches() -> None:
    assert qwen3.parse_batches("1,2,4") == (1, 2, 4)
    for bad in ("", "0,1", "2,1", "1,1", "a"):
        with pytest.raises(ValueError, match="batch sizes must be"):
            qwen3.parse_batches(bad)


def test_the_runners_side_by_side_time_the_same_work_when_greedy(tmp_path: Path) -> None:
    """``python -m bench.qwen3 --greedy``: both runners make the same frames, so the same audio."""
    from bench import qwen3_runners

    rows = qwen3_runners.compare(
        build_tiny_checkpoint(tmp_path / "tiny"),
        "cpu",
        ("fast", "reference"),
        (1, 2),
        8,
        repeats=1,
        greedy=True,
    )
    assert [(r.runner, r.n) for r in rows] == [("fast", 1), ("fast", 2), ("reference", 1), ("reference", 2)]
    by = {(r.runner, r.n): r for r in rows}
    for n in (1, 2):
        fast, ref = by[("fast", n)], by[("reference", n)]
        assert fast.frames == ref.frames > 0
        audio = fast.audio_s_per_wall_s * fast.wall_s
        assert audio == pytest.approx(ref.audio_s_per_wall_s * ref.wall_s)
        assert fast.first_call_s > 0
    assert by[("fast", 1)].first_audio_s is not None
    assert by[("fast", 2)].first_audio_s is None
    assert set(qwen3_runners.speedups(rows)) == {("fast", 1), ("fast", 2)}


def test_the_streamed_decode_bench_on_cpu(tmp_path: Path) -> None:
    from bench import qwen3_stream

    rows = qwen3_stream.measure(build_tiny_checkpoint(tmp_path / "tiny"), 40, 10, 1)
    assert [name for name, _, _ in rows] == ["whole", "stream", "stream-every-1", "stream-kept-prefix"]
    for name, ms, first in rows:
        assert ms > 0
        assert (first > 0) == (name != "whole")  # the whole decode has no first piece
