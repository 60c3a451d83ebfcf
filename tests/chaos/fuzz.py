"""Schema-driven fuzzing of the API in-process: schemathesis reads the app's own /openapi.json over WSGI
(no network, no server) and generates requests for every operation; the invariant is that nothing
answers with a 5xx or makes the app raise.

``run_schemathesis(app, headers, max_examples, stateful)`` runs, for every operation in the spec, up to
``max_examples`` generated cases in each generation mode (positive: requests the schema allows; negative:
requests it forbids, including a missing or mangled ``Authorization`` header) with the given user key,
then the admin operations again with ``admin_headers`` when given (with the user key they prove the 403).
It never stops at a failure: every case runs, and the first few failing requests are kept with the
server's traceback (the app logs it before answering 500).

Before fuzzing, a real voice is uploaded for the user (a short tone), and a schema hook substitutes that
voice's name into half of the generated ``POST /v1/jobs`` bodies and a decodable WAV into half of the
generated voice uploads: without that, generated jobs would all stop at "unknown voice" and generated
uploads at "undecodable audio", and the code behind those checks (script parsing, chunking, storing,
enqueueing) would never be reached.

Stateful mode runs schemathesis's state machine. Our spec declares no OpenAPI links, but schemathesis 4
infers them from the schemas (``VoiceOut.id`` -> ``{voice_id}``, ``JobOut.id`` -> ``{job_id}``), so a
scenario chains create -> get / cancel / audio / replace / delete / admin rebuild on ids the API
actually returned. Each scenario runs as a fresh owner (a new key and seeded voice), so it starts from
the same state whatever ran before; each step counts as a case.

``python -m tests.chaos.fuzz`` runs the full-size fuzz and the hostile corpus on apps of its own in a
temporary directory and exits non-zero on any server error or broken invariant.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import requests
import schemathesis
from flask import Flask
from hypothesis import strategies as st
from hypothesis.stateful import get_state_machine_test
from schemathesis import Case, GenerationMode, HookContext
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.schemas import OpenApiSchema

from tests.chaos.hostile import capture_app_errors, run_hostile, seed_voice, tone_wav
from webapi.cli import mint_key

AnyCase = Case[Any]
Operation = schemathesis.APIOperation[Any, Any, Any, Any]

SEED_VOICE = "fuzz-seed-voice"
MAX_KEPT_FAILURES = 10
ADMIN_TAG = "admin"
CI_MAX_EXAMPLES = 7
"""Per operation and mode: about 250 cases with the stateful steps, a few seconds (test_fuzz.py)."""
FULL_MAX_EXAMPLES = 40
"""Per operation and mode: about 1,500 cases with the stateful steps (``python -m tests.chaos.fuzz``)."""


@dataclass(frozen=True)
class FuzzFailure:
    """One request that got a 5xx (or made the app raise)."""

    operation: str
    mode: str
    status: int
    request: str
    response: str
    traceback: str | None = None

    def describe(self) -> str:
        parts = [f"{self.operation} [{self.mode}] -> {self.status}", f"  request: {self.request}"]
        if self.response:
            parts.append(f"  response: {self.response}")
        if self.traceback:
            parts.append("  traceback:\n" + self.traceback)
        return "\n".join(parts)


@dataclass
class FuzzReport:
    cases: int = 0
    server_errors: int = 0
    failures: list[FuzzFailure] = field(default_factory=list)
    """The first ``MAX_KEPT_FAILURES`` server errors."""
    statuses: Counter[int] = field(default_factory=Counter)
    per_operation: Counter[str] = field(default_factory=Counter)
    stateful_steps: int = 0
    stateful_scenarios: int = 0
    stateful_restarts: int = 0
    stateful_statuses: Counter[str] = field(default_factory=Counter)
    """``"<operation> <status>"`` of every stateful step: which links reached a live object."""
    operations: list[str] = field(default_factory=list)
    """Every operation in the spec (``per_operation`` says how many cases each got)."""
    unsatisfiable: list[str] = field(default_factory=list)
    slowest_ms: float = 0.0
    slowest_request: str = ""
    seconds: float = 0.0

    def record(self, case: AnyCase, mode: str, status: int, elapsed_s: float) -> None:
        operation = case.operation.label
        self.cases += 1
        self.per_operation[operation] += 1
        self.statuses[status] += 1
        if mode == "stateful":
            self.stateful_steps += 1
            self.stateful_statuses[f"{operation} {status}"] += 1
        if elapsed_s * 1000 > self.slowest_ms:
            self.slowest_ms = elapsed_s * 1000
            self.slowest_request = describe_case(case)

    def fail(self, failure: FuzzFailure) -> None:
        self.server_errors += 1
        if len(self.failures) < MAX_KEPT_FAILURES:
            self.failures.append(failure)

    def summary(self) -> str:
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(self.statuses.items()))
        lines = [
            f"{self.cases} cases ({self.stateful_steps} stateful steps) over {len(self.per_operation)} "
            f"operations in {self.seconds:.1f} s; {self.server_errors} server errors",
            f"statuses: {statuses}",
            f"slowest: {self.slowest_ms:.0f} ms ({self.slowest_request})",
        ]
        if self.stateful_scenarios:
            linked = ", ".join(f"{k}: {n}" for k, n in sorted(self.stateful_statuses.items()))
            lines.append(
                f"stateful: {self.stateful_scenarios} scenarios, {self.stateful_restarts} restarts; {linked}"
            )
        if self.unsatisfiable:
            lines.append("nothing to generate for: " + ", ".join(self.unsatisfiable))
        lines += [f.describe() for f in self.failures]
        return "\n".join(lines)


def _clip(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def describe_case(case: AnyCase) -> str:
    """The request as a curl command (the Authorization value is filtered out)."""
    try:
        return _clip(case.as_curl_command(), 1000)
    except Exception:  # some negative cases cannot be rendered; their parts still say what was sent
        return _clip(f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r}", 1000)


# No worker runs beside the fuzzed app: POST /v1/audio/speech with a live voice waits this long for one,
# then answers 503 with Retry-After (its documented answer when no worker rendered in time).
SPEECH_WAIT_S = 1.0
NO_WORKER_CODES = frozenset({"speech_timeout"})


def no_worker_answer(response: schemathesis.Response) -> bool:
    """A 503 with Retry-After whose error says no worker rendered in time: the API doing what it
    promises on a stack without workers, not a server error."""
    if response.status_code != 503 or "retry-after" not in {k.lower() for k in response.headers}:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get("code") in NO_WORKER_CODES


class _Runner:
    """Sends cases with fixed auth headers and records them in a report (never raises for a 5xx)."""

    def __init__(self, report: FuzzReport) -> None:
        self.report = report

    def send(self, case: AnyCase, headers: Mapping[str, str], mode: str) -> schemathesis.Response | None:
        """The response, or ``None`` if the app raised (recorded as a 500 with its traceback)."""
        with capture_app_errors() as errors:
            started = time.perf_counter()
            try:
                response = case.call(headers=dict(headers))
            except Exception as exc:
                # The WSGI transport re-raises what the app raised outside its error handlers.
                self.report.record(case, mode, 500, time.perf_counter() - started)
                self.report.fail(
                    FuzzFailure(
                        case.operation.label,
                        mode,
                        500,
                        describe_case(case),
                        f"{type(exc).__name__}: {exc}",
                        "".join(traceback.format_exception(exc)),
                    )
                )
                return None
            elapsed = time.perf_counter() - started
        self.report.record(case, mode, response.status_code, elapsed)
        if response.status_code >= 500 and not no_worker_answer(response):
            self.report.fail(
                FuzzFailure(
                    case.operation.label,
                    mode,
                    response.status_code,
                    describe_case(case),
                    _clip(response.text),
                    errors.records[-1] if errors.records else None,
                )
            )
        return response


def _settings(max_examples: int, **extra: Any) -> hypothesis.settings:
    return hypothesis.settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(hypothesis.HealthCheck),
        print_blob=False,
        verbosity=hypothesis.Verbosity.quiet,
        **extra,
    )


def _fuzz_operation(
    runner: _Runner,
    operation: Operation,
    headers: Mapping[str, str],
    mode: GenerationMode,
    max_examples: int,
    seed: int | None,
) -> None:
    @_settings(max_examples)
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def probe(case: AnyCase) -> None:
        runner.send(case, headers, mode.value)

    if seed is not None:
        probe = hypothesis.seed(seed)(probe)
    try:
        probe()
    except hypothesis.errors.Unsatisfiable:
        # Negative mode for an operation without inputs (GET /healthz): there is nothing to violate.
        runner.report.unsatisfiable.append(f"{operation.label} [{mode.value}]")


def _register_seed_hooks(schema: OpenApiSchema, audio: bytes) -> None:
    """Half of generated job bodies name the seeded voice; half of voice uploads carry decodable audio."""

    def flatmap_case(context: HookContext, case: AnyCase) -> st.SearchStrategy[AnyCase]:
        label = context.operation.label if context.operation is not None else ""
        if not isinstance(case.body, dict):
            return st.just(case)
        if label == "POST /v1/jobs":
            patch: dict[str, Any] = {"voice": SEED_VOICE}
        elif label in ("POST /v1/voices", "PUT /v1/voices/{voice_id}") and "audio" in case.body:
            # A decodable recording (a tone, kept by force) with a transcript in a language the engine has;
            # generated lexicon ids name nothing (a 422), and a speaker 'embedding' goes instead of audio,
            # never beside it.
            patch = {"audio": audio, "ref_text": "a steady tone", "language": "en", "force": "true"}
        else:
            return st.just(case)
        dropped = {"embedding", "lexicons"}

        def apply(use: bool) -> AnyCase:
            if use and isinstance(case.body, dict):
                case.body = {**{k: v for k, v in case.body.items() if k not in dropped}, **patch}
            return case

        # sampled_from, not booleans(): hypothesis shrinks booleans towards False, which left too few
        # uploads that could succeed for the stateful phase to reach a live voice
        return st.sampled_from([True, False]).map(apply)

    schema.hooks.register_hook_with_name(flatmap_case, "flatmap_case")


def _is_admin(operation: Operation) -> bool:
    return ADMIN_TAG in (operation.tags or [])


def _raised_in_hypothesis(exc: BaseException) -> bool:
    """Hypothesis asserts (rather than raising ``Flaky``) when a replay draws differently."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith("hypothesis.")


