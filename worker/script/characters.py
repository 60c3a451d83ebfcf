"""Characters' names: finding them in text, and gathering the forms of one name (Mr. Darcy, Darcy,
Fitzwilliam Darcy) into one character (pure).

A name is a run of capitalised words, with any titles before it (Mr., Lady, Captain). Forms are gathered
longest first: a shorter form joins the one character whose words contain all of its own, and a title
with a gender (Mr. against Mrs.) keeps forms apart. A form that more than one character could own goes
to the one named most often. Every lookup costs a bounded number of dictionary operations, whatever the
number of characters.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

Gender = Literal["m", "f"]
Name = tuple[str, ...]

# Titles (lowercase, without a full stop) and the gender they say, None when they say none.
TITLES: dict[str, Gender | None] = {
    **dict.fromkeys(("mr", "mister", "sir", "lord", "master", "uncle", "father", "brother", "king"), "m"),
    **dict.fromkeys(("prince", "duke", "count", "baron", "earl", "herr", "monsieur", "señor", "don"), "m"),
    **dict.fromkeys(("mrs", "ms", "miss", "lady", "madam", "madame", "dame", "mistress", "aunt"), "f"),
    **dict.fromkeys(("mother", "sister", "queen", "princess", "duchess", "countess", "baroness"), "f"),
    **dict.fromkeys(("frau", "fräulein", "mademoiselle", "mme", "mlle", "señora", "señorita", "doña"), "f"),
    **dict.fromkeys(("dr", "doctor", "prof", "professor", "captain", "capt", "inspector", "sergeant"), None),
    **dict.fromkeys(("colonel", "major", "general", "lieutenant", "reverend", "rev", "judge", "nurse"), None),
    **dict.fromkeys(("officer", "detective", "constable", "governor", "senator", "president"), None),
}
# Abbreviated titles written with a full stop that does not end the sentence.
ABBREVIATED = frozenset({"mr", "mrs", "ms", "dr", "prof", "capt", "rev", "mme", "mlle", "st", "sr", "sra"})

# Capitalised words that are not names where a name could stand (sentence starts, interjections).
NOT_NAMES = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "but",
        "or",
        "nor",
        "so",
        "yet",
        "for",
        "then",
        "than",
        "when",
        "while",
        "where",
        "what",
        "why",
        "who",
        "whom",
        "whose",
        "which",
        "how",
        "he",
        "she",
        "it",
        "i",
        "we",
        "you",
        "they",
        "him",
        "her",
        "them",
        "us",
        "me",
        "his",
        "hers",
        "its",
        "our",
        "your",
        "their",
        "my",
        "mine",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "if",
        "as",
        "at",
        "in",
        "on",
        "of",
        "to",
        "by",
        "with",
        "from",
        "into",
        "onto",
        "upon",
        "after",
        "before",
        "later",
        "soon",
        "still",
        "just",
        "even",
        "only",
        "all",
        "some",
        "every",
        "each",
        "no",
        "not",
        "yes",
        "oh",
        "ah",
        "well",
        "now",
        "perhaps",
        "maybe",
        "please",
        "thank",
        "thanks",
        "good",
        "come",
        "let",
        "do",
        "don’t",
        "don't",
        "can",
        "can't",
        "cannot",
        "will",
        "won't",
        "would",
        "should",
        "could",
        "might",
        "must",
        "shall",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "never",
        "always",
        "sometimes",
        "once",
        "again",
        "also",
        "too",
        "very",
        "much",
        "many",
        "more",
        "most",
        "less",
        "few",
        "nothing",
        "something",
        "everything",
        "anything",
        "someone",
        "somebody",
        "everyone",
        "everybody",
        "anyone",
        "nobody",
        "none",
        "listen",
        "look",
        "wait",
        "stop",
        "go",
        "stay",
        "hush",
        "hello",
        "hey",
        "hi",
        "goodbye",
        "bye",
        "sorry",
        "dear",
        "god",
        "heaven",
        "hell",
        "sure",
        "right",
        "okay",
        "ok",
        "fine",
        "true",
        "false",
        "morning",
        "evening",
        "night",
        "today",
        "tonight",
        "tomorrow",
        "yesterday",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
        "chapter",
        "part",
        "book",
        "mum",
        "mom",
        "dad",
        "mama",
        "papa",
        "sir",
        "madam",
        "afterwards",
        "meanwhile",
        "suddenly",
        "finally",
        "instead",
        "however",
        "besides",
        "outside",
        "inside",
        "upstairs",
        "downstairs",
        "somewhere",
        "together",
        "alone",
        "behind",
        "beyond",
        "across",
    ]
)

_FEMALE = frozenset(
    [
        "anna",
        "anne",
        "ann",
        "alice",
        "amelia",
        "amy",
        "beth",
        "bella",
        "catherine",
        "charlotte",
        "clara",
        "claire",
        "daisy",
        "diana",
        "eleanor",
        "elizabeth",
        "ella",
        "ellen",
        "emily",
        "emma",
        "esther",
        "eva",
        "eve",
        "fiona",
        "florence",
        "grace",
        "hannah",
        "harriet",
        "helen",
        "ida",
        "iris",
        "isabel",
        "jane",
        "jenny",
        "jessica",
        "joan",
        "josephine",
        "julia",
        "kate",
        "katherine",
        "laura",
        "lily",
        "lucy",
        "lydia",
        "mabel",
        "maggie",
        "margaret",
        "maria",
        "marie",
        "martha",
        "mary",
        "maud",
        "meg",
        "mildred",
        "molly",
        "nancy",
        "nora",
        "olivia",
        "patience",
        "penelope",
        "phoebe",
        "rachel",
        "rebecca",
        "rose",
        "ruth",
        "sarah",
        "sophia",
        "sophie",
        "susan",
        "sylvia",
        "teresa",
        "vera",
        "victoria",
        "violet",
        "winifred",
        "zoe",
        "marta",
        "ingrid",
        "greta",
    ]
)
_MALE = frozenset(
    [
        "adam",
        "albert",
        "alfred",
        "andrew",
        "arthur",
        "ben",
        "benjamin",
        "bernard",
        "charles",
        "daniel",
        "david",
        "edward",
        "edmund",
        "ernest",
        "frank",
        "frederick",
        "george",
        "gerald",
        "harold",
        "harry",
        "henry",
        "hugh",
        "jack",
        "jacob",
        "james",
        "john",
        "joseph",
        "kenneth",
        "lawrence",
        "leo",
        "leonard",
        "louis",
        "luke",
        "mark",
        "martin",
        "matthew",
        "michael",
        "nathan",
        "nicholas",
        "oliver",
        "oscar",
        "patrick",
        "paul",
        "peter",
        "philip",
        "ralph",
        "richard",
        "robert",
        "roger",
        "samuel",
        "simon",
        "stephen",
        "theodore",
        "thomas",
        "tom",
        "timothy",
        "victor",
        "walter",
        "william",
        "hans",
        "pierre",
        "pablo",
        "ivan",
    ]
)

_WORD = re.compile(r"[^\W\d_][\w’'\-]*\.?")


@lru_cache(maxsize=65536)
def key(word: str) -> str:
    """A word as names are compared: lowercase, without a full stop or a possessive."""
    word = word.rstrip(".").lower()
    for suffix in ("’s", "'s"):
        if word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def is_title(word: str) -> bool:
    return key(word) in TITLES


def _capitalised(word: str) -> bool:
    return word[:1].isupper() and key(word) not in NOT_NAMES


def names_in(text: str, *, start: int = 0, end: int | None = None) -> list[tuple[int, int, Name]]:
    """The names in ``text[start:end]``: (start, end, words), words without possessives or full stops.
    A run of capitalised words (titles before them included) is one name; a title alone is none."""
    found: list[tuple[int, int, Name]] = []
    run: list[re.Match[str]] = []

    def close() -> None:
        words = tuple(_clean(m.group()) for m in run)
        if any(not is_title(word) for word in words):
            found.append((run[0].start(), run[-1].end(), words))
        run.clear()

    stop = len(text) if end is None else end
    for match in _WORD.finditer(text, start, stop):
        word = match.group()
        joined = bool(run) and text[run[-1].end() : match.start()] in (" ", "\u00a0")
        previous_ends_sentence = bool(run) and run[-1].group().endswith(".") and not _abbreviation(run[-1])
        if run and (not joined or previous_ends_sentence):
            close()
        if _capitalised(word) or (is_title(word) and word[:1].isupper()):
            run.append(match)
            if (word.endswith(".") and not _abbreviation(match)) or word.endswith(("’s", "'s")):
                close()
        elif run:
            close()
    if run:
        close()
    return found


def _abbreviation(match: re.Match[str]) -> bool:
    return key(match.group()) in ABBREVIATED


def _clean(word: str) -> str:
    word = word.rstrip(".") if key(word) not in ABBREVIATED else word
    for suffix in ("’s", "'s"):
        if word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def display(name: Name) -> str:
    return " ".join(name)


def core(name: Name) -> tuple[str, ...]:
    """A name's words other than titles, compared as :func:`key` does."""
    return tuple(key(word) for word in name if not is_title(word))


