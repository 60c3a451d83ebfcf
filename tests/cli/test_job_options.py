"""``tome render``'s options mirror ``POST /v1/jobs``: every field of the API's own request model
(webapi.schemas.JobCreate) has an option, and what the options build is a body that model accepts, value
for value. A field added to the API without an option fails here."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from tome_cli.job_options import job_body, job_options
from webapi.schemas import JobCreate

# Fields that are not options: the script is the command's argument, the voice its --voice.
NOT_OPTIONS = {"script", "voice"}

EVERY_OPTION = [
    "--title", "T", "--script-format", "markdown", "--language", "en-gb", "--speed", "1.25",
    "--lexicon", "names", "--lexicon", "places", "--front-matter", "--no-back-matter",
    "--footnotes", "chapter_end", "--format", "mp3", "--bitrate", "96", "--preset", "acx",
    "--split", "chapter", "--max-part-minutes", "60", "--readalong", "--loudness", "-20",
    "--true-peak", "-3.5",
    "--author", "A. Author", "--narrator", "N. Narrator", "--publisher", "P", "--year", "2026",
    "--description", "D", "--metadata-language", "en-GB", "--pause-sentence", "0.4",
    "--pause-paragraph", "0.9", "--pause-chapter", "2.5", "--no-qa", "--qa-transcript",
    "--qa-max-rerenders", "3", "--qa-on-fail", "fail", "--qa-threshold", "max_wer=0.3",
    "--qa-threshold", "max_pause_s=1.5", "--webhook-url", "https://example.org/hook",
    "--cast-voice", "Tom=tom", "--cast-voice", "Margaret Ellis=maggie", "--cast-default", "extra",
    "--cast-line", "12=Tom", "--cast-llm",
    "--series", "Tales", "--series-index", "2", "--abs-library", "lib_main", "--abs-folder", "fol_books",
    "--library-zip",
]  # fmt: skip


def _built(args: list[str], tmp_path: Path) -> dict[str, Any]:
    built: dict[str, Any] = {}

    @click.command()
    @job_options
    def command(**options: Any) -> None:
        built.update(job_body("narrator", options))

    cover = tmp_path / "cover.png"
    cover.write_bytes(b"checked by the API, not here")
    result = CliRunner().invoke(command, [*args, "--cover", str(cover)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return built


def _leaves(model: type[BaseModel], prefix: str = "") -> set[str]:
    """The dotted paths of a request model's fields, down through nested models."""
    found = set()
    for name, field in model.model_fields.items():
        nested = [a for a in typing.get_args(field.annotation) or (field.annotation,) if _is_model(a)]
        if nested:
            found |= _leaves(nested[0], f"{prefix}{name}.")
        else:
            found.add(f"{prefix}{name}")
    return found


def _is_model(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _paths(body: dict[str, Any], prefix: str = "") -> set[str]:
    found = set()
    for key, value in body.items():
        if isinstance(value, dict) and key not in ("thresholds", "voices", "lines"):
            found |= _paths(value, f"{prefix}{key}.")
        else:
            found.add(f"{prefix}{key}")
    return found


def test_every_field_of_the_jobs_request_has_an_option(tmp_path: Path) -> None:
    body = _built(EVERY_OPTION, tmp_path)
    assert _paths(body) | NOT_OPTIONS == _leaves(JobCreate)


def test_the_options_build_a_body_the_api_accepts_value_for_value(tmp_path: Path) -> None:
    body = _built(EVERY_OPTION, tmp_path)
    parsed = JobCreate.model_validate({**body, "script": "Hello."})
    assert parsed.model_dump(include=set(body), exclude_unset=True) == body
    assert body["qa"]["thresholds"] == {"max_wer": 0.3, "max_pause_s": 1.5}
    assert body["output"]["loudness"] == {"target_lufs": -20.0, "true_peak_db": -3.5}
    assert body["lexicons"] == ["names", "places"]


def test_options_left_out_are_left_to_the_server(tmp_path: Path) -> None:
    assert _built([], tmp_path) == {"voice": "narrator"}
    assert _built(["--no-loudness"], tmp_path) == {"voice": "narrator", "output": {"loudness": None}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--qa-threshold", "max_wer"], "expected NAME=VALUE"),
        (["--qa-threshold", "=0.3"], "expected NAME=VALUE"),
        (["--qa-threshold", "max_wer=high"], "expected NAME=VALUE"),
        (["--no-loudness", "--loudness", "-20"], "--no-loudness cannot go with"),
        (["--abs-library", "lib_main"], "--abs-library and --abs-folder go together"),
    ],
)
def test_malformed_options_are_refused_before_anything_is_sent(
    args: list[str], message: str, tmp_path: Path
) -> None:
    @click.command()
    @job_options
    def command(**options: Any) -> None:
        job_body("narrator", options)

    result = CliRunner().invoke(command, args)
    assert result.exit_code == 2
    assert message in result.output