def _synthetic_500(case: AnyCase) -> schemathesis.Response:
    return schemathesis.Response(
        status_code=500,
        headers={},
        content=b"",
        request=requests.Request(method=case.method, url=f"http://localhost{case.formatted_path}").prepare(),
        elapsed=0.0,
        verify=False,
    )


class _Stateful:
    """Runs schemathesis's state machine, one fresh owner per scenario.

    Without a fresh owner, a scenario would start from what earlier ones left (a voice name taken, a
    job cancelled), Hypothesis would see its replays diverge and abort the run as flaky. Admin
    operations in a scenario are sent with the admin key when one is given."""

    def __init__(
        self, app: Flask, schema: OpenApiSchema, runner: _Runner, admin_headers: Mapping[str, str] | None
    ) -> None:
        self.app = app
        self.schema = schema
        self.runner = runner
        self.admin_headers = dict(admin_headers) if admin_headers is not None else None
        self.scenarios = 0
        self.restarts = 0

    def fresh_owner(self) -> dict[str, str]:
        self.scenarios += 1
        key = mint_key(self.app, owner=f"fuzz-stateful-{self.scenarios}", name="fuzz", admin=False)
        headers = {"Authorization": f"Bearer {key}"}
        seed_voice(self.app, headers, SEED_VOICE)
        return headers

    def machine(self) -> type[Any]:
        outer = self
        # Scenarios send valid requests only (invalid ones are the per-operation phase's job): a negative
        # step mostly drops the Authorization header, and a 401 ends a chain before any link is followed.
        stateful_config = self.schema.config.phases.get_by_name(name="stateful")
        stateful_config.generation.update(modes=[GenerationMode.POSITIVE])
        base: type[Any] = self.schema.as_state_machine()

        class Machine(base):  # type: ignore[misc]
            def setup(self) -> None:
                self.tome_headers = outer.fresh_owner()

            def call(self, case: AnyCase, **kwargs: Any) -> schemathesis.Response:
                headers = self.tome_headers
                if outer.admin_headers is not None and _is_admin(case.operation):
                    headers = outer.admin_headers
                response = outer.runner.send(case, headers, "stateful")
                return _synthetic_500(case) if response is None else response

            def validate_response(
                self, response: schemathesis.Response, case: AnyCase, **kwargs: Any
            ) -> None:
                """5xx were recorded by ``call``; nothing else is checked, and nothing ends a scenario."""

        return Machine

    def run(self, scenarios: int, steps: int, seed: int | None, max_restarts: int = 5) -> None:
        machine = self.machine()
        for attempt in range(max_restarts + 1):
            if self.scenarios >= scenarios:
                return
            settings = _settings(scenarios - self.scenarios, stateful_step_count=steps)
            test = get_state_machine_test(machine, settings=settings, _min_steps=2)
            if seed is not None:
                test = hypothesis.seed(seed + attempt)(test)
            try:
                test()
            except (hypothesis.errors.Flaky, hypothesis.errors.Unsatisfiable, AssertionError) as exc:
                # A replay that diverged after all (e.g. an admin listing that grew): go on, another seed.
                if isinstance(exc, AssertionError) and not _raised_in_hypothesis(exc):
                    raise
                self.restarts += 1
            else:
                return


