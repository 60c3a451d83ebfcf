"""Speaker-prompt files (worker/voices/store.py): atomic safetensors writes, shape-checked loads, confined
server-generated paths and cache keys; plus what a writer SIGKILLed mid-write leaves behind."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from models import utcnow
from worker.storage.layout import Layout
from worker.sweeper import remove_stale_temp_files
from worker.voices.store import (
    Prompt,
    PromptFileError,
    cache_key,
    load_prompt,
    save_prompt,
)

REPO = Path(__file__).resolve().parents[2]
SHA_A = hashlib.sha256(b"first recording").hexdigest()
SHA_B = hashlib.sha256(b"second recording").hexdigest()


def sample_prompt() -> Prompt:
    return {
        "f0_median_hz": np.array([101.5], dtype=np.float32),
        "embedding": np.arange(24, dtype=np.float32).reshape(2, 12) / 7,
        "codes": np.array([[1, -2, 3], [4, 5, -6]], dtype=np.int64),
        "weights": np.linspace(0, 1, 9, dtype=np.float64)[::2],  # a non-contiguous view
    }


def test_save_load_round_trip_keeps_values_dtypes_and_metadata(tmp_path: Path) -> None:
    path = tmp_path / "voices" / "v" / "prompt-x.safetensors"
    tensors = sample_prompt()
    save_prompt(path, tensors, {"cache_key": "espeak/1/abc/def", "voice_id": "v"})

    loaded = load_prompt(path)
    assert sorted(loaded) == sorted(tensors)
    for name, array in tensors.items():
        assert loaded[name].dtype == array.dtype
        assert loaded[name].shape == array.shape
        assert np.array_equal(loaded[name], array)
    with safe_open(str(path), framework="np") as handle:
        assert handle.metadata() == {"cache_key": "espeak/1/abc/def", "voice_id": "v"}
    # The folder was created and nothing but the final file is left in it.
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_save_replaces_an_existing_prompt_whole(tmp_path: Path) -> None:
    path = tmp_path / "prompt.safetensors"
    save_prompt(path, {"a": np.zeros(1000, dtype=np.float32)}, {})
    save_prompt(path, {"b": np.ones(3, dtype=np.float32)}, {"n": "2"})
    loaded = load_prompt(path)
    assert list(loaded) == ["b"]
    assert np.array_equal(loaded["b"], np.ones(3, dtype=np.float32))
    assert [p.name for p in tmp_path.iterdir()] == ["prompt.safetensors"]


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        ({"missing": (1,)}, "has no tensor 'missing'"),
        ({"f0_median_hz": (1, 1)}, "has shape (1,), expected (1, 1)"),  # wrong rank
        ({"embedding": (12,)}, "has shape (2, 12), expected (12,)"),  # wrong rank
        ({"embedding": (2, 11)}, "has shape (2, 12), expected (2, 11)"),  # wrong size
        ({"embedding": (3, -1)}, "has shape (2, 12), expected (3, -1)"),  # wildcard elsewhere, wrong size
    ],
)
def test_load_refuses_a_prompt_of_the_wrong_shape(
    tmp_path: Path, expected: dict[str, tuple[int, ...]], message: str
) -> None:
    path = tmp_path / "prompt.safetensors"
    save_prompt(path, sample_prompt(), {})
    with pytest.raises(PromptFileError) as caught:
        load_prompt(path, expected)
    assert message in str(caught.value)


def test_load_accepts_matching_shapes_with_wildcards_and_extra_tensors(tmp_path: Path) -> None:
    path = tmp_path / "prompt.safetensors"
    save_prompt(path, sample_prompt(), {})
    for expected in (
        {"f0_median_hz": (1,), "embedding": (2, 12)},
        {"embedding": (-1, 12), "codes": (2, -1)},
        {"embedding": (-1, -1), "weights": (-1,)},
        {},
    ):
        assert set(load_prompt(path, expected)) == set(sample_prompt())


@pytest.mark.parametrize("content", [None, b"", b"not a safetensors file", b"\xff" * 64])
def test_load_of_a_missing_or_garbage_file_is_a_prompt_file_error(
    tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "prompt.safetensors"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(PromptFileError, match=r"cannot read prompt file prompt\.safetensors"):
        load_prompt(path, {"f0_median_hz": (1,)})


def test_load_of_a_truncated_file_is_a_prompt_file_error(tmp_path: Path) -> None:
    path = tmp_path / "prompt.safetensors"
    save_prompt(path, sample_prompt(), {"k": "v"})
    data = path.read_bytes()
    for cut in (8, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(PromptFileError):
            load_prompt(path)


def test_cache_key_changes_with_each_thing_a_prompt_depends_on() -> None:
    base = ("espeak", "espeak-ng 1.52.0/prompt-v1", SHA_A, "The old lighthouse keeper.")
    key = cache_key(*base)
    assert cache_key(*base) == key
    assert key.startswith("espeak/espeak-ng 1.52.0/prompt-v1/")  # what the sweeper matches engines by
    changed = [
        ("qwen3", *base[1:]),
        (base[0], "espeak-ng 1.52.0/prompt-v2", *base[2:]),
        (base[0], "espeak-ng 1.53.0/prompt-v1", *base[2:]),
        (*base[:2], SHA_B, base[3]),
        (*base[:3], "The old lighthouse keeper!"),
        (*base[:3], "the old lighthouse keeper."),
        (*base[:3], ""),
    ]
    keys = {cache_key(*parts) for parts in changed}
    assert key not in keys
    assert len(keys) == len(changed)


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import numpy as np
    from worker.voices.store import save_prompt

    path = Path(sys.argv[1])
    base = np.arange(int(sys.argv[2]), dtype=np.float32)
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        tensors = {"big": base + np.float32(i), "iteration": np.array([i], dtype=np.int64)}
        save_prompt(path, tensors, {"iteration": str(i)})
    """
)
ELEMENTS = 5_000_000  # 20 MB of float32


