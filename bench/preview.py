"""The preview of a whole novel: a generated 100,000-word Markdown book (chapters, dialogue, numbers,
dates, money, abbreviations, Roman numerals) through ``POST /v1/scripts/preview`` on an embedded app
(``--preview-words N`` makes it shorter or longer: the tests run a small one). A preview over the inline
cap (and every EPUB) is planned by its worker task, run here in this process, and read back.

Reported, all measured in this one run: the request's wall time and words per second; the time of the
same script's parse and chunking alone (no normalisation, no lexicon, chunks packed to the same engine
limit) and the ratio between the two (what reading the words right costs on top of cutting them up); and
the same book as an EPUB, uploaded as a file. Each request must answer 200 with every chapter.
"""

from __future__ import annotations

import io
import json
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from werkzeug.test import TestResponse

from tests.support.apps import app_on, tome_of
from tests.support.audio import reference_wav
from tests.support.epubs import Section, build_epub
from webapi.cli import mint_key
from worker.config import load_settings
from worker.jobs.preview import preview_script
from worker.script import make_chunks, parse_document

WORDS = 100_000
SEED = 11

_NAMES = ("Dr. Hale", "Mrs. Avery", "St. John", "Mr. Price", "Prof. Lind", "Captain Ross")
_VERBS = ("walked to", "wrote about", "counted", "remembered", "paid for", "argued over")
_THINGS = (
    "the harbour wall",
    "3.5 kilometres of rope",
    "$12.50 worth of bread",
    "the 1984 storm",
    "the 21st lantern",
    "25% of the nets",
    "the 10:30 am ferry",
    "a letter dated 3 March 1921",
    "the boats on the quay",
)


def novel(words: int = WORDS, seed: int = SEED) -> tuple[str, list[tuple[str, list[str]]]]:
    """A Markdown novel of about ``words`` words, and the same as (title, paragraphs) chapters."""
    rng = random.Random(seed)
    chapters: list[tuple[str, list[str]]] = []
    count = 0
    numeral = 1
    while count < words:
        title = f"Chapter {_roman(numeral)}"
        paragraphs: list[str] = []
        for _ in range(40):
            sentences = []
            for _ in range(rng.randint(2, 6)):
                sentence = f"{rng.choice(_NAMES)} {rng.choice(_VERBS)} {rng.choice(_THINGS)}."
                if rng.random() < 0.2:
                    sentence = f"\u201c{sentence[:-1]}, {rng.choice(_NAMES)} said.\u201d"
                sentences.append(sentence)
            paragraph = " ".join(sentences)
            count += len(paragraph.split())
            paragraphs.append(paragraph)
        chapters.append((title, paragraphs))
        numeral += 1
    markdown = "\n\n".join(f"# {t}\n\n" + "\n\n".join(ps) for t, ps in chapters)
    return markdown, chapters


