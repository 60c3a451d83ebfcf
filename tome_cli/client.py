"""A small typed client of Tome's REST API (httpx), usable from Python scripts as the CLI uses it.

Every failure is a :class:`TomeError`: :class:`ApiError` when the API answered with an error (it carries
the API's ``code``, ``message`` and ``field``, and ``line``/``column`` for script errors), and
:class:`ConnectionProblem` when no answer came (refused, timed out, not HTTP). Responses are the API's JSON
as plain dicts (see docs/api.md for their fields).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

JSON = dict[str, Any]

#: Where each ``script_format`` comes from when it is guessed from a file's extension.
SCRIPT_FORMATS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".epub": "epub",
    ".ssml": "ssml",
    ".xml": "ssml",
}


class TomeError(Exception):
    """Anything that went wrong talking to Tome."""


class ApiError(TomeError):
    """The API answered with ``{"error": {"code", "message", "field", ...}}`` (or a non-JSON error)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.line = line
        self.column = column


class ConnectionProblem(TomeError):
    """No answer from the server: refused, timed out, or the connection broke."""


class AmbiguousId(TomeError):
    """An id prefix that starts more than one id; the message lists them."""


#: The API's largest page of a listing.
PAGE_SIZE = 500
#: How long `tome preview` polls a preview planned by a worker (an EPUB, a long script) before giving up.
PREVIEW_WAIT_SECONDS = 600.0
#: Ids named in an :class:`AmbiguousId` message (the rest are counted).
SHOWN_MATCHES = 10


def full_id(value: str) -> str | None:
    """``value`` as a canonical UUID string when it is a whole one, else None."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def unique_match(kind: str, prefix: str, ids: Sequence[str]) -> str:
    """The one id of ``ids`` that starts with ``prefix`` (case-insensitive); a 404 :class:`ApiError`
    when none does, :class:`AmbiguousId` listing them when several do."""
    wanted = prefix.strip().lower()
    found = [i for i in ids if wanted and i.lower().startswith(wanted)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ApiError(404, "not_found", f"you have no {kind} whose id starts with {prefix!r}", kind)
    shown = ", ".join(found[:SHOWN_MATCHES])
    more = f" and {len(found) - SHOWN_MATCHES} more" if len(found) > SHOWN_MATCHES else ""
    raise AmbiguousId(f"{prefix!r} starts {len(found)} {kind} ids: {shown}{more}; give more of the id")


def script_format_for(path: Path) -> str:
    """``markdown`` for .md, ``epub`` for .epub, ``ssml`` for .ssml/.xml, else ``plain``."""
    return SCRIPT_FORMATS.get(path.suffix.lower(), "plain")


def _error_from(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        reason = response.reason_phrase or "error"
        return ApiError(response.status_code, f"http_{response.status_code}", f"HTTP {reason}")
    return ApiError(
        response.status_code,
        str(error.get("code", f"http_{response.status_code}")),
        str(error.get("message", "")),
        error.get("field"),
        error.get("line"),
        error.get("column"),
    )


def _json_object(response: httpx.Response, url: str) -> JSON:
    try:
        body = response.json()
    except ValueError as exc:
        raise ConnectionProblem(f"{url}: the server did not answer with JSON") from exc
    if not isinstance(body, dict):
        raise ConnectionProblem(f"{url}: the server did not answer with a JSON object")
    return body


def _retry_after(response: httpx.Response) -> float:
    """The seconds a 202's Retry-After asks for, kept between 0.2 and 5 (1 when absent or unreadable)."""
    try:
        seconds = float(response.headers.get("Retry-After", "1"))
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.2), 5.0)


