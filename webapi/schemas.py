"""Request and response schemas. The same models validate requests and generate /openapi.json."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from webapi.text import Line, Lines, OptionalLine, OptionalLines, VoiceName

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63}$"
LANGUAGE_PATTERN = r"^[a-z]{2,3}(-[a-z0-9]{2,8})?$"
ABS_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # Audiobookshelf's ids: UUIDs, or lib_xxx / fol_xxx


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Pauses(Strict):
    """Seconds of silence after a sentence-, paragraph- and chapter-ending chunk."""

    sentence: float = Field(0.35, ge=0, le=5)
    paragraph: float = Field(0.8, ge=0, le=10)
    chapter: float = Field(2.0, ge=0, le=30)


class Loudness(Strict):
    """Mastering: the loudness every chunk is brought to (ITU-R BS.1770) and the true-peak ceiling."""

    target_lufs: float = Field(-18.0, ge=-35, le=-10, description="Integrated loudness of each chunk")
    true_peak_db: float = Field(-3.0, ge=-9, le=0, description="No sample (4x oversampled) above this")


class OutputSpec(Strict):
    format: Literal["wav", "mp3", "flac", "ogg", "m4a", "m4b"] = Field(
        "mp3",
        description="ogg: Opus in Ogg; m4a and m4b: AAC in MP4 (m4b: the audiobook kind). Chapters are "
        "marked inside mp3 (ID3 CHAP, the first 255), m4a/m4b (MP4 chapters), flac and ogg (Vorbis "
        "CHAPTERnnn comments); wav carries none",
    )
    bitrate_kbps: int = Field(128, ge=32, le=320, description="Lossy formats (Opus at most 256)")
    preset: Literal["none", "acx"] = Field(
        "none",
        description="acx: what ACX (Audible) asks for: MP3 at 192 kb/s CBR, 44.1 kHz mono, one file per "
        "chapter of at most 120 minutes, RMS -23 to -18 dB, peaks at most -3 dBFS, room tone instead of "
        "digital silence (noise floor at most -60 dB), and a report measured on the encoded files",
    )
    split: Literal["none", "chapter"] = Field(
        "none",
        description="chapter: also one file per chapter (with its own tags and track number), and a ZIP "
        "of them; a chapter longer than max_part_minutes is cut into parts at a pause",
    )
    max_part_minutes: int = Field(
        600, ge=1, le=1440, description="With split: the longest a chapter file may be (acx: 120)"
    )
    readalong: bool = Field(
        False,
        strict=True,
        description="Also a read-along book, book-readalong.epub: an EPUB 3 whose text is highlighted "
        "sentence by sentence as its audio plays (media overlays). An EPUB script keeps its own pages, "
        "styles and images; other scripts get a page per chapter. Its audio is AAC for m4a and m4b, "
        "else MP3",
    )
    loudness: Loudness | None = Field(
        default_factory=lambda: Loudness(),  # noqa: PLW0108
        description="Every chunk is brought to target_lufs (so passages and voices do not jump) under a "
        "true-peak ceiling; null leaves the engine's levels as they are",
    )


class BookMetadata(Strict):
    """Tags written into the output file (the job's title is its title)."""

    author: OptionalLine = Field(None, max_length=1000)
    narrator: OptionalLine = Field(None, max_length=1000)
    publisher: OptionalLine = Field(None, max_length=1000)
    year: int | None = Field(None, ge=1, le=9999)
    language: OptionalLine = Field(None, max_length=35, description="e.g. en, eng, en-GB")
    description: OptionalLines = Field(None, max_length=4000)
    series: OptionalLine = Field(
        None, max_length=1000, description="The series the book belongs to (a library folder, not a tag)"
    )
    series_index: float | None = Field(
        None, ge=0, le=100_000, description="Its position in the series (1, 2, 2.5...)"
    )


class ScriptOptions(Strict):
    """How a book's structure becomes speech (EPUB and Markdown)."""

    front_matter: bool = Field(
        False, description="EPUB: also read the cover, title, copyright and contents pages"
    )
    back_matter: bool = Field(False, description="EPUB: also read the index, colophon and other back matter")
    footnotes: Literal["skip", "chapter_end"] = Field(
        "skip", description="Footnotes are never read where their marker is; chapter_end reads them after it"
    )


CharacterName = Annotated[Line, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]
VoiceRef = Annotated[Line, StringConstraints(min_length=1, max_length=64)]
LineIndex = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,7}$")]