def _roman(number: int) -> str:
    out = ""
    for value, letters in ((50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        while number >= value:
            out += letters
            number -= value
    return out


@dataclass(frozen=True)
class PreviewTimings:
    words: int
    chars: int
    chunks: int
    preview_s: float
    parse_only_s: float
    epub_bytes: int
    epub_s: float

    @property
    def ratio(self) -> float:
        return self.preview_s / self.parse_only_s if self.parse_only_s else 0.0

    def lines(self) -> list[str]:
        return [
            f"  preview      {self.words:,} words ({self.chars:,} chars, {self.chunks:,} chunks) in "
            f"{self.preview_s:.2f} s = {_rate(self.words, self.preview_s)} words/s",
            f"  parse only   {self.parse_only_s:.2f} s: the whole preview costs {self.ratio:.1f}x "
            "the parse and chunking alone (normalisation, lexicons, JSON)",
            f"  epub         the same book as an EPUB ({self.epub_bytes / 1e3:,.0f} kB) previewed in "
            f"{self.epub_s:.2f} s = {_rate(self.words, self.epub_s)} words/s",
        ]


def _rate(words: int, seconds: float) -> str:
    return f"{words / seconds:,.0f}" if seconds > 0 else "-"


_NOTHING = PreviewTimings(0, 0, 0, 0.0, 0.0, 0, 0.0)


def run_preview(base: Path, words: int = WORDS) -> tuple[list[str], PreviewTimings]:
    """Preview a novel of about ``words`` words (Markdown, then EPUB) through the API; the problems found
    and the timings. A short preview of each kind runs first, untimed, so that what a process pays once
    (lazy imports, the normaliser's tables, the XML parser) is not billed to the book."""
    markdown, chapters = novel(words)
    settings = load_settings(
        data_dir=base / "preview",
        max_chunks_per_job=1_000_000,
        max_script_chars=max(len(markdown) + 1, 2_000_000),
        max_upload_bytes=max(len(markdown) * 4, 50 * 2**20),
    )
    epub = build_epub(
        chapters=[Section(t, paragraphs) for t, paragraphs in chapters], title="Bench", authors=("Tome",)
    )
    with app_on(settings) as app:
        headers = {"Authorization": f"Bearer {mint_key(app, owner='bench', name='bench', admin=False)}"}
        client = app.test_client()
        wav, text = reference_wav(base)
        voice = client.post(
            "/v1/voices",
            data={"name": "narrator", "ref_text": text, "audio": (io.BytesIO(wav), "ref.wav")},
            headers=headers,
            content_type="multipart/form-data",
        )
        if voice.status_code != 202:
            return [f"preview: the voice upload answered {voice.status_code}"], _NOTHING

        def planned(accepted: TestResponse) -> TestResponse:
            """The preview's answer: at once when inline, else after its worker task ran (here, in this
            process: the time is the request's plus the planning's, as a client polling would see)."""
            if accepted.status_code != 202:
                return accepted
            preview_id = uuid.UUID(accepted.json["preview"])  # type: ignore[index]
            preview_script(tome_of(app).runtime, preview_id)
            return client.get(f"/v1/previews/{preview_id}", headers=headers)

        def markdown_preview(script: str) -> TestResponse:
            body = {"title": "Bench", "voice": "narrator", "script": script, "script_format": "markdown"}
            return planned(client.post("/v1/scripts/preview", json=body, headers=headers))

        def epub_preview(data: bytes) -> TestResponse:
            form = {"job": json.dumps({"voice": "narrator"}), "script": (io.BytesIO(data), "bench.epub")}
            return planned(
                client.post(
                    "/v1/scripts/preview", data=form, headers=headers, content_type="multipart/form-data"
                )
            )

        warm_up = chapters[:1]
        markdown_preview(f"# {warm_up[0][0]}\n\n" + "\n\n".join(warm_up[0][1]))
        epub_preview(build_epub(chapters=[Section(t, ps) for t, ps in warm_up], title="Warm-up"))

        started = time.perf_counter()
        response = markdown_preview(markdown)
        preview_s = time.perf_counter() - started
        problems = _check("preview", response, len(chapters))
        chunks = len((response.json or {}).get("chunks", [])) if response.status_code == 200 else 0

        max_chars = tome_of(app).engine().max_chunk_chars  # what the preview packs chunks to
        started = time.perf_counter()
        make_chunks(parse_document(markdown, "markdown").chapters, max_chars)
        parse_only_s = time.perf_counter() - started

        started = time.perf_counter()
        response = epub_preview(epub)
        epub_s = time.perf_counter() - started
        problems += _check("preview (epub)", response, len(chapters))
    timings = PreviewTimings(
        len(markdown.split()), len(markdown), chunks, preview_s, parse_only_s, len(epub), epub_s
    )
    return problems, timings


def _check(label: str, response: TestResponse, chapters: int) -> list[str]:
    answer = response.json or {}
    if response.status_code != 200:
        return [f"{label}: answered {response.status_code}: {str(answer)[:500]}"]
    if len(answer["chapters"]) != chapters:
        return [f"{label}: {len(answer['chapters'])} chapters, expected {chapters}"]
    if not answer["chunks"]:
        return [f"{label}: no chunks"]
    return []