LOCAL_PACKAGES = ("models", "webapi", "worker", "tome_cli", "bench")
"""The project's own packages (tests excluded: Hypothesis skips test files)."""


def load_local_modules() -> None:
    """Import every module of :data:`LOCAL_PACKAGES`.

    Hypothesis draws some of its values from the constants in the project's own modules *that are
    loaded* ("local constants", read from sys.modules as it generates). So one seed generated other cases
    in the whole suite, where other tests had loaded more of the project, than in this test alone: seed
    0's stateful scenarios reached live objects alone and none in the suite. With every module loaded
    first, the cases depend on the seed alone, wherever the fuzz runs."""
    for name in LOCAL_PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not module.name.endswith("__main__"):  # a module's entry point runs on import
                importlib.import_module(module.name)


def run_schemathesis(
    app: Flask,
    headers: Mapping[str, str],
    max_examples: int,
    stateful: bool,
    *,
    admin_headers: Mapping[str, str] | None = None,
    seed: int | None = 0,
    modes: Iterable[GenerationMode] = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE),
    stateful_scenarios: int | None = None,
    stateful_steps: int = 8,
) -> FuzzReport:
    """Fuzz every operation of ``app``'s /openapi.json in-process; report cases and 5xx answers.

    ``max_examples`` is Hypothesis's budget per operation and generation mode; ``seed`` fixes the
    generated cases (``None``: a new random run each time). Stateful mode runs ``stateful_scenarios``
    scenarios (default ``max_examples``) of up to ``stateful_steps`` linked calls each.
    """
    load_local_modules()
    started = time.perf_counter()
    report = FuzzReport()
    runner = _Runner(report)
    seed_voice(app, headers, SEED_VOICE)
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    _register_seed_hooks(schema, tone_wav())
    operations = []
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):
            raise RuntimeError(f"schemathesis cannot use an operation of /openapi.json: {result.err()}")
        operations.append(result.ok())
    report.operations = [operation.label for operation in operations]
    for mode in modes:
        for operation in operations:
            _fuzz_operation(runner, operation, headers, mode, max_examples, seed)
            if admin_headers is not None and _is_admin(operation):
                _fuzz_operation(runner, operation, admin_headers, mode, max_examples, seed)
    if stateful:
        machine = _Stateful(app, schema, runner, admin_headers)
        machine.run(stateful_scenarios or max_examples, stateful_steps, seed)
        report.stateful_scenarios, report.stateful_restarts = machine.scenarios, machine.restarts
    report.seconds = time.perf_counter() - started
    return report