class CastIn(Strict):
    """Who reads the dialogue: each character's voice, a voice for the others, and single lines corrected.
    The job's ``voice`` is the narrator (and reads the dialogue tags)."""

    voices: dict[CharacterName, VoiceRef] = Field(
        default_factory=dict,
        max_length=200,
        description="A voice (id or name of yours) for each character, by its canonical name or any alias "
        "(case-insensitive) as the preview's cast lists them",
    )
    default: VoiceRef | None = Field(
        None, description="The voice of the characters not in `voices`; without it, the narrator reads them"
    )
    lines: dict[LineIndex, CharacterName] = Field(
        default_factory=dict,
        max_length=10_000,
        description="Corrections: the preview's line `index` to the character who says it (`narrator` for "
        "the narrator); a name the rules did not find needs a voice in `voices` or a `default`",
    )
    llm: bool = Field(
        False,
        description="Also ask the server's attribution model (when its operator set one) about the lines "
        "the rules are unsure of; it only labels, the text read is the book's. A job that asks is planned "
        "by a worker, never while the request waits",
    )


class QaOptions(Strict):
    """Chunk QA: every chunk is checked before it counts as done; one that fails is rendered again."""

    enabled: bool = Field(True, description="Check every chunk (empty or silent audio never counts as done)")
    transcript: bool | None = Field(
        None,
        description="Also recognise each chunk and compare it with its text (pocketsphinx, ~1 s of CPU a "
        "chunk); default: on for neural engines, off for espeak (which reads every word it is given)",
    )
    max_rerenders: int = Field(2, ge=0, le=5, description="New takes (new seeds) a failing chunk gets")
    on_fail: Literal["flag", "fail"] = Field(
        "flag", description="A chunk that never passes: kept and flagged, or the job fails naming it"
    )
    thresholds: dict[Line, float] | None = Field(
        None, max_length=30, description="Overrides of the engine's QA thresholds, by name (docs/api.md)"
    )


class AudiobookshelfTarget(Strict):
    """Where in your Audiobookshelf (PUT /v1/integrations/audiobookshelf) the finished book goes."""

    library_id: str = Field(pattern=ABS_ID_PATTERN, description="The library's id (Audiobookshelf's)")
    folder_id: str = Field(pattern=ABS_ID_PATTERN, description="The id of one of the library's folders")


class DeliverIn(Strict):
    """Where the finished book goes besides its download (docs/api.md, "Delivery")."""

    audiobookshelf: AudiobookshelfTarget | None = Field(
        None,
        description="Upload it into your Audiobookshelf server once the job succeeds (retried on 5xx and "
        "timeouts); the job's `delivery` says how it went",
    )
    library_zip: bool = Field(
        False,
        description="Also a ZIP of the book in a library's layout (Author/Series/Title/ with the book, "
        "cover.jpg, desc.txt, reader.txt) in the job's files",
    )


