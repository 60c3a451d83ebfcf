"""The options of ``tome render`` and ``tome preview``: one per field of ``POST /v1/jobs`` (webapi's
``JobCreate``; docs/api.md), turned into the request's JSON by :func:`job_body`.

Values are checked by the API, not here: its 422 names the field (``speed``, ``output.bitrate_kbps``,
``qa.thresholds``...), so the command line never disagrees with the server about a limit. Only what is
sent is set: every field left out takes the server's default."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("mp3", "m4b", "m4a", "ogg", "flac", "wav")

_OPTIONS = (
    click.option("--title", help="The book's title (else the script's own, else the file's name)."),
    click.option(
        "--script-format",
        type=click.Choice(["plain", "markdown", "ssml", "epub"]),
        help="Else from the extension: .md markdown, .epub epub, .ssml/.xml ssml, else plain.",
    ),
    click.option("--language", help="The script's language: en, en-gb, de, ... (else the voice's)."),
    click.option("--speed", type=float, help="Speaking rate, 0.5-2 (1: the voice's own)."),
    click.option(
        "--lexicon",
        "lexicons",
        multiple=True,
        help="A lexicon of yours (id or name) to read the script through; repeat for several, in order.",
    ),
    click.option("--front-matter/--no-front-matter", default=None, help="EPUB: read the front matter."),
    click.option("--back-matter/--no-back-matter", default=None, help="EPUB: read the back matter."),
    click.option("--footnotes", type=click.Choice(["skip", "chapter_end"]), help="EPUB: footnotes."),
    click.option("--format", "fmt", type=click.Choice(FORMATS), help="The book's format."),
    click.option("--bitrate", type=int, help="kb/s of a lossy format."),
    click.option("--preset", type=click.Choice(["acx"]), help="ACX delivery (chapter MP3s and a report)."),
    click.option("--split", type=click.Choice(["chapter"]), help="One file per chapter, and their ZIP."),
    click.option("--max-part-minutes", type=int, help="Longer chapters are cut into parts."),
    click.option(
        "--readalong/--no-readalong",
        default=None,
        help="Also book-readalong.epub: the text highlighted as the audio plays (EPUB 3 media overlays).",
    ),
    click.option("--loudness", "target_lufs", type=float, help="Loudness target, LUFS (default -18)."),
    click.option("--true-peak", "true_peak_db", type=float, help="True-peak ceiling, dBTP (default -3)."),
    click.option("--no-loudness", is_flag=True, help="Keep the engine's levels (no loudness mastering)."),
    click.option("--cover", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="JPEG/PNG."),
    click.option("--author"),
    click.option("--narrator"),
    click.option("--publisher"),
    click.option("--year", type=int),
    click.option("--description"),
    click.option("--series", help="The series the book belongs to (its library folder)."),
    click.option("--series-index", type=float, help="Its position in the series (1, 2, 2.5...)."),
    click.option("--metadata-language", help="The language tag written into the file (e.g. en-GB)."),
    click.option("--pause-sentence", type=float, help="Seconds between sentences."),
    click.option("--pause-paragraph", type=float, help="Seconds between paragraphs."),
    click.option("--pause-chapter", type=float, help="Seconds between chapters."),
    click.option("--qa/--no-qa", "qa_enabled", default=None, help="Check every chunk (default on)."),
    click.option(
        "--qa-transcript/--no-qa-transcript", default=None, help="The transcript check (default: engine's)."
    ),
    click.option("--qa-max-rerenders", type=int, help="New takes a failing chunk gets (default 2)."),
    click.option("--qa-on-fail", type=click.Choice(["flag", "fail"]), help="A chunk that never passes."),
    click.option(
        "--qa-threshold",
        "qa_thresholds",
        multiple=True,
        metavar="NAME=VALUE",
        help="Override one QA threshold (docs/qa.md names them); repeatable.",
    ),
    click.option("--webhook-url", help="Where the job's events are POSTed."),
    click.option(
        "--cast-voice",
        "cast_voices",
        multiple=True,
        metavar="CHARACTER=VOICE",
        help="Read a character's lines in one of your voices (docs/api.md, a full cast); repeatable.",
    ),
    click.option("--cast-default", metavar="VOICE", help="The voice of the characters not given one."),
    click.option(
        "--cast-line",
        "cast_lines",
        multiple=True,
        metavar="INDEX=CHARACTER",
        help="Correct who says one line (the preview's line index; narrator for the narrator); repeatable.",
    ),
    click.option(
        "--cast-llm/--no-cast-llm", default=None, help="Ask the server's model about the uncertain lines."
    ),
    click.option(
        "--abs-library",
        metavar="LIBRARY_ID",
        help="Upload the book into this library of your Audiobookshelf (`tome integrations audiobookshelf "
        "set`); with --abs-folder.",
    ),
    click.option("--abs-folder", metavar="FOLDER_ID", help="The library's folder the book goes into."),
    click.option(
        "--library-zip/--no-library-zip",
        default=None,
        help="Also a ZIP of the book in a library's Author/Series/Title layout.",
    ),
)


def job_options(command: F) -> F:
    """Adds every job option to ``command`` (they arrive as keywords; see :data:`NAMES`)."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def _given(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None and v not in ((), {})}