def title_gender(name: Name) -> Gender | None:
    for word in name:
        gender = TITLES.get(key(word))
        if gender is not None:
            return gender
    return None


def first_name_gender(name: Name) -> Gender | None:
    words = core(name)
    if not words:
        return None
    if words[0] in _FEMALE:
        return "f"
    if words[0] in _MALE:
        return "m"
    return None


@dataclass(eq=False)
class Character:
    """One character: every form of its name seen, how often, and the gender its name or the text says."""

    number: int
    forms: Counter[Name] = field(default_factory=Counter)
    votes: Counter[Gender] = field(default_factory=Counter)

    @property
    def name(self) -> str:
        """The canonical name: the form with the most words besides titles, then with a title, then the
        most frequent."""
        best = max(self.forms.items(), key=lambda item: (len(core(item[0])), len(item[0]), item[1], item[0]))
        return display(best[0])

    @property
    def aliases(self) -> list[str]:
        canonical = self.name
        return sorted(display(form) for form in self.forms if display(form) != canonical)

    @property
    def gender(self) -> Gender | None:
        for form in self.forms:
            said = title_gender(form)
            if said is not None:
                return said
        if self.votes["m"] != self.votes["f"]:
            return "m" if self.votes["m"] > self.votes["f"] else "f"
        for form in self.forms:
            guessed = first_name_gender(form)
            if guessed is not None:
                return guessed
        return None