class JobCreate(Strict):
    title: OptionalLine = Field(
        None,
        min_length=1,
        max_length=200,
        description="Required unless the script names one (EPUB, front matter)",
    )
    script: str = Field(
        min_length=1,
        description="The text to read (an EPUB: the file base64-encoded); size limited by the server. A "
        "line holding only `<!-- voice: NAME -->` (an id or name of yours) switches the voice of what "
        "follows; `<!-- voice: default -->` goes back to `voice`; `<!-- break: 2s -->` is a pause",
    )
    script_format: Literal["plain", "markdown", "ssml", "epub"] = Field(
        "plain", description="epub: upload the file (multipart field `script`) or send it base64-encoded"
    )
    script_options: ScriptOptions = Field(default_factory=lambda: ScriptOptions())  # noqa: PLW0108
    voice: Line = Field(min_length=1, max_length=64, description="A voice id or name of yours")
    language: str | None = Field(
        None, pattern=LANGUAGE_PATTERN, description="The script's language; default: the voice's"
    )
    speed: float = Field(1.0, ge=0.5, le=2.0, description="Speaking rate: 1 is the voice's own")
    lexicons: list[Line] = Field(
        default_factory=list,
        max_length=20,
        description="Ids or names of your pronunciation lexicons, applied in order before the voices' own",
    )
    output: OutputSpec = Field(default_factory=lambda: OutputSpec())  # noqa: PLW0108
    pauses: Pauses = Field(default_factory=lambda: Pauses())  # noqa: PLW0108
    metadata: BookMetadata = Field(default_factory=lambda: BookMetadata())  # noqa: PLW0108
    qa: QaOptions = Field(default_factory=lambda: QaOptions())  # noqa: PLW0108
    cast: CastIn | None = Field(
        None,
        description="Read each line of dialogue in its character's voice (see the preview's `cast` and "
        "`lines`); without it, the script is read as it is, by `voice` and its voice directives",
    )
    webhook_url: OptionalLine = Field(
        None,
        max_length=2000,
        description="POSTed once the job ends, signed with your key's webhook secret (X-Tome-Signature)",
    )
    deliver: DeliverIn | None = None


class JobForm(Strict):
    """A job as multipart/form-data: the script is the file field ``script`` (an EPUB, or UTF-8 text)."""

    job: Lines = Field(
        max_length=100_000,
        description="JSON: the fields of the JSON form except `script`; `script_format` defaults to the "
        "file's kind (.epub, .md, .ssml/.xml, else plain)",
    )


class VoiceForm(Strict):
    """The text fields of the multipart voice upload (the reference recording is the file field ``audio``)."""

    name: VoiceName = Field(
        description="1-64 letters, marks and digits (any script), space and ' _ . -; stored in Unicode NFC "
        "with surrounding spaces trimmed and inner runs of spaces made one, and unique among your voices "
        "without regard to case"
    )
    ref_text: Lines = Field(min_length=1, max_length=5000, description="What the reference recording says")
    language: str = Field("en", pattern=LANGUAGE_PATTERN)
    lexicons: list[Line] = Field(
        default_factory=list, max_length=20, description="Default lexicons (ids or names) of the voice"
    )
    force: bool = Field(
        False,
        description="Keep a recording that does not sound like speech (a tone, hiss or music): refused "
        "otherwise (422 reference_not_speech), kept with the finding as a warning",
    )


class VoiceEmbeddingForm(VoiceForm):
    """The text fields of a voice upload that sends a speaker ``embedding`` instead of ``audio``: the
    voice speaks from the embedding alone, so a transcript is optional."""

    ref_text: Lines = Field("", max_length=5000, description="Optional with an embedding")


class VoiceUpdate(Strict):
    """Text fields of a voice re-upload; any of them, and/or a new ``audio`` file."""

    ref_text: OptionalLines = Field(None, min_length=1, max_length=5000)
    language: str | None = Field(None, pattern=LANGUAGE_PATTERN)
    lexicons: list[Line] | None = Field(None, max_length=20)
    force: bool = Field(
        False,
        description="Keep a recording that does not sound like speech (a tone, hiss or music): refused "
        "otherwise (422 reference_not_speech), kept with the finding as a warning",
    )


class ListQuery(Strict):
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0, le=2**63 - 1)


class JobListQuery(ListQuery):
    status: Literal["queued", "running", "stitching", "succeeded", "failed", "cancelled"] | None = None


class VoiceWarning(BaseModel):
    """Something doubtful about the reference recording: it was accepted, but may clone worse."""

    code: str = Field(
        description="noisy, clipped, mostly_silence, quiet, dc_offset, reverberant (checked at upload), "
        "transcript_mismatch, transcript_too_short (checked when the prompt is built; English voices, any "
        "language with Whisper)"
    )
    message: str
    measured: float | None = Field(
        None, description="The value measured (dB, share, word error rate, letters a second...)"
    )