def _app(folder: Path, **overrides: Any) -> Flask:
    from models.migrate import upgrade_head
    from webapi import create_app
    from worker.config import load_settings

    settings = load_settings(
        {}, data_dir=folder, rate_limit_per_minute=0, speech_wait_seconds=SPEECH_WAIT_S, **overrides
    )
    settings.storage.data_dir.mkdir(parents=True)
    upgrade_head(settings.sqlalchemy_url)
    return create_app({"settings": settings})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz Tome's API in-process and send it the hostile corpus.")
    parser.add_argument("--max-examples", type=int, default=FULL_MAX_EXAMPLES)
    parser.add_argument("--seed", type=int, default=None, help="fix the generated cases (default: random)")
    parser.add_argument("--no-stateful", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tome-fuzz-") as tmp:
        app = _app(Path(tmp) / "fuzz")
        user = {"Authorization": f"Bearer {mint_key(app, owner='fuzz', name='fuzz', admin=False)}"}
        admin = {"Authorization": f"Bearer {mint_key(app, owner='root', name='fuzz', admin=True)}"}
        fuzz = run_schemathesis(
            app, user, args.max_examples, not args.no_stateful, admin_headers=admin, seed=args.seed
        )
        print(fuzz.summary())
        hostile_app = _app(Path(tmp) / "hostile", max_upload_bytes=2_000_000, max_script_chars=10_000)
        key = mint_key(hostile_app, owner="hostile", name="hostile", admin=False)
        hostile = run_hostile(hostile_app, {"Authorization": f"Bearer {key}"})
        print(hostile.summary())
        problems = hostile.violations()
        print("\n".join(problems) or "hostile corpus: every invariant held (known bugs aside)")
    return 1 if fuzz.server_errors or problems else 0


if __name__ == "__main__":
    sys.exit(main())