def check_final_prompt(path: Path) -> int | None:
    """None if the final file does not exist, else the iteration it holds, checked whole."""
    if not path.exists():
        return None
    loaded = load_prompt(path, {"big": (ELEMENTS,), "iteration": (1,)})
    iteration = int(loaded["iteration"][0])
    assert iteration >= 1
    expected = np.arange(ELEMENTS, dtype=np.float32) + np.float32(iteration)
    assert np.array_equal(loaded["big"], expected), "the final file mixes two writes"
    with safe_open(str(path), framework="np") as handle:
        assert handle.metadata() == {"iteration": str(iteration)}
    return iteration


# save_prompt's own temp file, and the one safetensors' save_file writes first and renames onto it.
PROMPT_TEMP = re.compile(r"^\.prompt-.+\.tmp$")
SAFETENSORS_TEMP = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")


@dataclass
class KillCampaign:
    kills: int = 0
    finals_seen: int = 0  # kills after which the final file existed (and was checked whole)
    prompt_temps_seen: int = 0  # kills after which a .prompt-*.tmp file was left
    safetensors_temps_seen: int = 0


def kill_writers(path: Path, rng: random.Random, done: Callable[[KillCampaign], bool]) -> KillCampaign:
    """Start a writer looping save_prompt onto ``path``, SIGKILL it 0-200 ms later, check the folder;
    repeat until ``done`` (at most 40 times)."""
    campaign = KillCampaign()
    while not done(campaign) and campaign.kills < 40:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(ELEMENTS)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "ready"
            with contextlib.suppress(subprocess.TimeoutExpired):
                # 0-200 ms, widening every 10 kills so that a slow (loaded) machine still completes writes
                writer.wait(timeout=rng.uniform(0.0, 0.2) * (1 + campaign.kills // 10))
            assert writer.poll() is None, "the writer stopped by itself"
            os.kill(writer.pid, signal.SIGKILL)
            assert writer.wait(timeout=10) == -signal.SIGKILL
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
            if writer.stdout is not None:
                writer.stdout.close()
        campaign.kills += 1
        if check_final_prompt(path) is not None:
            campaign.finals_seen += 1
        names = {p.name for p in path.parent.iterdir()} if path.parent.exists() else set()
        prompt_temps = {n for n in names if PROMPT_TEMP.match(n)}
        safetensors_temps = {n for n in names if SAFETENSORS_TEMP.match(n)}
        campaign.prompt_temps_seen += bool(prompt_temps)
        campaign.safetensors_temps_seen += bool(safetensors_temps)
        # Nothing but the final file and temp files is ever in the folder; a temp file is never final.
        assert names - prompt_temps - safetensors_temps <= {path.name}
        assert path.name not in prompt_temps | safetensors_temps
    return campaign


def test_writer_killed_mid_write_never_leaves_a_partial_file_at_the_final_path(tmp_path: Path) -> None:
    data_dir = tmp_path / "var"
    path = Layout.under(data_dir).prompt(uuid.uuid4(), cache_key("espeak", "1", SHA_A, "text"))
    # At least 10 kills; a few more (bounded) if none of them happened to leave a temp file behind.
    campaign = kill_writers(
        path,
        random.Random(20261122),
        lambda c: c.kills >= 10 and c.prompt_temps_seen > 0 and c.finals_seen > 0,
    )
    assert campaign.finals_seen > 0, "no write ever completed: the kills came too early to test anything"
    assert campaign.prompt_temps_seen > 0, "no kill landed inside a write"
    temps = sorted(path.parent.glob(".prompt-*.tmp"))
    assert temps
    final_before = check_final_prompt(path)

    # Not old enough yet: the sweeper leaves them (a live writer may still be filling one).
    assert remove_stale_temp_files(data_dir.resolve(), utcnow() - timedelta(hours=1)) == 0
    assert sorted(path.parent.glob(".prompt-*.tmp")) == temps
    # Once they count as old, every .prompt-*.tmp goes, and the final prompt stays as it was.
    assert remove_stale_temp_files(data_dir.resolve(), utcnow() + timedelta(minutes=1)) >= len(temps)
    assert list(path.parent.glob(".prompt-*.tmp")) == []
    assert path.exists()
    assert check_final_prompt(path) == final_before


def test_sweeper_removes_every_temp_file_a_killed_prompt_writer_leaves(tmp_path: Path) -> None:
    """safetensors' save_file writes a ".tmpXXXXXX" file of its own and renames it onto save_prompt's temp
    file; a writer killed inside it leaves that file too, as large as the prompt (found here: the sweeper's
    patterns did not match it until ".tmp*" was added)."""
    data_dir = tmp_path / "var"
    path = Layout.under(data_dir).prompt(uuid.uuid4(), cache_key("espeak", "1", SHA_A, "text"))
    campaign = kill_writers(path, random.Random(7), lambda c: c.safetensors_temps_seen > 0)
    if not campaign.safetensors_temps_seen:
        pytest.skip(f"none of {campaign.kills} kills landed inside safetensors' own write")
    remove_stale_temp_files(data_dir.resolve(), utcnow() + timedelta(minutes=1))
    leftovers = sorted(p.name for p in path.parent.iterdir() if p != path)
    assert leftovers == [], f"temp files the sweeper does not remove: {leftovers}"
