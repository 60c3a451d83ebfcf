"""LLM attribution against a fake OpenAI-compatible chat server on 127.0.0.1: only uncertain lines are
asked about, answers naming nobody are ignored, a failing model leaves the rules' answer with a warning,
the text never changes, and the URL follows the webhook address rules."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.support.chat_server import ChatServer
from worker.cast_llm import MAX_CONFIDENCE, LlmSettings, label, uncertain
from worker.config import ConfigError, load_settings
from worker.script.attribution import Cast, attribute

CHAPTER = [
    "Anna Price came in with the rain. Tom Hale and Mrs. Bell looked up.",
    "“You are late,” said Tom.",
    "“The bus broke down,” Anna replied.",
    "“Again?” asked Mrs. Bell.",
    "“Again.”",
    "“Well, sit down.”",
    "“I would rather stand.”",
]


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.close()


@pytest.fixture
def rules() -> Cast:
    return attribute([CHAPTER])


def _llm(chat: ChatServer, **overrides: object) -> LlmSettings:
    settings = LlmSettings(chat.url, "tiny-labeller", threshold=0.8, timeout_seconds=5.0, budget_seconds=30.0)
    return replace(settings, **overrides)  # type: ignore[arg-type]


def _said(cast: Cast) -> list[tuple[str, str, float]]:
    return [(line.speaker, line.attribution, line.confidence) for line in cast.lines]


def _texts(cast: Cast) -> list[tuple[int, int, int, tuple[tuple[int, int], ...], str]]:
    return [(line.index, line.chapter, line.paragraph, line.spans, line.text) for line in cast.lines]


def test_only_uncertain_lines_are_asked_and_labelled_llm(chat: ChatServer, rules: Cast) -> None:
    assert [line.attribution for line in rules.lines[3:]] == ["alternation"] * 3
    chat.speakers = {"Again.": "Tom", "sit down": "narrator", "rather stand": "Mrs. Bell"}
    labelled = label(rules, [CHAPTER], _llm(chat, key="s3cret"))
    assert [line["id"] for line in chat.asked()] == [3, 4, 5]  # the explicit lines are not sent
    headers, body = chat.requests[0]
    assert headers["Authorization"] == "Bearer s3cret"
    assert body["model"] == "tiny-labeller"
    prompt = ChatServer.prompt(body)
    assert {c["name"] for c in prompt["characters"]} == {"Anna Price", "Mrs. Bell", "Tom Hale"}
    assert "“Again?” asked Mrs. Bell." in prompt["lines"][0]["context"]  # the paragraph before
    assert _said(labelled)[:3] == _said(rules)[:3]
    assert _said(labelled)[3:] == [
        ("Tom Hale", "llm", 0.8),
        ("narrator", "llm", 0.8),
        ("Mrs. Bell", "llm", 0.8),
    ]
    assert _texts(labelled) == _texts(rules)  # the model only labels
    counts = {member.name: member.lines for member in labelled.characters}
    assert counts == {"Tom Hale": 2, "Mrs. Bell": 2, "Anna Price": 1}
    assert labelled.warnings == rules.warnings


def test_unknown_names_unasked_lines_and_overconfidence_are_ignored(chat: ChatServer, rules: Cast) -> None:
    chat.content = (
        '{"labels": [{"id": 3, "speaker": "Gandalf"}, {"id": 0, "speaker": "Anna"}, '
        '{"id": 4, "speaker": "anna price", "confidence": 7}, {"id": "5", "speaker": "Tom"}, '
        '{"id": 5, "speaker": ["Tom"]}, "junk"]}'
    )
    labelled = label(rules, [CHAPTER], _llm(chat))
    assert _said(labelled)[0] == _said(rules)[0]  # line 0 was not asked about
    assert _said(labelled)[3] == _said(rules)[3]  # Gandalf is nobody in this book
    assert _said(labelled)[4] == ("Anna Price", "llm", MAX_CONFIDENCE)
    assert _said(labelled)[5] == _said(rules)[5]
    assert not labelled.warnings


def test_a_fenced_answer_without_confidence_is_read(chat: ChatServer, rules: Cast) -> None:
    chat.confidence = None
    chat.content = '```json\n{"labels": [{"id": 5, "speaker": "Tom Hale"}]}\n```'
    labelled = label(rules, [CHAPTER], _llm(chat))
    assert _said(labelled)[5] == ("Tom Hale", "llm", 0.7)


@pytest.mark.parametrize(
    ("trouble", "said"),
    [
        ({"status": 500}, "HTTP 500"),
        ({"content": "Tom says line 3, I think."}, "not the JSON asked for"),
        ({"content": '{"labels": {"3": "Tom"}}'}, None),
        ({"hang": True}, "timed out"),
    ],
)
def test_a_failing_model_leaves_the_rules_answer_with_a_warning(
    chat: ChatServer, rules: Cast, trouble: dict[str, object], said: str | None
) -> None:
    for name, value in trouble.items():
        setattr(chat, name, value)
    chat.speakers = {"Again.": "Tom"}
    labelled = label(rules, [CHAPTER], _llm(chat, timeout_seconds=0.3))
    assert _said(labelled) == _said(rules)
    assert _texts(labelled) == _texts(rules)
    assert len(chat.requests) == 1
    if said is None:  # well-formed JSON of another shape: nothing labelled, nothing failed
        assert labelled.warnings == rules.warnings
    else:
        assert len(labelled.warnings) == 1
        assert said in labelled.warnings[0]
        assert "3 line(s) keep the rules' attribution" in labelled.warnings[0]


def test_an_unreachable_model_is_a_warning(rules: Cast) -> None:
    server = ChatServer()
    url = server.url
    server.close()
    labelled = label(rules, [CHAPTER], LlmSettings(url, "m", threshold=0.8))
    assert _said(labelled) == _said(rules)
    assert "connection failed" in labelled.warnings[0]


def test_batches_and_the_line_cap_bound_the_requests(chat: ChatServer, rules: Cast) -> None:
    chat.speakers = {"Again.": "Tom", "sit down": "Tom", "rather stand": "Tom"}
    labelled = label(rules, [CHAPTER], _llm(chat, batch_lines=1, max_lines=2))
    assert len(chat.requests) == 2
    assert [line.index for line in uncertain(rules, 0.8, 2)] == [3, 4]
    assert [line.attribution for line in labelled.lines[3:]] == ["llm", "llm", "alternation"]


def test_sure_lines_make_no_request(chat: ChatServer, rules: Cast) -> None:
    assert label(rules, [CHAPTER], _llm(chat, threshold=0.5)) is rules
    assert chat.requests == []


def test_off_by_default_and_the_url_follows_the_webhook_rules(chat: ChatServer) -> None:
    assert LlmSettings.of(load_settings({})) is None
    with pytest.raises(ConfigError, match="TOME_CAST_LLM_ALLOW_PRIVATE"):
        load_settings({"TOME_CAST_LLM_URL": chat.url, "TOME_CAST_LLM_MODEL": "m"})
    for url in ("http://10.1.2.3/v1/chat/completions", "http://[::1]:8000/", "http://169.254.169.254/"):
        with pytest.raises(ConfigError, match="TOME_CAST_LLM_URL"):
            load_settings({"TOME_CAST_LLM_URL": url, "TOME_CAST_LLM_MODEL": "m"})
    for url in ("ftp://example.com/", "http://user:pw@example.com/", "http://exa mple.com/"):
        with pytest.raises(ConfigError, match="TOME_CAST_LLM_URL"):
            load_settings(
                {"TOME_CAST_LLM_URL": url, "TOME_CAST_LLM_MODEL": "m", "TOME_CAST_LLM_ALLOW_PRIVATE": "1"}
            )
    with pytest.raises(ConfigError, match="TOME_CAST_LLM_MODEL"):
        load_settings({"TOME_CAST_LLM_URL": chat.url, "TOME_CAST_LLM_ALLOW_PRIVATE": "1"})
    with pytest.raises(ConfigError, match="TOME_CAST_LLM_THRESHOLD"):
        load_settings({"TOME_CAST_LLM_THRESHOLD": "1.5"})
    allowed = load_settings(
        {"TOME_CAST_LLM_URL": chat.url, "TOME_CAST_LLM_MODEL": "m", "TOME_CAST_LLM_ALLOW_PRIVATE": "true"}
    )
    assert LlmSettings.of(allowed) == LlmSettings(chat.url, "m")
    assert not allowed.webhooks.allow_private  # the LLM's permission opens nothing for webhooks


def test_a_character_the_model_leaves_silent_stays_in_the_cast(chat: ChatServer, rules: Cast) -> None:
    chat.speakers = {"": "Tom"}  # every line asked about is Tom's
    labelled = label(rules, [CHAPTER], _llm(chat, threshold=1.0))
    assert {line.speaker for line in labelled.lines} == {"Tom Hale"}
    counts = {member.name: (member.lines, member.words) for member in labelled.characters}
    assert counts == {"Tom Hale": (6, 16), "Anna Price": (0, 0), "Mrs. Bell": (0, 0)}


def test_the_budget_bounds_all_requests_together(chat: ChatServer, rules: Cast) -> None:
    chat.hang = True
    labelled = label(rules, [CHAPTER], _llm(chat, batch_lines=1, timeout_seconds=30.0, budget_seconds=0.3))
    assert len(chat.requests) == 1  # its read timed out past the budget: no second request
    assert _said(labelled) == _said(rules)
    assert "timed out" in labelled.warnings[0]
    assert "time ran out: 2 uncertain line(s)" in labelled.warnings[1]


def test_an_oversized_answer_is_refused(chat: ChatServer, rules: Cast) -> None:
    chat.content = '{"labels": [], "padding": "' + "x" * 300_000 + '"}'
    labelled = label(rules, [CHAPTER], _llm(chat))
    assert _said(labelled) == _said(rules)
    assert "answer too long" in labelled.warnings[0]


def test_failures_make_one_warning_per_reason(chat: ChatServer, rules: Cast) -> None:
    chat.status = 502
    labelled = label(rules, [CHAPTER], _llm(chat, batch_lines=1))
    assert len(chat.requests) == 3
    assert labelled.warnings == (
        "the attribution model failed (HTTP 502): 3 line(s) keep the rules' attribution",
    )
