"""Verbs of speech and subject pronouns, per language (pure): what makes "she said" a dialogue tag.

English verbs are listed by their base form and inflected by rule (ask: asked, asks; reply: replied,
replies), with the irregular and doubled forms listed; other languages list their forms as written.
"""

from __future__ import annotations

from functools import cache

from .characters import Gender

_ENGLISH_BASES = """
add admit advise agree announce answer apologise apologize argue ask assure bark bellow blurt boast
bellow breathe call caution chime chirp chortle chuckle cry coax comment complain concede conclude
confess confirm console continue correct counter croak croon declare demand deny drawl echo enquire
exclaim explain falter gasp giggle greet groan growl grumble grunt guess hazard hiss holler huff
inform inquire insist interject interrupt joke laugh lie lisp mumble murmur muse mutter note object
observe offer order pant persist plead point promise prompt propose protest purr query question
reason recall reassure reckon remark remind repeat reply report respond resume retort roar sass scoff
scold scream screech shout shriek sigh snap snarl sneer snicker sniff sniffle snort sob soothe squeak
squeal stammer state stutter suggest swear taunt tease thunder urge venture volunteer wail warn
wheeze whimper whine whisper wonder yell yelp boom breathe challenge chide command confide instruct
jeer mock moan mouth murmur pipe plead pray rasp reflect rejoin return scoff shrug smile grin wince
"""
_IRREGULAR = {
    "say": ("said", "says", "say"),
    "tell": ("told", "tells", "tell"),
    "begin": ("began", "begins", "begin"),
    "sing": ("sang", "sings", "sing"),
    "spit": ("spat", "spits", "spit"),
    "shoot": ("shot",),
    "cut": ("cut", "cuts"),
    "speak": ("spoke", "speaks"),
    "snap": ("snapped", "snaps"),
    "sob": ("sobbed", "sobs"),
    "beg": ("begged", "begs"),
    "quip": ("quipped", "quips"),
    "nag": ("nagged", "nags"),
    "chat": ("chatted",),
    "grin": ("grinned", "grins"),
    "plead": ("pleaded", "pled", "pleads"),
    "swear": ("swore", "swears"),
    "lie": ("lied", "lies"),
    "ask": ("asked", "asks", "ask"),
    "reply": ("replied", "replies", "reply"),
    "cry": ("cried", "cries"),
    "query": ("queried", "queries"),
    "hazard": ("hazarded",),
}
# Verbs that make a tag only with the word after them ("went on", "spoke up").
PHRASAL = {"went": "on", "goes": "on", "go": "on", "spoke": "up", "piped": "up", "chimed": "in"}

_OTHER: dict[str, str] = {
    "de": """sagte sagt fragte fragt antwortete antwortet rief ruft flüsterte flüstert murmelte murmelt
        schrie schreit meinte meint erwiderte erwidert entgegnete entgegnet erklärte erklärt fuhr
        seufzte seufzt lachte lacht brummte knurrte zischte stöhnte stammelte bat befahl fügte""",
    "fr": """dit dis demanda demande répondit répond cria crie murmura murmure chuchota chuchote ajouta
        ajoute reprit reprend s'écria s’écria soupira soupire expliqua explique lança lance fit déclara
        répliqua répéta continua souffla hurla protesta insista""",
    "es": """dijo dice preguntó pregunta respondió responde contestó contesta gritó grita murmuró murmura
        susurró susurra añadió añade exclamó exclama replicó replica explicó explica insistió suspiró
        repuso continuó protestó""",
    "it": """disse dice chiese chiede rispose risponde gridò grida mormorò mormora sussurrò sussurra
        aggiunse esclamò replicò spiegò continuò sospirò""",
    "pt": """disse diz perguntou pergunta respondeu responde gritou grita murmurou sussurrou acrescentou
        exclamou explicou continuou suspirou""",
    "ru": """сказал сказала сказали спросил спросила ответил ответила крикнул крикнула прошептал
        прошептала пробормотал пробормотала воскликнул воскликнула добавил добавила продолжил
        продолжила заметил заметила повторил повторила""",
    "pl": """powiedział powiedziała zapytał zapytała spytał spytała odpowiedział odpowiedziała krzyknął
        krzyknęła szepnął szepnęła dodał dodała""",
}

# Subject pronouns that can stand in a tag, and whom they point to: a gender, or the first person.
_PRONOUNS: dict[str, dict[str, Gender | str]] = {
    "en": {"he": "m", "she": "f", "i": "i"},
    "de": {"er": "m", "sie": "f", "ich": "i"},
    "fr": {"il": "m", "elle": "f", "je": "i", "j'": "i"},
    "es": {"él": "m", "ella": "f", "yo": "i"},
    "it": {"lui": "m", "lei": "f", "io": "i"},
    "pt": {"ele": "m", "ela": "f", "eu": "i"},
    "ru": {"он": "m", "она": "f", "я": "i"},
    "pl": {"on": "m", "ona": "f", "ja": "i"},
}
# Words that say a gender in running narration, near the one name of a paragraph.
# "him" and "her" are left out: they are as often someone else, the one acted upon.
NARRATION_PRONOUNS: dict[str, Gender] = {
    **dict.fromkeys(("he", "his", "himself"), "m"),
    **dict.fromkeys(("she", "hers", "herself"), "f"),
}


def _inflect(base: str) -> tuple[str, ...]:
    if base in _IRREGULAR:
        return _IRREGULAR[base]
    if base.endswith("e"):
        return base + "d", base + "s"
    if base.endswith("y") and base[-2:-1] not in "aeiou":
        return base[:-1] + "ied", base[:-1] + "ies"
    if base.endswith(("s", "sh", "ch", "x", "z")):
        return base + "ed", base + "es"
    return base + "ed", base + "s"


@cache
def speech_verbs(language: str) -> frozenset[str]:
    """Forms of the verbs of speech of ``language`` (primary subtag), lowercase; English's as well for
    every language (English dialogue in another language's book keeps its tags)."""
    english = {form for base in _ENGLISH_BASES.split() for form in _inflect(base)}
    english |= {form for forms in _IRREGULAR.values() for form in forms}
    return frozenset(english | set(_OTHER.get(language, "").split()))


def pronouns(language: str) -> dict[str, Gender | str]:
    return _PRONOUNS.get(language, _PRONOUNS["en"]) | _PRONOUNS["en"]