class Client:
    """Talks to one Tome server with one API key. Use it as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": "tome-cli"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            raise ConnectionProblem(f"cannot reach {self._http.base_url}: {exc}") from exc
        if response.is_error:
            raise _error_from(response)
        return response

    def _json(self, method: str, url: str, **kwargs: Any) -> JSON:
        return _json_object(self._request(method, url, **kwargs), url)

    # voices

    def list_voices(self) -> list[JSON]:
        return list(self._json("GET", "/v1/voices")["voices"])

    def get_voice(self, voice_id: str) -> JSON:
        return self._json("GET", f"/v1/voices/{voice_id}")

    def find_voice(self, id_or_name: str) -> JSON:
        """The voice with this id, (exact) name or unique id prefix; an :class:`ApiError` 404
        ``not_found`` if none, :class:`AmbiguousId` when the prefix starts several ids."""
        voices = self.list_voices()
        for voice in voices:
            if id_or_name in (str(voice["id"]), voice["name"]):
                return voice
        try:
            found = unique_match("voice", id_or_name, [str(v["id"]) for v in voices])
        except ApiError:
            raise ApiError(
                404, "not_found", f"you have no voice with id or name {id_or_name!r}", "voice"
            ) from None
        return next(v for v in voices if str(v["id"]) == found)

    def voice_ref(self, value: str) -> str:
        """What to send as a job's ``voice``: a whole id or one of your voices' names as it is (the API
        resolves it), a unique prefix of one of your voices' ids as that id; anything else as it is, for
        the API to refuse naming it. :class:`AmbiguousId` when the prefix starts several ids."""
        if full_id(value) is not None:
            return value
        voices = self.list_voices()
        if any(v["name"] == value for v in voices):
            return value
        try:
            return unique_match("voice", value, [str(v["id"]) for v in voices])
        except ApiError:
            return value

    def delete_voice(self, voice_id: str) -> None:
        self._request("DELETE", f"/v1/voices/{voice_id}")

    def add_voice(self, name: str, audio: Path, ref_text: str, language: str | None = None) -> JSON:
        """Upload a reference recording (202: its speaker prompt is then built in the background)."""
        data = {"name": name, "ref_text": ref_text}
        if language:
            data["language"] = language
        with audio.open("rb") as handle:
            return self._json("POST", "/v1/voices", data=data, files={"audio": (audio.name, handle)})

    def add_voice_from_embedding(
        self, name: str, embedding: Path, ref_text: str | None = None, language: str | None = None
    ) -> JSON:
        """Create a voice from a speaker-embedding file (safetensors) instead of a recording, for an engine
        that has speaker embeddings (qwen3-tts): the voice is ready at once, no prompt is built."""
        data = {"name": name}
        if ref_text:
            data["ref_text"] = ref_text
        if language:
            data["language"] = language
        with embedding.open("rb") as handle:
            return self._json("POST", "/v1/voices", data=data, files={"embedding": (embedding.name, handle)})

    # jobs

    def submit_job(self, script: Path, job: Mapping[str, Any], cover: Path | None = None) -> JSON:
        """``POST /v1/jobs`` as multipart: the file as ``script``, ``job`` (``script_format`` guessed from
        the extension unless given) as JSON, and the ``cover`` image if any."""
        fields = {"script_format": script_format_for(script), **job}
        with ExitStack() as opened:
            files = {"script": (script.name, opened.enter_context(script.open("rb")))}
            if cover is not None:
                files["cover"] = (cover.name, opened.enter_context(cover.open("rb")))
            return self._json("POST", "/v1/jobs", data={"job": json.dumps(fields)}, files=files)

    def preview(self, script: Path, job: Mapping[str, Any], wait: float = PREVIEW_WAIT_SECONDS) -> JSON:
        """``POST /v1/scripts/preview`` with the same body as :meth:`submit_job`: nothing is queued. An
        EPUB or a long script is planned by a worker (202): its ``Location`` is polled, at the pace its
        ``Retry-After`` asks, for up to ``wait`` seconds, until it answers the preview or its error."""
        fields = {"script_format": script_format_for(script), **job}
        with script.open("rb") as handle:
            response = self._request(
                "POST",
                "/v1/scripts/preview",
                data={"job": json.dumps(fields)},
                files={"script": (script.name, handle)},
            )
        deadline = time.monotonic() + wait
        while response.status_code == 202:
            location = response.headers.get("Location")
            if not location:
                raise ConnectionProblem("/v1/scripts/preview: a 202 without a Location to poll")
            if time.monotonic() >= deadline:
                raise ConnectionProblem(f"the preview was not ready after {wait:.0f} s: {location}")
            time.sleep(_retry_after(response))
            response = self._request("GET", location)
        return _json_object(response, "/v1/scripts/preview")

    def job_qa(self, job_id: str, flagged: bool = False) -> JSON:
        """Every chunk's quality checks (``flagged``: only the chunks kept although they failed)."""
        return self._json("GET", f"/v1/jobs/{job_id}/qa", params={"flagged": "true"} if flagged else {})

    def accept_flag(self, job_id: str, seq: int) -> JSON:
        """Accept one flagged chunk as it is: the chunk's QA row, ``accepted`` (see docs/api.md)."""
        return self._json("POST", f"/v1/jobs/{job_id}/chunks/{seq}/accept")

    def rerender(self, job_id: str, seq: int, text: str | None = None) -> JSON:
        """Render one chunk of a finished job again (a new take, or ``text`` instead of its own)."""
        body = {} if text is None else {"text": text}
        return self._json("POST", f"/v1/jobs/{job_id}/chunks/{seq}/rerender", json=body)

    def get_job(self, job_id: str) -> JSON:
        return self._json("GET", f"/v1/jobs/{job_id}")

    def list_jobs(self, status: str | None = None, limit: int | None = None) -> list[JSON]:
        params: dict[str, str | int] = {}
        if status:
            params["status"] = status
        if limit is not None:
            params["limit"] = limit
        return list(self._json("GET", "/v1/jobs", params=params)["jobs"])

    def resolve_job(self, id_or_prefix: str) -> str:
        """The id of your job with this id or unique id prefix: a whole id as it is (the API answers for
        it), a prefix looked up in your jobs (all pages of ``GET /v1/jobs``)."""
        whole = full_id(id_or_prefix)
        if whole is not None:
            return whole
        ids: list[str] = []
        while True:
            page = self._json("GET", "/v1/jobs", params={"limit": PAGE_SIZE, "offset": len(ids)})["jobs"]
            ids += [str(j["id"]) for j in page]
            if len(page) < PAGE_SIZE:
                return unique_match("job", id_or_prefix, ids)

    def list_files(self, job_id: str) -> list[JSON]:
        """Every file of a job: the book, chapter files, the ZIP, subtitles, manifest, ACX report."""
        return list(self._json("GET", f"/v1/jobs/{job_id}/files")["files"])

    def cancel_job(self, job_id: str) -> JSON:
        return self._json("POST", f"/v1/jobs/{job_id}/cancel")

    # admin (an admin key; a user key gets 403)

    # integrations

    def set_audiobookshelf(self, url: str, token: str) -> JSON:
        """Store your Audiobookshelf server and API token (the answer never holds the token)."""
        return self._json("PUT", "/v1/integrations/audiobookshelf", json={"url": url, "token": token})

    def get_audiobookshelf(self) -> JSON:
        return self._json("GET", "/v1/integrations/audiobookshelf")

    def forget_audiobookshelf(self) -> None:
        self._request("DELETE", "/v1/integrations/audiobookshelf")

    def admin_voices(self, cache_status: str | None = None, owner: str | None = None) -> list[JSON]:
        """Every owner's voices with their speaker-prompt state, newest first (all pages)."""
        page_size = 500  # the API's largest page
        params: dict[str, str | int] = {"limit": page_size}
        if cache_status:
            params["cache_status"] = cache_status
        if owner:
            params["owner"] = owner
        found: list[JSON] = []
        while True:
            page = list(
                self._json("GET", "/v1/admin/voices", params={**params, "offset": len(found)})["voices"]
            )
            found += page
            if len(page) < page_size:
                return found

    def admin_rebuild_voice(self, voice_id: str, force: bool = False) -> JSON:
        """Queue a rebuild of one voice's prompt: ``{"voice": ..., "queued": bool}``."""
        return self._json("POST", f"/v1/admin/voices/{voice_id}/cache", json={"force": force})

    def admin_rebuild_caches(self, statuses: Sequence[str] | None = None) -> JSON:
        """Queue rebuilds of every voice in ``statuses`` (or of all voices): ``{"queued", "matched"}``."""
        body: dict[str, Any] = {"status": list(statuses)} if statuses else {"all": True}
        return self._json("POST", "/v1/admin/voice-caches/rebuild", json=body)

    def download(
        self, url: str, dest: Path, on_bytes: Callable[[int, int | None], None] | None = None
    ) -> int:
        """Stream ``url`` (a path such as the job's ``output.url``) to ``dest``, resumably: the bytes go to
        ``.NAME.part`` beside it (with the file's ETag in ``.NAME.part.etag``), renamed to ``dest`` once
        complete. A later call after a broken download asks only for the rest (``Range`` with ``If-Range``:
        a file that changed meanwhile, say a re-rendered book, comes whole). Returns the file's size."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(f".{dest.name}.part")
        tag_file = dest.with_name(f".{dest.name}.part.etag")
        have = part.stat().st_size if part.is_file() else 0
        etag = tag_file.read_text(encoding="utf-8").strip() if tag_file.is_file() else ""
        headers = {"Range": f"bytes={have}-", "If-Range": etag} if have and etag else {}
        try:
            written = self._download_to(url, part, tag_file, headers, on_bytes)
        except ApiError as exc:
            if exc.status != 416 or not headers:
                raise
            written = self._download_to(url, part, tag_file, {}, on_bytes)  # the part is stale or whole
        os.replace(part, dest)
        tag_file.unlink(missing_ok=True)
        return written

    def _download_to(
        self,
        url: str,
        part: Path,
        tag_file: Path,
        headers: dict[str, str],
        on_bytes: Callable[[int, int | None], None] | None,
    ) -> int:
        with self._stream(url, headers) as response:
            resumed = response.status_code == 206
            written = part.stat().st_size if resumed else 0
            if tag := response.headers.get("ETag"):
                tag_file.write_text(tag, encoding="utf-8")
            else:
                tag_file.unlink(missing_ok=True)
            length = response.headers.get("Content-Length")
            total = written + int(length) if length and length.isdigit() else None
            with part.open("ab" if resumed else "wb") as handle:
                try:
                    for block in response.iter_bytes(1 << 16):
                        handle.write(block)
                        written += len(block)
                        if on_bytes:
                            on_bytes(written, total)
                except httpx.TransportError as exc:
                    raise ConnectionProblem(
                        f"the download of {url} broke off after {written} bytes: run it again to resume"
                    ) from exc
        return written

    @contextmanager
    def _stream(self, url: str, headers: dict[str, str]) -> Iterator[httpx.Response]:
        try:
            with self._http.stream("GET", url, headers=headers) as response:
                if response.is_error:
                    response.read()
                    raise _error_from(response)
                yield response
        except httpx.TransportError as exc:
            raise ConnectionProblem(f"cannot reach {self._http.base_url}: {exc}") from exc