class BuildWaitOut(BaseModel):
    """Why a voice prompt build (and the jobs that need it) does not move, and what to do."""

    code: str = Field(description="`quota_build_seconds_per_day`: the owner's build quota has no room")
    message: str = Field(description="What holds the build back, when it moves by itself, what helps sooner")
    retry_after: int = Field(description="About how many seconds until the build can be sent")
    voice_ids: list[uuid.UUID] = Field(description="The voices whose builds are held back")


class VoiceOut(BaseModel):
    id: uuid.UUID
    name: str
    language: str
    ref_text: str
    audio_duration: float
    audio_sha256: str
    created_at: datetime
    cache_status: Literal["pending", "processing", "ready", "failed", "stale"]
    cache_error: str | None
    cache_built_at: datetime | None
    cache_engine: str | None
    build_waiting: BuildWaitOut | None = Field(
        None, description="While the voice's build is held back (its owner's build quota): why, and when"
    )
    lexicons: list[uuid.UUID] = Field(
        default_factory=list, validation_alias="lexicon_ids", description="Default lexicons, read in order"
    )
    warnings: list[VoiceWarning] = Field(
        default_factory=list, description="What the checks of the reference recording found doubtful"
    )


class VoiceList(BaseModel):
    voices: list[VoiceOut]


class Progress(BaseModel):
    chunks_done: int
    chunks_total: int
    chunks_reused: int = Field(
        0, description="Chunks done with the audio of an earlier render (same voice, text and settings)"
    )
    percent: float
    eta_seconds: float | None


class OutputOut(BaseModel):
    format: str
    duration: float | None
    bytes: int | None
    url: str | None
    preset: str = "none"
    split: str = "none"
    files_url: str | None = Field(
        None, description="Once the job succeeded: every file it made (chapters, ZIP, subtitles, report)"
    )
    report_url: str | None = Field(None, description="With preset acx: the ACX report (JSON)")


class FileOut(BaseModel):
    name: str
    kind: Literal["book", "chapter", "bundle", "subtitles", "manifest", "report", "readalong"]
    format: str
    chapter: int | None = Field(None, description="The chapter's index, for a chapter file")
    part: int | None = Field(None, description="A chapter cut into parts: the part's number (1, 2, ...)")
    title: str | None = None
    duration: float | None = None
    bytes: int
    url: str


class FileList(BaseModel):
    files: list[FileOut]


class FileLinkOut(BaseModel):
    url: str = Field(description="A path of this API that serves the file without a key until expires_at")
    expires_at: datetime


class WebhookOut(BaseModel):
    url: str
    delivered_at: datetime | None
    attempts: int
    error: str | None


class ChapterOut(BaseModel):
    index: int
    title: str | None
    start: float | None = Field(None, description="Where it starts in the book (seconds), once finished")
    state: Literal["pending", "stitching", "ready"] | None = Field(
        None,
        description="For a book of several chapters (GET /v1/jobs/{id} only): pending (chunks still "
        "rendering), stitching, or ready (its file(s) downloadable while later chapters render)",
    )
    duration: float | None = Field(None, description="Seconds of audio in its file(s), once ready")
    url: str | None = Field(None, description="Download of its file (the first part's), while downloadable")
    files: list[FileOut] | None = Field(None, description="Its file(s) while downloadable: one, or its parts")


class AudiobookshelfDeliveryOut(BaseModel):
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    error: str | None = Field(
        description="Why the last attempt failed (HTTP 503, timed out...); on a delivered book, a library "
        "scan that failed"
    )


class DeliveryOut(BaseModel):
    audiobookshelf: AudiobookshelfDeliveryOut | None = None


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None
    line: int | None = None
    column: int | None = None


class QaSummary(BaseModel):
    chunks_flagged: int = Field(description="Chunks kept although they failed QA (see `url`)")
    chunks_rerendered: int = Field(description="Chunks rendered again after failing QA")
    url: str = Field(description="Every chunk's QA: scores, renders, flagged words, audio")


