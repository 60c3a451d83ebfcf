"""``tome voices add NAME --embedding FILE`` against a real stack whose engine has speaker embeddings:
the API under gunicorn with the qwen3-tts engine on the tiny checkpoint (tests/qwen3/tiny_checkpoint.py).
No worker is needed: an embedding voice is ready at once, nothing is built."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from safetensors.numpy import load, save_file

from tests.cli.conftest import Stack
from tests.qwen3.tiny_checkpoint import HIDDEN
from tests.support.api_server import running_api
from tests.support.apps import app_on
from tome_cli.main import EXIT_API, EXIT_OK
from webapi.cli import mint_key
from worker.config import load_settings
from worker.processes import api_command

NAME = "ref_spk_embedding"  # the tensor the engine's embedding file holds


@pytest.fixture
def qwen3_stack(tiny_dir: Path, tmp_path: Path) -> Iterator[Stack]:
    env = {"TOME_QWEN3_MODEL_DIR": str(tiny_dir), "TOME_QWEN3_DEVICE": "cpu"}
    settings = load_settings(env, data_dir=tmp_path / "var", engine="qwen3-tts")
    (tmp_path / "config").mkdir()
    with app_on(settings) as app:
        key = mint_key(app, owner="alice", name="cli", admin=False)
    with running_api(settings, tmp_path, lambda bind: api_command(bind, workers=1)) as server:
        yield Stack(f"http://127.0.0.1:{server.port}", key, tmp_path / "config")


def test_a_voice_from_an_embedding_file_is_ready_at_once(qwen3_stack: Stack, tmp_path: Path) -> None:
    vector = np.random.default_rng(7).standard_normal(HIDDEN).astype(np.float32)
    embedding = tmp_path / "moved.safetensors"
    save_file({NAME: vector}, str(embedding))

    added = qwen3_stack.run("voices", "add", "moved", "--embedding", str(embedding), "--language", "de")
    assert added.exit_code == EXIT_OK, added.output
    assert added.stdout.strip().endswith("\tready"), added.stdout
    assert "made voice moved" in added.stderr
    voice = qwen3_stack.run("voices", "show", "moved", "--json")
    shown = json.loads(voice.stdout)
    assert (shown["cache_status"], shown["language"], shown["ref_text"]) == ("ready", "de", "")
    assert shown["cache_engine"].startswith("qwen3-tts ")
    # The server holds the very embedding the file carried.
    exported = httpx.get(
        f"{qwen3_stack.url}/v1/voices/{shown['id']}/embedding",
        headers={"Authorization": f"Bearer {qwen3_stack.key}"},
    )
    assert exported.status_code == 200
    np.testing.assert_array_equal(load(exported.content)[NAME], vector)

    # With a transcript too (optional with an embedding); as JSON.
    told = qwen3_stack.run(
        "voices", "add", "told", "--embedding", str(embedding), "--text", "Hello there.", "--json"
    )
    assert told.exit_code == EXIT_OK, told.output
    assert '"ref_text": "Hello there."' in told.stdout

    # An embedding of another checkpoint's width: the API's 422, named, and no voice made.
    wrong = tmp_path / "wrong.safetensors"
    save_file({NAME: np.zeros(HIDDEN * 2, np.float32)}, str(wrong))
    refused = qwen3_stack.run("voices", "add", "wrong", "--embedding", str(wrong))
    assert refused.exit_code == EXIT_API
    assert "(field embedding) [invalid_embedding, HTTP 422]" in refused.stderr
    listed = qwen3_stack.run("voices", "list", "--json")
    assert sorted(v["name"] for v in json.loads(listed.stdout)) == ["moved", "told"]