def _pairs(pairs: tuple[str, ...], option: str, example: str) -> dict[str, str]:
    """``NAME=VALUE`` options as a mapping (the value may hold ``=``; the name may not be empty)."""
    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{pair!r}: expected {example}", param_hint=option)
        found[name.strip()] = value
    return found


def _thresholds(pairs: tuple[str, ...]) -> dict[str, float]:
    found: dict[str, float] = {}
    for name, value in _pairs(pairs, "--qa-threshold", "NAME=VALUE, e.g. max_wer=0.3").items():
        try:
            found[name] = float(value)
        except ValueError:
            raise click.BadParameter(
                f"{name}={value!r}: expected NAME=VALUE, e.g. max_wer=0.3", param_hint="--qa-threshold"
            ) from None
    return found


def _audiobookshelf(options: dict[str, Any]) -> dict[str, str] | None:
    library, folder = options["abs_library"], options["abs_folder"]
    if (library is None) != (folder is None):
        raise click.UsageError("--abs-library and --abs-folder go together")
    return None if library is None else {"library_id": library, "folder_id": folder}


def job_body(voice: str, options: dict[str, Any]) -> dict[str, Any]:
    """The JSON of ``POST /v1/jobs`` (without the script) from the options given."""
    return _given(
        voice=voice,
        title=options["title"],
        script_format=options["script_format"],
        language=options["language"],
        speed=options["speed"],
        lexicons=list(options["lexicons"]) or None,
        script_options=_given(
            front_matter=options["front_matter"],
            back_matter=options["back_matter"],
            footnotes=options["footnotes"],
        ),
        output=_output(options),
        metadata=_given(
            author=options["author"],
            narrator=options["narrator"],
            publisher=options["publisher"],
            year=options["year"],
            language=options["metadata_language"],
            description=options["description"],
            series=options["series"],
            series_index=options["series_index"],
        ),
        pauses=_given(
            sentence=options["pause_sentence"],
            paragraph=options["pause_paragraph"],
            chapter=options["pause_chapter"],
        ),
        qa=_given(
            enabled=options["qa_enabled"],
            transcript=options["qa_transcript"],
            max_rerenders=options["qa_max_rerenders"],
            on_fail=options["qa_on_fail"],
            thresholds=_thresholds(options["qa_thresholds"]) or None,
        ),
        webhook_url=options["webhook_url"],
        cast=_given(
            voices=_pairs(options["cast_voices"], "--cast-voice", "CHARACTER=VOICE, e.g. Tom=tom") or None,
            default=options["cast_default"],
            lines=_pairs(options["cast_lines"], "--cast-line", "INDEX=CHARACTER, e.g. 12=Tom") or None,
            llm=options["cast_llm"],
        ),
        deliver=_given(audiobookshelf=_audiobookshelf(options), library_zip=options["library_zip"]),
    )


def _output(options: dict[str, Any]) -> dict[str, Any]:
    """The job's ``output`` (``loudness`` null with --no-loudness)."""
    if options["no_loudness"] and (options["target_lufs"] is not None or options["true_peak_db"] is not None):
        raise click.UsageError("--no-loudness cannot go with --loudness or --true-peak")
    loudness = (
        None
        if options["no_loudness"]
        else _given(target_lufs=options["target_lufs"], true_peak_db=options["true_peak_db"])
    )
    output = _given(
        format=options["fmt"],
        bitrate_kbps=options["bitrate"],
        preset=options["preset"],
        split=options["split"],
        max_part_minutes=options["max_part_minutes"],
        readalong=options["readalong"],
        loudness=loudness,
    )
    if options["no_loudness"]:
        output["loudness"] = None
    return output
