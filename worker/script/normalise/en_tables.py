"""The word lists the English rules read from (pure data; spelling is British, like num2words' "and")."""

from __future__ import annotations

MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8,
    "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip
MONTH_NAMES = (
    "", "January", "February", "March", "April", "May", "June", "July",
    "August", "September", "October", "November", "December",
)  # fmt: skip

# Unit symbols after a number: (singular, plural). Regex alternation order matters: longer first.
UNITS = {
    "km/h": ("kilometre per hour", "kilometres per hour"),
    "kph": ("kilometre per hour", "kilometres per hour"),
    "m/s": ("metre per second", "metres per second"),
    "mph": ("mile per hour", "miles per hour"),
    "km": ("kilometre", "kilometres"),
    "kg": ("kilogram", "kilograms"),
    "kHz": ("kilohertz", "kilohertz"),
    "kW": ("kilowatt", "kilowatts"),
    "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"),
    "cm": ("centimetre", "centimetres"),
    "mm": ("millimetre", "millimetres"),
    "mg": ("milligram", "milligrams"),
    "ml": ("millilitre", "millilitres"),
    "mL": ("millilitre", "millilitres"),
    "min": ("minute", "minutes"),
    "mi": ("mile", "miles"),
    "m": ("metre", "metres"),
    "g": ("gram", "grams"),
    "l": ("litre", "litres"),
    "L": ("litre", "litres"),
    "°C": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"),
    "%": ("percent", "percent"),
    "lbs": ("pound", "pounds"),
    "lb": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "ft": ("foot", "feet"),
    "yd": ("yard", "yards"),
    "in": ("inch", "inches"),
    "hrs": ("hour", "hours"),
    "hr": ("hour", "hours"),
    "GB": ("gigabyte", "gigabytes"),
    "GHz": ("gigahertz", "gigahertz"),
    "MB": ("megabyte", "megabytes"),
    "MHz": ("megahertz", "megahertz"),
    "TB": ("terabyte", "terabytes"),
    "Hz": ("hertz", "hertz"),
    "W": ("watt", "watts"),
    "V": ("volt", "volts"),
}

# Currency symbols: (unit singular, plural, hundredth singular, plural); None where there is no hundredth.
CURRENCIES: dict[str, tuple[str, str, str | None, str | None]] = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "€": ("euro", "euros", "cent", "cents"),
    "¥": ("yen", "yen", None, None),
}
SCALES = {"thousand": "thousand", "million": "million", "billion": "billion", "trillion": "trillion"}
SCALES |= {"k": "thousand", "m": "million", "bn": "billion", "b": "billion"}

# Abbreviations (without their full stop) and what they say; "Dr" and "St" are decided by context.
ABBREVIATIONS = {
    "e.g": "for example", "i.e": "that is", "etc": "et cetera", "vs": "versus",
    "Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Prof": "Professor", "Jr": "Junior", "Sr": "Senior",
    "No": "number", "Nos": "numbers", "Mt": "Mount", "Ave": "Avenue", "Rd": "Road",
    "approx": "approximately", "Fig": "Figure", "Vol": "Volume", "pp": "pages", "p": "page",
    "Capt": "Captain", "Lt": "Lieutenant", "Sgt": "Sergeant", "Col": "Colonel", "Gen": "General",
    "Rev": "Reverend", "Hon": "Honourable", "Inc": "Incorporated", "Ltd": "Limited",
}  # fmt: skip

# Capitalised words that start sentences far more often than they are names ("Elm Dr. The house...").
SENTENCE_STARTERS = frozenset(
    [
        "The",
        "A",
        "An",
        "He",
        "She",
        "It",
        "They",
        "We",
        "I",
        "You",
        "But",
        "And",
        "Then",
        "There",
        "This",
        "That",
        "These",
        "Those",
        "In",
        "On",
        "At",
        "His",
        "Her",
        "Its",
        "Their",
        "Our",
        "My",
        "So",
        "If",
        "When",
        "As",
        "After",
        "Before",
        "Now",
        "Yet",
        "Or",
        "Nor",
        "For",
        "With",
        "Once",
        "While",
        "Later",
        "Still",
    ]
)

# Words before a four-digit number that make it a year ("in 1984", "since 2005", "March 2020").
YEAR_BEFORE = frozenset(
    [
        "in",
        "of",
        "since",
        "by",
        "year",
        "years",
        "until",
        "till",
        "from",
        "to",
        "during",
        "before",
        "after",
        "around",
        "circa",
        "c.",
        "ca.",
        "early",
        "late",
        "mid",
        "spring",
        "summer",
        "autumn",
        "fall",
        "winter",
        "between",
        "born",
        "died",
    ]
) | frozenset(MONTHS)
# Words before a number that make it a count, never a year ("page 1984", "about 1500").
CARDINAL_BEFORE = frozenset(
    [
        "page",
        "pages",
        "p.",
        "pp.",
        "number",
        "no.",
        "room",
        "flight",
        "route",
        "highway",
        "verse",
        "line",
        "lines",
        "about",
        "over",
        "under",
        "nearly",
        "almost",
        "approximately",
        "some",
        "than",
        "exactly",
        "only",
        "total",
    ]
)
# Words after a four-digit number that make it a year even though they are lowercase ("1984 was...").
YEAR_AFTER = frozenset(
    ["was", "saw", "had", "brought", "marked", "began", "ended", "ad", "bc", "bce", "ce", "a.d.", "b.c."]
)
# Headings words after which a number or Roman numeral is a chapter number ("Chapter 01", "Part IV").
CHAPTER_WORDS = frozenset(
    [
        "chapter",
        "part",
        "book",
        "volume",
        "vol.",
        "section",
        "act",
        "scene",
        "canto",
        "appendix",
        "episode",
        "letter",
    ]
)

# Symbols inside URLs, e-mail addresses and spelled-out text.
SYMBOLS = {
    ".": "dot", "/": "slash", "-": "dash", "_": "underscore", "@": "at", ":": "colon",
    "?": "question mark", "=": "equals", "&": "and", "#": "hash", "~": "tilde", "%": "percent",
    "+": "plus", "*": "star", "!": "exclamation mark", ",": "comma", "'": "apostrophe",
}  # fmt: skip