class QaCheckOut(BaseModel):
    name: str
    score: float | None
    limit: str
    passed: bool
    reason: str


class RerenderOut(BaseModel):
    seq: int
    revision: int | None = Field(description="The revision the re-render counted")
    state: str = Field(
        description="rendering (the previous book still served), published (the new take is in the book), "
        "refused (the new take failed: the chunk kept its previous take, the book was stitched again "
        "from it, and error says why) or cancelled (POST .../cancel while it rendered: the same, on request)"
    )
    error: str | None


class ChunkQaOut(BaseModel):
    seq: int
    chapter: int
    text: str = Field(description="What the engine read")
    status: str
    passed: bool | None = Field(description="None: not rendered yet, or QA was off")
    flagged: bool
    renders: int | None = Field(description="Takes it needed (1: passed at once)")
    reasons: list[str]
    checks: list[QaCheckOut]
    missing_words: list[str] = Field(description="Words of the text not heard (transcript check)")
    extra_words: list[str] = Field(description="Words heard that the text does not have")
    audio_url: str | None = Field(description="The chunk's audio (WAV) while it is kept")
    error: str | None = Field(
        None, description="Why its render failed; on a done chunk, why its last re-render was refused"
    )
    accepted_at: datetime | None = Field(
        None,
        description="When its owner accepted its flagged take (POST .../accept): no longer flagged, its "
        "checks and reasons kept as they were; None until then, and again after a re-render",
    )


class JobQaOut(BaseModel):
    job_id: uuid.UUID
    chunks_flagged: int
    chunks_rerendered: int
    chunks: list[ChunkQaOut]


class RerenderIn(Strict):
    """A new take of one chunk of a finished job: the same text with another seed, or edited text."""

    text: str | None = Field(
        None,
        min_length=1,
        max_length=5000,
        description="The chunk's new text, as written (normalised and read through the job's lexicons as "
        "the script was); it must still make one chunk. Default: the same text",
    )
    seed: int | None = Field(
        None, ge=0, le=2**31 - 1, description="The take's seed (default: a new random one)"
    )


class JobQaQuery(Strict):
    flagged: bool = Field(False, description="Only the flagged chunks")
    limit: int = Field(1000, ge=1, le=5000)
    offset: int = Field(0, ge=0, le=2**63 - 1)