# A word that more characters than this share is not looked up by itself ("John" among thousands).
_SHARED = 16


class Characters:
    """The characters of a script, built from the forms of names seen speaking (see the module)."""

    def __init__(self, max_characters: int) -> None:
        self.max = max_characters
        self.all: list[Character] = []
        self.by_form: dict[Name, Character] = {}
        self.by_word: dict[str, list[Character]] = {}
        self.by_title: dict[str, list[Character]] = {}
        self.refused = 0
        self.speaking = 0

    def gather(self, speaking: Counter[Name], mentioned: Counter[Name]) -> None:
        """Gather the forms of names seen speaking and named in narration (with how often each was seen)
        into characters, longest first, so that a short form finds the full name it belongs to. Only
        forms seen speaking count against the limit (the others are places and passers-by as often as
        characters); the others may make at most as many again."""
        forms = mentioned + speaking
        order = sorted(forms.items(), key=lambda item: (-len(core(item[0])), -item[1], item[0]))
        quiet = 0
        for form, count in order:
            if not core(form) or (form[0] == "the" and len(form) == 2 and form[1] in TITLES):
                continue
            owner = self._owner(form)
            if owner is None:
                if form in speaking and self.speaking >= self.max:
                    self.refused += 1
                    continue
                if form not in speaking and quiet >= self.max:
                    continue
                owner = Character(len(self.all))
                if form in speaking:
                    self.speaking += 1
                else:
                    quiet += 1
                self.all.append(owner)
                for word in set(core(form)):
                    shared = self.by_word.setdefault(word, [])
                    if len(shared) <= _SHARED:
                        shared.append(owner)
            owner.forms[form] += count
            self.by_form[_normal(form)] = owner
            for word in form:
                if is_title(word):
                    holders = self.by_title.setdefault(key(word), [])
                    if owner not in holders and len(holders) < 2:
                        holders.append(owner)

    def _owner(self, form: Name) -> Character | None:
        words = core(form)
        gender = title_gender(form)
        candidates = [
            character
            for character in self.by_word.get(words[0], ())[:_SHARED]
            if _contains(character, words) and _agrees(character, gender)
        ]
        if len(self.by_word.get(words[0], ())) > _SHARED or not candidates:
            return None
        titles = {key(word) for word in form if is_title(word)}
        return max(
            candidates,
            key=lambda character: (
                any(titles & {key(word) for word in known} for known in list(character.forms)[:8]),
                sum(character.forms.values()),
                -character.number,
            ),
        )

    def find(self, name: Name) -> Character | None:
        """The character a name in the text refers to, None if it is no character's. A description by
        title ("the captain") is the one character with that title."""
        if len(name) == 2 and name[0] == "the" and name[1] in TITLES:
            owners = self.by_title.get(name[1], [])
            return owners[0] if len(owners) == 1 else None
        found = self.by_form.get(_normal(name))
        if found is not None or not core(name):
            return found
        return self._owner(name)

    def note_gender(self, character: Character, gender: Gender, weight: int = 1) -> None:
        character.votes[gender] += weight


def _normal(form: Name) -> Name:
    return tuple(key(word) for word in form)


def _contains(character: Character, words: Iterable[str]) -> bool:
    return any(set(words) <= set(core(form)) for form in list(character.forms)[:8])


def _agrees(character: Character, gender: Gender | None) -> bool:
    if gender is None:
        return True
    forms = list(character.forms)[:8]
    said = next((g for g in map(title_gender, forms) if g is not None), None)
    if said is None:
        said = next((g for g in map(first_name_gender, forms) if g is not None), None)
    return said is None or said == gender
