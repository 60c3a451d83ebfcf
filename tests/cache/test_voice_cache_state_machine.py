"""The voice speaker-prompt cache as a state machine (worker/voices/prompts.py), on a real SQLite database,
the real espeak engine and real files.

A hypothesis RuleBasedStateMachine drives one or two voices through uploads, re-uploads, deletions, build
claims, computes, publishes, failures, requested rebuilds, expired leases (a killed worker) and renders,
in any interleaving, and checks after every step what must always hold. Example tests below pin the
ordinary lifecycle, and regression tests (end of file) pin the three bugs found here, now fixed: a stale
build's failure failed the new build of a re-upload of the same recording (fail_build now matches the
claim's token); a prompt written after its voice was deleted stayed on disk; and a build that lost its
lease deleted the shared prompt file the new holder then published (each build now writes its own file).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import event, update

from models import CacheStatus, Voice, unit_of_work, utcnow
from tests.cache.conftest import (
    Samples,
    counter,
    delete_voice,
    get_voice,
    insert_voice,
    make_runtime,
    prompt_files,
    replace_reference,
    spoken,
    voice_folder,
)
from tests.support.apps import close_engine
from tests.support.audio import TRANSCRIPT
from worker import counters
from worker.audio import AudioError, read_wav
from worker.config import load_settings
from worker.engines import EngineError
from worker.runtime import Runtime
from worker.storage.layout import Layout
from worker.voices import prompts as voice_prompts
from worker.voices.prompts import (
    BuildClaim,
    BuildOutcome,
    VoiceCacheFailed,
    VoiceNotReady,
    build_voice,
    claim_build,
    compute_prompt,
    ensure_ready,
    fail_build,
    load_voice_prompt,
    publish_build,
    request_build,
)
from worker.voices.store import Prompt, PromptFileError, cache_key, load_prompt, save_prompt

# -- reference recordings ------------------------------------------------------------------------------
# Rendered once, at import: espeak reading a short sentence at eight different pitches, so that every
# re-upload of a voice can be a recording it never had before (different bytes, different SHA-256).

VARIANT_TEXTS = ("The tide came in.", "A lantern swung.")  # about a second each: quick to encode
VARIANT_PITCHES = (85.0, 105.0, 125.0, 150.0, 175.0, 205.0, 240.0, 280.0)


@dataclass(frozen=True)
class Variant:
    samples: Samples
    rate: int
    text: str


def _render_variants() -> tuple[Variant, ...]:
    variants = []
    for i, f0 in enumerate(VARIANT_PITCHES):
        text = VARIANT_TEXTS[i % len(VARIANT_TEXTS)]
        samples, rate = spoken(text, f0)
        variants.append(Variant(samples, rate, text))
    return tuple(variants)


VARIANTS = _render_variants()
REFERENCE_NAME = re.compile(r"^reference-[0-9a-f]{12}\.wav$")
PROMPT_NAME = re.compile(r"^prompt-[0-9a-f]{24}-[0-9a-f]{16}\.safetensors$")  # key digest, build token
BUILD_ERRORS = (EngineError, AudioError, PromptFileError, FileNotFoundError)  # what build_voice catches


def fresh_prompt(rt: Runtime, audio_path: str, ref_text: str) -> Prompt:
    """What the engine makes of this reference now (compute_prompt reads it the same way)."""
    samples, rate = read_wav(audio_path)
    return rt.engine().encode_speaker(samples, rate, ref_text)


_ENCODED: dict[tuple[str, str], Prompt] = {}


def expected_prompt(rt: Runtime, audio_path: str, ref_text: str) -> Prompt:
    """fresh_prompt, remembered by the content of the file (the encoder is deterministic)."""
    key = (hashlib.sha256(Path(audio_path).read_bytes()).hexdigest(), ref_text)
    if key not in _ENCODED:
        _ENCODED[key] = fresh_prompt(rt, audio_path, ref_text)
    return _ENCODED[key]


@functools.cache
def template_database() -> Path:
    """A database migrated to head once per test process; each example starts from a copy of it."""
    folder = Path(tempfile.mkdtemp(prefix="tome-voice-cache-template-"))
    atexit.register(shutil.rmtree, folder, True)
    rt = make_runtime(folder)
    close_engine(rt.db)
    assert sorted(p.name for p in folder.iterdir()) == ["tome.db"]  # no WAL left to copy
    return folder / "tome.db"


def assert_same_prompt(actual: Prompt, expected: Prompt) -> None:
    assert sorted(actual) == sorted(expected)
    for name in expected:
        assert np.array_equal(actual[name], expected[name]), name


def current_key(rt: Runtime, voice: Voice) -> str:
    engine = rt.engine()
    return cache_key(engine.name, engine.version, voice.audio_sha256, voice.ref_text)


# -- the state machine ---------------------------------------------------------------------------------

ClaimState = Literal["valid", "expired", "superseded", "stale"]


@dataclass(eq=False)
class Held:
    """A build some simulated worker is running: its claim, and its file once computed.

    valid: the voice's current lease holder. expired: its lease ran out (its worker was presumed dead) but
    nobody took the voice over yet, so the build may still finish. superseded: another build claimed the
    voice or published since. stale: the voice was re-uploaded or deleted since the claim. Only a valid or
    expired build may publish or record a failure; the others must leave the voice as it is.
    """

    claim: BuildClaim
    path: Path | None = None
    state: ClaimState = "valid"


@dataclass(eq=False)
class Tracked:
    voice_id: uuid.UUID
    used_variants: set[int]
    claims: list[Held] = field(default_factory=list)
    deleted: bool = False
    status_when_deleted: str | None = None
    built_at_when_deleted: datetime | None = None


PICK = st.integers(min_value=0, max_value=7)
VARIANT = st.integers(min_value=0, max_value=len(VARIANTS) - 1)


class VoiceCacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Hypothesis runs many examples in one test function: each gets its own data dir and database.
        self.tmp = Path(tempfile.mkdtemp(prefix="tome-voice-cache-"))
        try:
            data_dir = self.tmp / "var"
            data_dir.mkdir()
            shutil.copyfile(template_database(), data_dir / "tome.db")
            self.rt = Runtime(load_settings({}, data_dir=data_dir))
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        self.engine = self.rt.engine()
        self.voices: list[Tracked] = []
        voice_prompts._lru = None

    def teardown(self) -> None:
        try:
            self.finish_in_flight_builds()
            self.check_everything()
        finally:
            close_engine(self.rt.db)
            shutil.rmtree(self.tmp, ignore_errors=True)
            voice_prompts._lru = None

    # helpers

    def live(self) -> list[Tracked]:
        return [t for t in self.voices if not t.deleted]

    @staticmethod
    def supersede(tracked: Tracked) -> None:
        for held in tracked.claims:
            if held.state in ("valid", "expired"):
                held.state = "superseded"

    def busy_first(self) -> list[Tracked]:
        """Live voices, those with builds in flight first (hypothesis favours small indexes): that is where
        re-uploads and deletions are interesting."""
        return sorted(self.live(), key=lambda t: (not any(h.path for h in t.claims), not t.claims))

    @staticmethod
    def expired(voice: Voice) -> bool:
        return voice.cache_lease_until is not None and voice.cache_lease_until < utcnow()

    def held(self, *, computed: bool) -> list[tuple[Tracked, Held]]:
        return [(t, h) for t in self.voices for h in t.claims if (h.path is not None) == computed]

    def expected_prompt(self, voice: Voice) -> Prompt:
        return expected_prompt(self.rt, voice.audio_path, voice.ref_text)

    def run_compute(self, tracked: Tracked, held: Held) -> None:
        """compute_prompt, and on failure fail_build, exactly as build_voice does."""
        before = get_voice(self.rt, tracked.voice_id)
        try:
            path = compute_prompt(self.rt, held.claim)
        except BUILD_ERRORS as exc:
            # Our recordings are all good: only a reference replaced or deleted since the claim is missing.
            assert held.state == "stale"  # (so the failure it records must change nothing)
            assert not Path(held.claim.audio_path).exists()
            fail_build(self.rt, held.claim, f"{type(exc).__name__}: {exc}")
            tracked.claims.remove(held)
            after = get_voice(self.rt, tracked.voice_id)
            if not tracked.deleted:  # a stale build's failure never touches the voice's current state
                assert (after.cache_status, after.cache_error) == (before.cache_status, before.cache_error)
            return
        assert path == self.rt.layout.prompt(tracked.voice_id, held.claim.key, held.claim.token)
        assert all(path != h.path for h in tracked.claims)  # every build writes its own file
        assert path.parent == voice_folder(self.rt, tracked.voice_id)
        assert_same_prompt(
            load_prompt(path, self.engine.prompt_shapes),
            expected_prompt(self.rt, held.claim.audio_path, held.claim.ref_text),
        )
        held.path = path

    def run_publish(self, tracked: Tracked, held: Held) -> None:
        assert held.path is not None
        before = get_voice(self.rt, tracked.voice_id)
        outcome = publish_build(self.rt, held.claim, held.path)
        tracked.claims.remove(held)
        after = get_voice(self.rt, tracked.voice_id)
        if held.state in ("valid", "expired"):  # it still holds the voice (even if its lease ran out)
            assert not tracked.deleted
            assert before.cache_status == CacheStatus.PROCESSING
            assert (before.audio_sha256, before.ref_text) == (held.claim.audio_sha256, held.claim.ref_text)
            assert outcome == BuildOutcome.BUILT
            assert after.cache_status == CacheStatus.READY
            assert after.cache_key == held.claim.key == current_key(self.rt, after)
            assert after.cache_path == str(held.path)
            assert after.cache_lease_until is None
            assert prompt_files(self.rt, tracked.voice_id) == [held.path]  # older prompts removed
            self.supersede(tracked)
        else:
            assert outcome == BuildOutcome.DISCARDED
            assert (after.cache_status, after.cache_key, after.cache_path, after.cache_built_at) == (
                before.cache_status,
                before.cache_key,
                before.cache_path,
                before.cache_built_at,
            )
            # Thrown away (each build has its own file, so this touches no other build's prompt).
            assert not held.path.exists(), "a discarded prompt file was left behind"

    def finish_in_flight_builds(self) -> None:
        for tracked, held in self.held(computed=False):
            self.run_compute(tracked, held)
        for tracked, held in self.held(computed=True):
            self.run_publish(tracked, held)
        assert self.held(computed=False) == self.held(computed=True) == []

    # rules

    @initialize(variant=VARIANT)
    def first_upload(self, variant: int) -> None:
        self.upload(variant)

    @precondition(lambda self: len(self.live()) < 2 and len(self.voices) < 4)
    @rule(variant=VARIANT)
    def upload(self, variant: int) -> None:
        v = VARIANTS[variant]
        voice_id = insert_voice(self.rt, v.samples, v.rate, v.text)
        self.voices.append(Tracked(voice_id, {variant}))

    @precondition(lambda self: bool(self.live()))
    @rule(which=PICK, force=st.booleans())
    def build(self, which: int, force: bool) -> None:
        """A worker runs build_voice from start to end (claim, compute, publish, or fail)."""
        live = self.live()
        tracked = live[which % len(live)]
        before = get_voice(self.rt, tracked.voice_id)
        outcome = build_voice(self.rt, tracked.voice_id, force)
        after = get_voice(self.rt, tracked.voice_id)
        lease_held = before.cache_status == CacheStatus.PROCESSING and not self.expired(before)
        if any(h.state == "valid" for h in tracked.claims) or lease_held:
            assert outcome == BuildOutcome.BUSY
            assert after.cache_status == CacheStatus.PROCESSING
        elif outcome == BuildOutcome.ALREADY_READY:
            assert not force
            assert before.cache_status == CacheStatus.READY
        else:
            assert outcome == BuildOutcome.BUILT, outcome  # the recording is good, nothing interferes
            assert after.cache_status == CacheStatus.READY
            self.supersede(tracked)  # whoever held the voice before (its lease expired) lost it

    @precondition(lambda self: bool(self.live()))
    @rule(which=PICK, variant=PICK, then_claim=st.booleans())
    def reupload(self, which: int, variant: int, then_claim: bool) -> None:
        """PUT /v1/voices/{id} with a recording this voice never had; with then_claim, a worker picks up the
        build it enqueues at once (while an older build may still be running)."""
        live = self.busy_first()
        tracked = live[which % len(live)]
        unused = [i for i in range(len(VARIANTS)) if i not in tracked.used_variants]
        if not unused:
            return
        choice = unused[variant % len(unused)]
        tracked.used_variants.add(choice)
        v = VARIANTS[choice]
        replace_reference(self.rt, tracked.voice_id, v.samples, v.rate, v.text)
        for held in tracked.claims:
            held.state = "stale"
        if then_claim:
            self.claim(tracked, force=False, and_compute=False)

    @precondition(lambda self: bool(self.live()))
    @rule(which=PICK, force=st.booleans(), and_compute=st.booleans())
    def begin_build(self, which: int, force: bool, and_compute: bool) -> None:
        """claim_build; with and_compute, the worker also computes its prompt at once (but does not publish
        yet: a re-upload or a deletion can still come in between)."""
        live = self.live()
        self.claim(live[which % len(live)], force, and_compute)

    def claim(self, tracked: Tracked, force: bool, and_compute: bool) -> None:
        before = get_voice(self.rt, tracked.voice_id)
        now = utcnow()
        result = claim_build(self.rt, tracked.voice_id, force)
        holders = [h for h in tracked.claims if h.state == "valid"]
        if holders:
            assert result == BuildOutcome.BUSY, "a second build claimed a voice whose lease is held"
        key = current_key(self.rt, before)
        lease_held = (
            before.cache_status == CacheStatus.PROCESSING
            and before.cache_lease_until is not None
            and before.cache_lease_until >= now
        )
        already = not force and before.cache_status == CacheStatus.READY and before.cache_key == key
        if isinstance(result, BuildClaim):
            assert not lease_held
            assert not already
            after = get_voice(self.rt, tracked.voice_id)
            assert after.cache_status == CacheStatus.PROCESSING
            assert after.cache_lease_until is not None
            assert after.cache_lease_until > now
            assert after.cache_build_token == result.token
            assert result == BuildClaim(
                tracked.voice_id, result.token, key, before.audio_path, before.audio_sha256, before.ref_text
            )
            assert all(result.token != h.claim.token for h in tracked.claims)
            self.supersede(tracked)  # builds that still thought they held the voice no longer do
            held = Held(result)
            tracked.claims.append(held)
            if and_compute:
                self.run_compute(tracked, held)
        elif result == BuildOutcome.ALREADY_READY:
            assert already
        else:
            assert result == BuildOutcome.BUSY
            assert lease_held

    @precondition(lambda self: any(t.claims for t in self.voices))
    @rule(which=PICK)
    def advance(self, which: int) -> None:
        """A build in flight takes its next step: compute its prompt (compute_prompt) or publish it."""
        candidates = [(t, h) for t in self.voices for h in t.claims]
        tracked, held = candidates[which % len(candidates)]
        if held.path is None:
            self.run_compute(tracked, held)
        else:
            self.run_publish(tracked, held)

    @precondition(lambda self: bool(self.held(computed=False)))
    @rule(which=PICK)
    def fail(self, which: int) -> None:
        """The engine refused the reference (fail_build, as build_voice does when compute_prompt raises)."""
        candidates = self.held(computed=False)
        candidates.sort(key=lambda pair: pair[1].state in ("valid", "expired"))  # lost builds first: riskier
        tracked, held = candidates[which % len(candidates)]
        before = get_voice(self.rt, tracked.voice_id)
        fail_build(self.rt, held.claim, "EngineError: the engine refused this reference")
        tracked.claims.remove(held)
        after = get_voice(self.rt, tracked.voice_id)
        if held.state in ("valid", "expired"):
            assert after.cache_status == CacheStatus.FAILED
            assert after.cache_error == "EngineError: the engine refused this reference"
            assert after.cache_lease_until is None
        elif not tracked.deleted:
            assert (after.cache_status, after.cache_error) == (before.cache_status, before.cache_error)

    @precondition(lambda self: bool(self.live()))
    @rule(which=PICK)
    def delete(self, which: int) -> None:
        live = self.busy_first()
        tracked = live[which % len(live)]
        before = get_voice(self.rt, tracked.voice_id)
        delete_voice(self.rt, tracked.voice_id)
        tracked.deleted = True
        tracked.status_when_deleted = before.cache_status
        tracked.built_at_when_deleted = before.cache_built_at
        for held in tracked.claims:
            held.state = "stale"

    @precondition(lambda self: bool(self.live()))
    @rule(which=PICK, force=st.booleans())
    def request_rebuild(self, which: int, force: bool) -> None:
        live = self.live()
        tracked = live[which % len(live)]
        before = get_voice(self.rt, tracked.voice_id)
        changed = request_build(self.rt, tracked.voice_id, force)
        after = get_voice(self.rt, tracked.voice_id)
        current = before.cache_status == CacheStatus.READY and before.cache_key == current_key(
            self.rt, before
        )
        expected = before.cache_status in (CacheStatus.READY, CacheStatus.FAILED, CacheStatus.STALE) and (
            force or not current
        )
        assert changed == expected
        assert after.cache_status == (CacheStatus.PENDING if expected else before.cache_status)

    @precondition(lambda self: any(h.state == "valid" for t in self.voices for h in t.claims))
    @rule(which=PICK, then_claim=st.booleans(), and_compute=st.booleans())
    def expire_lease(self, which: int, then_claim: bool, and_compute: bool) -> None:
        """The worker holding the voice's build lease stopped answering (killed, or frozen: it may still
        wake up): its lease runs out. With then_claim, another worker takes the build over at once."""
        holders = [t for t in self.voices if any(h.state == "valid" for h in t.claims)]
        tracked = holders[which % len(holders)]
        with unit_of_work(self.rt.sessions) as session:
            session.execute(
                update(Voice)
                .where(Voice.id == tracked.voice_id, Voice.cache_status == CacheStatus.PROCESSING)
                .values(cache_lease_until=utcnow() - timedelta(seconds=1))
            )
        for held in tracked.claims:
            if held.state == "valid":
                held.state = "expired"
        if then_claim:
            self.claim(tracked, force=False, and_compute=and_compute)

    @precondition(lambda self: bool(self.voices))
    @rule(which=PICK)
    def render(self, which: int) -> None:
        voices = self.live() + [t for t in self.voices if t.deleted]
        tracked = voices[which % len(voices)]
        voice = get_voice(self.rt, tracked.voice_id)
        try:
            prompt, language = load_voice_prompt(self.rt, tracked.voice_id)
        except VoiceCacheFailed:
            assert tracked.deleted
            return
        except VoiceNotReady:
            assert not tracked.deleted
            assert voice.cache_status != CacheStatus.READY, "a ready voice's prompt could not be loaded"
            return
        assert not tracked.deleted
        assert voice.cache_status == CacheStatus.READY
        assert language == voice.language
        # The prompt of the voice's CURRENT recording and transcript, whatever was re-uploaded when.
        assert_same_prompt(prompt, fresh_prompt(self.rt, voice.audio_path, voice.ref_text))

    # invariants

    @invariant()
    def check_everything(self) -> None:
        now = utcnow()
        data_dir = self.rt.settings.storage.data_dir.resolve()
        for tracked in self.voices:
            voice = get_voice(self.rt, tracked.voice_id)
            folder = voice_folder(self.rt, tracked.voice_id)
            for held in tracked.claims:
                assert Path(held.claim.audio_path).parent == folder
                assert held.path is None or held.path.parent == folder
            if tracked.deleted:
                assert voice.deleted_at is not None
                if tracked.status_when_deleted != CacheStatus.READY:
                    assert voice.cache_status != CacheStatus.READY, "a deleted voice became ready"
                assert voice.cache_built_at == tracked.built_at_when_deleted, "a deleted voice was published"
                with pytest.raises(VoiceCacheFailed):
                    load_voice_prompt(self.rt, tracked.voice_id)
                assert claim_build(self.rt, tracked.voice_id, force=True) == BuildOutcome.GONE
                assert request_build(self.rt, tracked.voice_id, force=True) is False
                if not tracked.claims:  # every build in flight has published or failed
                    assert prompt_files(self.rt, tracked.voice_id) == []
                    assert not folder.exists(), f"files of a deleted voice: {list(folder.iterdir())}"
                continue

            assert voice.deleted_at is None
            assert Path(voice.audio_path).is_file()
            assert Path(voice.audio_path).parent == folder
            if not tracked.claims:  # builds all finished: no prompt file but the voice's own is left
                assert {str(p) for p in prompt_files(self.rt, tracked.voice_id)} <= {voice.cache_path}
            valid = [h for h in tracked.claims if h.state == "valid"]
            assert len(valid) <= 1
            if valid:
                assert voice.cache_status == CacheStatus.PROCESSING
                assert voice.cache_lease_until is not None
                assert voice.cache_lease_until > now
                assert valid[0].claim.audio_sha256 == voice.audio_sha256
            if voice.cache_status == CacheStatus.PROCESSING:
                assert voice.cache_lease_until is not None
            if voice.cache_status == CacheStatus.READY:
                key = current_key(self.rt, voice)
                assert voice.cache_key == key
                assert voice.cache_path is not None
                assert Path(voice.cache_path).parent == folder
                assert Path(voice.cache_path).name.startswith(
                    Layout.under(data_dir).prompt(tracked.voice_id, key).stem
                )
                assert voice.cache_engine == f"{self.engine.name} {self.engine.version}"
                assert voice.cache_built_at is not None
                path = Path(voice.cache_path)
                assert path.is_file()
                stored = load_prompt(path, self.engine.prompt_shapes)
                assert_same_prompt(stored, self.expected_prompt(voice))
                # And what a worker rendering with it now gets (from its LRU or the file): the prompt of
                # the voice's current recording and transcript.
                loaded, language = load_voice_prompt(self.rt, tracked.voice_id)
                assert language == voice.language
                assert_same_prompt(loaded, self.expected_prompt(voice))

        # Everything under <data_dir>/voices is a file of one of our voices, in that voice's own folder.
        known = {str(t.voice_id) for t in self.voices}
        voices_dir = data_dir / "voices"
        for path in voices_dir.rglob("*") if voices_dir.exists() else []:
            parts = path.relative_to(voices_dir).parts
            assert parts[0] in known, f"{path} is in no voice's folder"
            if len(parts) == 1:
                assert path.is_dir()
                assert not path.is_symlink()
            else:
                assert len(parts) == 2, f"{path} is nested in a voice folder"
                assert REFERENCE_NAME.match(parts[1]) or PROMPT_NAME.match(parts[1]), path


def test_voice_cache_state_machine() -> None:
    run_state_machine_as_test(
        VoiceCacheMachine,
        settings=settings(
            max_examples=50,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


# -- the lifecycle, step by step ---------------------------------------------------------------------------


def builds(rt: Runtime) -> float:
    return counter(rt, counters.BUILDS)


def test_build_publishes_a_ready_prompt_and_counts_one_build(rt: Runtime, voice_id: uuid.UUID) -> None:
    assert get_voice(rt, voice_id).cache_status == CacheStatus.PENDING
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    voice = get_voice(rt, voice_id)
    engine = rt.engine()
    assert voice.cache_status == CacheStatus.READY
    assert voice.cache_engine == f"{engine.name} {engine.version}"
    assert voice.cache_built_at is not None
    assert voice.cache_built_at <= utcnow()
    assert voice.cache_key == current_key(rt, voice)
    assert (voice.cache_error, voice.cache_lease_until) == (None, None)
    assert voice.cache_path is not None
    assert voice.cache_build_token is not None
    assert voice.cache_path == str(rt.layout.prompt(voice_id, voice.cache_key, voice.cache_build_token))
    assert prompt_files(rt, voice_id) == [Path(voice.cache_path)]
    assert_same_prompt(
        load_prompt(Path(voice.cache_path), engine.prompt_shapes),
        fresh_prompt(rt, voice.audio_path, voice.ref_text),
    )
    assert builds(rt) == 1
    assert counter(rt, counters.BUILD_SECONDS) > 0
    assert ensure_ready(rt, voice_id) is True


def test_building_a_ready_voice_again_changes_nothing(rt: Runtime, voice_id: uuid.UUID) -> None:
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    first = get_voice(rt, voice_id)
    assert build_voice(rt, voice_id) == BuildOutcome.ALREADY_READY
    assert builds(rt) == 1
    again = get_voice(rt, voice_id)
    assert (again.cache_status, again.cache_path, again.cache_built_at) == (
        CacheStatus.READY,
        first.cache_path,
        first.cache_built_at,
    )


def test_forced_build_rebuilds_in_place(rt: Runtime, voice_id: uuid.UUID) -> None:
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    first = get_voice(rt, voice_id)
    assert build_voice(rt, voice_id, force=True) == BuildOutcome.BUILT
    again = get_voice(rt, voice_id)
    assert builds(rt) == 2
    assert again.cache_status == CacheStatus.READY
    assert again.cache_path != first.cache_path  # a new file, and the old one removed
    assert first.cache_built_at is not None
    assert again.cache_built_at is not None
    assert again.cache_built_at > first.cache_built_at
    assert prompt_files(rt, voice_id) == [Path(str(again.cache_path))]


def test_request_build_only_changes_a_voice_that_needs_or_is_forced_into_a_build(
    rt: Runtime, voice_id: uuid.UUID
) -> None:
    assert request_build(rt, voice_id, force=False) is False  # pending already
    assert request_build(rt, voice_id, force=True) is False
    claim = claim_build(rt, voice_id)
    assert isinstance(claim, BuildClaim)
    assert request_build(rt, voice_id, force=True) is False  # a build is running
    assert publish_build(rt, claim, compute_prompt(rt, claim)) == BuildOutcome.BUILT

    assert request_build(rt, voice_id, force=False) is False  # ready and current
    assert get_voice(rt, voice_id).cache_status == CacheStatus.READY
    assert request_build(rt, voice_id, force=True) is True
    assert get_voice(rt, voice_id).cache_status == CacheStatus.PENDING
    with pytest.raises(VoiceNotReady):
        load_voice_prompt(rt, voice_id)
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT

    delete_voice(rt, voice_id)
    assert request_build(rt, voice_id, force=True) is False
    assert build_voice(rt, voice_id) == BuildOutcome.GONE


def test_prompt_of_an_older_engine_version_is_stale_and_never_reused(
    rt: Runtime, voice_id: uuid.UUID
) -> None:
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    load_voice_prompt(rt, voice_id)  # now in this process's LRU too
    voice = get_voice(rt, voice_id)
    old_key = cache_key(rt.engine().name, "espeak-ng 1.51.0/prompt-v0", voice.audio_sha256, voice.ref_text)
    with unit_of_work(rt.sessions) as session:  # what a prompt built by an older engine looks like
        session.execute(update(Voice).where(Voice.id == voice_id).values(cache_key=old_key))

    with pytest.raises(VoiceNotReady):
        load_voice_prompt(rt, voice_id)  # not even from the LRU, not even before anyone marked it
    assert ensure_ready(rt, voice_id) is False
    assert get_voice(rt, voice_id).cache_status == CacheStatus.STALE
    with pytest.raises(VoiceNotReady):
        load_voice_prompt(rt, voice_id)
    assert request_build(rt, voice_id, force=False) is True
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    rebuilt = get_voice(rt, voice_id)
    assert rebuilt.cache_key == current_key(rt, rebuilt)
    load_voice_prompt(rt, voice_id)


def test_a_corrupt_prompt_file_is_never_used_and_makes_the_voice_stale(
    rt: Runtime, voice_id: uuid.UUID
) -> None:
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    path = Path(str(get_voice(rt, voice_id).cache_path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])

    with pytest.raises(VoiceNotReady):
        load_voice_prompt(rt, voice_id)
    voice = get_voice(rt, voice_id)
    assert voice.cache_status == CacheStatus.STALE
    assert voice.cache_error is not None
    assert path.name in voice.cache_error
    assert ensure_ready(rt, voice_id) is False
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    prompt, _ = load_voice_prompt(rt, voice_id)
    assert_same_prompt(prompt, fresh_prompt(rt, voice.audio_path, voice.ref_text))


def test_second_load_in_a_process_is_an_lru_hit_that_reads_no_file(rt: Runtime, voice_id: uuid.UUID) -> None:
    voice_prompts._lru = None
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    first, language = load_voice_prompt(rt, voice_id)
    assert language == "en"
    assert (counter(rt, counters.MISSES), counter(rt, counters.HITS)) == (1, 0)

    Path(str(get_voice(rt, voice_id).cache_path)).unlink()  # a second load that read the file would fail
    first["f0_median_hz"][0] = -1.0  # and what the first caller does with its copy does not matter
    second, _ = load_voice_prompt(rt, voice_id)
    assert (counter(rt, counters.MISSES), counter(rt, counters.HITS)) == (1, 1)
    voice = get_voice(rt, voice_id)
    assert voice.cache_status == CacheStatus.READY
    assert_same_prompt(second, fresh_prompt(rt, voice.audio_path, voice.ref_text))


def test_failed_build_fails_callers_with_the_voice_name_and_the_reason(rt: Runtime) -> None:
    samples, rate = spoken("Hi.")
    short = np.ascontiguousarray(samples[: int(0.3 * rate)])  # shorter than the engine can analyse
    voice_id = insert_voice(rt, short, rate, "Hi.", name="Brief")
    assert build_voice(rt, voice_id) == BuildOutcome.FAILED
    voice = get_voice(rt, voice_id)
    assert voice.cache_status == CacheStatus.FAILED
    assert voice.cache_error is not None
    assert voice.cache_error.startswith("EngineError: reference audio is too short")
    assert builds(rt) == 0
    with pytest.raises(VoiceCacheFailed) as caught:
        ensure_ready(rt, voice_id)
    assert "'Brief'" in str(caught.value)
    assert str(voice_id) in str(caught.value)
    assert voice.cache_error in str(caught.value)
    with pytest.raises(VoiceNotReady):
        load_voice_prompt(rt, voice_id)
    assert prompt_files(rt, voice_id) == []


def test_a_failed_builds_reason_names_no_server_path(rt: Runtime, voice_id: uuid.UUID) -> None:
    """The reference file gone under the build (FileNotFoundError names its path): the voice fails at
    once, its reason without the path."""
    Path(get_voice(rt, voice_id).audio_path).unlink()
    assert build_voice(rt, voice_id) == BuildOutcome.FAILED
    voice = get_voice(rt, voice_id)
    assert voice.cache_status == CacheStatus.FAILED
    assert voice.cache_error is not None
    assert voice.cache_error.startswith("FileNotFoundError: ")
    assert "<file>" in voice.cache_error
    assert str(voice_folder(rt, voice_id)) not in voice.cache_error
    assert voice.cache_lease_until is None


def test_a_build_whose_worker_stops_gives_its_claim_back_at_once(
    rt: Runtime, voice_id: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stopping(*args: object) -> None:
        raise KeyboardInterrupt  # a BaseException: the worker is shutting down mid-build

    monkeypatch.setattr(voice_prompts, "compute_prompt", stopping)
    with pytest.raises(KeyboardInterrupt):
        build_voice(rt, voice_id)
    assert get_voice(rt, voice_id).cache_status == CacheStatus.PENDING
    monkeypatch.undo()
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT  # not busy until the lease expires


def test_a_claim_is_exclusive_until_its_lease_expires(rt: Runtime, voice_id: uuid.UUID) -> None:
    first = claim_build(rt, voice_id)
    assert isinstance(first, BuildClaim)
    assert claim_build(rt, voice_id) == BuildOutcome.BUSY
    assert claim_build(rt, voice_id, force=True) == BuildOutcome.BUSY
    assert build_voice(rt, voice_id) == BuildOutcome.BUSY
    with unit_of_work(rt.sessions) as session:  # its worker was killed
        session.execute(
            update(Voice)
            .where(Voice.id == voice_id)
            .values(cache_lease_until=utcnow() - timedelta(seconds=1))
        )
    second = claim_build(rt, voice_id)
    assert isinstance(first, BuildClaim)
    assert isinstance(second, BuildClaim)
    assert second.token != first.token, "the new holder has its own token; the dead one can't publish"
    assert dataclasses.replace(second, token=first.token) == first  # the same build, taken over
    assert claim_build(rt, voice_id) == BuildOutcome.BUSY
    lease = get_voice(rt, voice_id).cache_lease_until
    assert lease is not None
    assert lease > utcnow() + timedelta(seconds=rt.settings.voices.build_lease_seconds - 60)


def test_reupload_during_a_build_discards_its_result_and_the_next_build_uses_the_new_audio(
    rt: Runtime, voice_id: uuid.UUID
) -> None:
    claim = claim_build(rt, voice_id)
    assert isinstance(claim, BuildClaim)
    old_path = compute_prompt(rt, claim)  # the build read the old recording ...
    new = VARIANTS[6]
    replace_reference(rt, voice_id, new.samples, new.rate, new.text)  # ... and the owner replaced it
    assert publish_build(rt, claim, old_path) == BuildOutcome.DISCARDED
    assert not old_path.exists()
    voice = get_voice(rt, voice_id)
    assert voice.cache_status == CacheStatus.PENDING
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    prompt, _ = load_voice_prompt(rt, voice_id)
    assert_same_prompt(prompt, fresh_prompt(rt, voice.audio_path, new.text))
    old = rt.engine().encode_speaker(*spoken(), TRANSCRIPT)
    assert not np.array_equal(prompt["f0_median_hz"], old["f0_median_hz"])


def test_delete_during_a_build_discards_its_result_and_leaves_no_files(
    rt: Runtime, voice_id: uuid.UUID
) -> None:
    claim = claim_build(rt, voice_id)
    assert isinstance(claim, BuildClaim)
    path = compute_prompt(rt, claim)
    delete_voice(rt, voice_id)
    assert publish_build(rt, claim, path) == BuildOutcome.DISCARDED
    assert not voice_folder(rt, voice_id).exists()
    assert get_voice(rt, voice_id).cache_status == CacheStatus.PROCESSING  # never ready
    with pytest.raises(VoiceCacheFailed):
        load_voice_prompt(rt, voice_id)
    with pytest.raises(VoiceCacheFailed, match="deleted"):
        ensure_ready(rt, voice_id)


# -- bugs ------------------------------------------------------------------------------------------------


def test_stale_build_failure_does_not_fail_the_build_of_a_reupload_of_the_same_recording(
    rt: Runtime, voice_id: uuid.UUID
) -> None:
    samples, rate = spoken()
    stale = claim_build(rt, voice_id)  # worker A starts building the first upload
    assert isinstance(stale, BuildClaim)
    other = VARIANTS[2]
    replace_reference(rt, voice_id, other.samples, other.rate, other.text)  # the owner uploads another take
    replace_reference(rt, voice_id, samples, rate, TRANSCRIPT)  # ... and goes back to the first one
    current = claim_build(rt, voice_id)  # worker B builds the voice as it is now
    assert isinstance(current, BuildClaim)
    assert current.key == stale.key
    assert current.audio_path != stale.audio_path

    # Worker A, as build_voice does: its reference file is gone, so it records a failure.
    with pytest.raises(FileNotFoundError):
        compute_prompt(rt, stale)
    fail_build(rt, stale, "FileNotFoundError: reference removed")
    assert get_voice(rt, voice_id).cache_status == CacheStatus.PROCESSING, "A's failure hit B's build"

    assert publish_build(rt, current, compute_prompt(rt, current)) == BuildOutcome.BUILT
    assert ensure_ready(rt, voice_id) is True


def test_prompt_written_after_the_voice_was_deleted_is_removed_when_its_build_is_discarded(
    rt: Runtime, voice_id: uuid.UUID
) -> None:
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    assert request_build(rt, voice_id, force=True) is True  # e.g. an admin's forced rebuild
    claim = claim_build(rt, voice_id)
    assert isinstance(claim, BuildClaim)
    # compute_prompt, with the owner's DELETE landing between its read and its write (replayed step by step
    # so that the interleaving is certain): read and encode the reference ...
    samples, rate = read_wav(claim.audio_path)
    tensors = rt.engine().encode_speaker(samples, rate, claim.ref_text)
    delete_voice(rt, voice_id)  # ... the voice is deleted and its folder removed ...
    path = rt.layout.prompt(claim.voice_id, claim.key, claim.token)  # ... then it writes
    save_prompt(path, tensors, {"cache_key": claim.key, "voice_id": str(claim.voice_id)})

    assert publish_build(rt, claim, path) == BuildOutcome.DISCARDED
    assert prompt_files(rt, voice_id) == [], "the prompt of a deleted voice was left on disk"
    assert not voice_folder(rt, voice_id).exists()


def test_a_build_that_lost_its_lease_does_not_delete_the_prompt_the_new_holder_publishes(
    rt: Runtime, voice_id: uuid.UUID
) -> None:
    frozen = claim_build(rt, voice_id)  # worker A takes the build, then stops answering
    assert isinstance(frozen, BuildClaim)
    with unit_of_work(rt.sessions) as session:
        session.execute(
            update(Voice)
            .where(Voice.id == voice_id)
            .values(cache_lease_until=utcnow() - timedelta(seconds=1))
        )
    current = claim_build(rt, voice_id)  # worker B takes it over
    assert isinstance(current, BuildClaim)
    current_path = compute_prompt(rt, current)
    frozen_path = compute_prompt(rt, frozen)  # A wakes up and finishes its work ...
    assert frozen_path != current_path
    assert publish_build(rt, frozen, frozen_path) == BuildOutcome.DISCARDED  # ... but lost the voice
    assert not frozen_path.exists()

    assert publish_build(rt, current, current_path) == BuildOutcome.BUILT
    voice = get_voice(rt, voice_id)
    assert voice.cache_status == CacheStatus.READY
    assert Path(str(voice.cache_path)).is_file(), "a ready voice whose prompt file was deleted"
    prompt, _ = load_voice_prompt(rt, voice_id)
    assert_same_prompt(prompt, fresh_prompt(rt, voice.audio_path, voice.ref_text))


def test_a_build_published_while_a_caller_checks_the_voice_stays_ready(
    rt: Runtime, voice_id: uuid.UUID
) -> None:
    """A caller polling a voice whose build runs reads it `processing` with the key it will be published
    with; the build publishes right after that read. The caller must not then mark the fresh prompt
    stale (it once did: a speech request polling for a build undid every build it waited for)."""
    assert build_voice(rt, voice_id) == BuildOutcome.BUILT
    assert request_build(rt, voice_id, force=True) is True
    claim = claim_build(rt, voice_id)
    assert isinstance(claim, BuildClaim)
    path = compute_prompt(rt, claim)
    published: list[BuildOutcome] = []

    def publish_after_the_read(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if not published and statement.lstrip().upper().startswith("SELECT") and "voices" in statement:
            published.append(publish_build(rt, claim, path))

    event.listen(rt.db, "after_cursor_execute", publish_after_the_read)
    try:
        assert ensure_ready(rt, voice_id) is False  # it read the voice before the build published
    finally:
        event.remove(rt.db, "after_cursor_execute", publish_after_the_read)
    assert published == [BuildOutcome.BUILT]
    assert get_voice(rt, voice_id).cache_status == CacheStatus.READY
    assert ensure_ready(rt, voice_id) is True