class JobOut(BaseModel):
    id: uuid.UUID
    title: str
    status: Literal["queued", "running", "stitching", "succeeded", "failed", "cancelled"]
    voice_id: uuid.UUID = Field(description="The job's own voice (the request's `voice`)")
    voice_ids: list[uuid.UUID] = Field(
        description="Every voice the job's chunks use (`<!-- voice: NAME -->` directives): the job's own "
        "voice first if it is used, then the others in the order they first speak"
    )
    script_format: str
    engine: str
    estimated_seconds: float | None = Field(
        description="The output's length estimated at submission (speech at TOME_SPEECH_CHARS_PER_SECOND "
        "plus pauses): what the job counts against the per-job limit and the daily quota"
    )
    progress: Progress
    warnings: list[str] = Field(
        default_factory=list,
        description="What the plan found worth checking (as the preview's warnings, without the per-chunk "
        "ones): a script in another language than the job's, chapters with nothing but a title, ...",
    )
    error: str | None
    waiting: BuildWaitOut | None = Field(
        None,
        description="While an unfinished job waits for a voice prompt build that its owner's build quota "
        "holds back: why, the voices, and when it moves (by itself)",
    )
    error_detail: ErrorDetail | None = Field(
        None,
        description="For a job whose script failed when a worker planned it: the code, message, line and "
        "column the API answers for a short script",
    )
    output: OutputOut
    revision: int = Field(
        0, description="0 for the first book; +1 for each chunk rendered again on request (POST .../rerender)"
    )
    rerender: RerenderOut | None = Field(
        None, description="The last chunk rendered again on request, and what became of it; None if none was"
    )
    chapters: list[ChapterOut]
    qa: QaSummary
    webhook: WebhookOut | None
    delivery: DeliveryOut | None = Field(
        None, description="With `deliver.audiobookshelf`: how the upload went (never the job's status)"
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expires_at: datetime | None
    expired_at: datetime | None


class JobList(BaseModel):
    jobs: list[JobOut]


class FiredOut(BaseModel):
    rule: str = Field(
        description="A normalisation rule (cardinal, date, ...), lexicon:NAME, sub or say-as:KIND"
    )
    written: str
    spoken: str


class PreviewChunk(BaseModel):
    seq: int
    chapter: int
    text: str = Field(description="What the engine reads: normalised, lexicons applied")
    written: str = Field(description="The text as written")
    voice_id: uuid.UUID
    rate: float = Field(description="Speaking rate: the job's speed times SSML prosody")
    pause_after: float = Field(description="Seconds of silence after the chunk")
    fired: list[FiredOut]
    speaker: str | None = Field(
        None,
        description="With a `cast`: the character who says the chunk, `narrator` for narration; without, "
        "null (a chunk may hold narration and dialogue)",
    )


class CastMemberOut(BaseModel):
    name: str = Field(description="The canonical name: the fullest form of the name found")
    aliases: list[str] = Field(description="Every other form of the name found (Darcy, Mr. Darcy)")
    lines: int
    words: int
    confidence: float = Field(description="The mean confidence of the character's lines, 0-1")
    sample: str = Field(description="One of the character's lines, the surest")


class CastOut(BaseModel):
    characters: list[CastMemberOut] = Field(description="The characters who speak, most lines first")


class LineOut(BaseModel):
    index: int = Field(description="Stable for the same script: what `cast.lines` corrects")
    text: str = Field(description="What is said (an interrupted quotation's parts joined)")
    speaker: str = Field(description="A character's canonical name, or `narrator`")
    attribution: Literal["explicit", "pronoun", "alternation", "llm", "unknown", "corrected"] = Field(
        description="How the speaker was decided: a tag naming them, a pronoun tag, turns in an exchange, "
        "nothing (`unknown`, read by the narrator), the attribution model (`llm`, with `cast.llm`), or the "
        "job's `cast.lines`"
    )
    confidence: float = Field(description="0-1")
    chunk: int | None = Field(description="The chunk that reads it (its first)")


class PreviewChapter(BaseModel):
    index: int
    title: str | None
    chunks: int
    characters: int
    estimated_seconds: float


class PreviewMetadata(BaseModel):
    title: str | None
    author: str | None
    language: str | None


class PreviewOut(BaseModel):
    title: str | None
    language: str = Field(description="The language the script was split and normalised with")
    metadata: PreviewMetadata = Field(description="What the script says about itself")
    estimated_seconds: float
    chapters: list[PreviewChapter]
    chunks: list[PreviewChunk]
    rules: dict[str, int] = Field(description="How often each rule and lexicon entry fired")
    warnings: list[str]
    cast: CastOut = Field(
        description="The characters found speaking (by the rules, and with `cast.llm` a model)"
    )
    lines: list[LineOut] = Field(
        description="Every line of dialogue with its speaker (at most 20,000; a warning says when more)"
    )


class PreviewPending(BaseModel):
    """A preview a worker plans (an EPUB, or a script over the inline cap): poll ``url`` until it answers
    the preview (200) or the error the request would have had (413, 422)."""

    preview: uuid.UUID = Field(description="The preview's id")
    status: Literal["queued", "running"]
    url: str = Field(description="GET it for the preview: 202 while it is planned, then the answer")
    created_at: datetime
    expires_at: datetime = Field(description="After this, the preview is gone (410, then 404)")


class ErrorOut(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    database: str
    storage: str = Field("ok", description="the storage backend (local data directory or S3 bucket)")


class Liveness(BaseModel):
    """GET /livez: the process answers (nothing else is checked)."""

    status: Literal["ok"]


class Readiness(BaseModel):
    """GET /readyz: each dependency's state ("ok", or in a word what went wrong) and which are down."""

    status: Literal["ok", "unavailable"]
    checks: dict[str, str]
    down: list[str]
