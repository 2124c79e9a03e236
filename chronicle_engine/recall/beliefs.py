"""What a person says about themselves, read offline by fixed rules.

Invariants:
- Only the person's own words are read (the caller passes `person_text` of a primary-context
  message by the person); nothing an assistant, tool, host or scheduled job wrote becomes a claim.
- The same sentence always yields the same claims (no model, no clock), so a rebuild repeats
  them exactly.
- A claim never carries a credential: a sentence with a credential (masked or not) or about a
  secret-bearing subject (password, PIN, card number...) yields nothing.

A claim has a `key` (what it is about, normalised) so that a later claim with the same key and a
different value can supersede it: "I live in Paris" then "I moved to Berlin" share the key "home".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from ..capture.secrets import has_secret
from .porter import stem
from .text import STOPWORDS, tokens

__all__ = ["Claim", "extract", "norm_key", "norm_value"]


@dataclass(frozen=True, slots=True)
class Claim:
    """One thing a person said about themselves: what it is about (`key`) and its value."""

    kind: str  # fact | preference | instruction | entity
    key: str
    value: str
    polarity: int
    text: str

    @property
    def label(self) -> str:
        if self.kind == "preference":
            return f"preference ({'likes' if self.polarity > 0 else 'dislikes'} {self.value})"
        if self.kind == "instruction":
            return "standing instruction"
        if self.kind == "entity":
            return f"entity ({self.key}: {self.value})"
        return f"fact ({self.key}: {self.value})"


_SECRET_SUBJECTS = frozenset(
    {
        "password", "passwd", "passcode", "passphrase", "pin", "pin code", "token", "api key",
        "apikey", "key", "secret", "ssn", "social security number", "credit card",
        "card number", "cvv", "security code", "login", "private key", "seed phrase",
    }
)  # fmt: skip

_RELATIONS = (
    "best friend|sister|brother|wife|husband|partner|boyfriend|girlfriend|fiance|fiancee|friend"
    "|boss|manager|colleague|coworker|co-worker|son|daughter|mother|father|mom|mum|dad|grandma"
    "|grandmother|grandpa|grandfather|aunt|uncle|cousin|niece|nephew|dog|cat|pet|puppy|kitten"
    "|roommate|flatmate|neighbor|neighbour|teacher|mentor|doctor|therapist|landlord|child|kid"
)
_NAME = r"((?-i:[A-Z][\w'-]*(?: [A-Z][\w'-]*)?))"  # a capitalised name, even in an /i pattern
_CLAUSE = r"([^,.;!?\n]{1,80})"
_NEGATIVE_LEAD = {"never", "don't ever", "do not ever", "don't", "do not", "stop"}


class _Rules:
    """The patterns a sentence is read by. Compiled when the first sentence is read, not when
    the plugin loads: a registration imports this module, and beliefs are read later, as the
    search index folds a person's messages."""

    def __init__(self) -> None:
        self.end_words = re.compile(
            r"\s+(?:because|but|and i|and we|and my|and our|and the|when|since|so that|which|"
            r"who|though|although|if|"
            r"now|anymore|these days|nowadays|lately|too|as well|right now|please|"
            r"last (?:year|month|week|weekend|night)|yesterday|today|recently|a while ago|"
            r"this (?:year|month|week)|\d+ \w+ ago)\b.*$",
            re.IGNORECASE,
        )
        self.leading = re.compile(r"^(?:the|a|an|my|our|some|this|that)\s+", re.IGNORECASE)
        self.facts: tuple[tuple[re.Pattern[str], str], ...] = (
            (re.compile(r"\bmy name is " + _NAME), "name"),
            (re.compile(r"\b(?:call me|i go by) " + _NAME), "name"),
            (re.compile(r"\bi(?: am|'m) called " + _NAME), "name"),
            (re.compile(r"\bi (?:live|am living|'m living|reside) in " + _CLAUSE, re.I), "home"),
            (
                re.compile(r"\bi(?: have|'ve|) (?:just |recently )?moved to " + _CLAUSE, re.I),
                "home",
            ),
            (re.compile(r"\bi(?: am|'m) (?:originally )?from " + _CLAUSE, re.I), "origin"),
            (re.compile(r"\bi (?:come|came) from " + _CLAUSE, re.I), "origin"),
            (re.compile(r"\bi (?:now )?work (?:at|for) " + _CLAUSE, re.I), "employer"),
            (re.compile(r"\bi work as (?:a|an) " + _CLAUSE, re.I), "occupation"),
            (re.compile(r"\bi(?: am|'m) (?:\d{1,3}) years old\b", re.I), "age"),
        )
        self.my_x_is = re.compile(
            r"\bmy ((?:[a-z]+(?:'s)? ){0,3}?[a-z]+) (?:is|are) " + _CLAUSE, re.IGNORECASE
        )
        self.age = re.compile(r"\bi(?: am|'m) (\d{1,3}) years old\b", re.I)
        self.like = re.compile(
            r"\bi (?:really |absolutely |truly |just |also |still |do )?"
            r"(love|like|enjoy|adore|prefer) " + _CLAUSE,
            re.IGNORECASE,
        )
        self.dislike = re.compile(
            r"\bi (?:really |absolutely |just |also |still )?"
            r"(?:(?:don't|do not|dont|never) (?:like|enjoy)"
            r"|hate|dislike|detest|can't stand|cannot stand) " + _CLAUSE,
            re.IGNORECASE,
        )
        self.instruction = re.compile(
            r"^(?:please\s+)?(?:(?:from now on|going forward|in (?:the )?future),?\s+)?"
            r"(?:please\s+)?"
            r"(always|never|don't ever|do not ever|don't|do not|stop|make sure to|remember to)"
            r"\s+(.{3,160})$",
            re.IGNORECASE,
        )
        self.from_now_on = re.compile(
            r"^(?:please\s+)?(?:from now on|going forward|in (?:the )?future),?\s+(.{3,160})$", re.I
        )
        self.entity_my = re.compile(
            r"\bmy (" + _RELATIONS + r")(?:'s name is|,? (?:named|called)|,)? " + _NAME,
            re.IGNORECASE,
        )
        self.entity_is = re.compile(
            r"\b" + _NAME + r" is my (" + _RELATIONS + r")\b", re.IGNORECASE
        )
        self.remember = re.compile(
            r"^(?:please\s+)?remember(?: that)?\s+(.{3,240})$", re.IGNORECASE
        )
        self.sentences = re.compile(r"(?<=[.!?])\s+|\n+")
        self.adverb_value = re.compile(
            r"^(?:so|really|very|just|also|still|pretty|super|too|not|always|being|getting"
            r"|kind of|a bit)\b",
            re.IGNORECASE,
        )


@cache
def _rules() -> _Rules:
    return _Rules()


def norm_key(text: str) -> str:
    """A subject as a key: its content words, stemmed, in order ("favourite colours" and
    "favourite colour" share one)."""
    lead_off = _rules().leading.sub("", text.strip())
    words = [w for w in tokens(lead_off) if w not in STOPWORDS or w == "s"]
    words = [w for w in words if w != "s"]
    return " ".join(stem(w) for w in words) or " ".join(tokens(text))


def norm_value(text: str) -> str:
    return " ".join(tokens(text))


def _clean(value: str) -> str:
    value = _rules().end_words.sub("", value.strip())
    return value.strip(" \t'\"“”‘’()[]-—").strip()


def _secret(subject: str, sentence: str) -> bool:
    if has_secret(sentence):
        return True
    key = " ".join(tokens(subject))
    return key in _SECRET_SUBJECTS or any(w in _SECRET_SUBJECTS for w in key.split()[-2:])


def extract(text: str) -> list[Claim]:
    """The claims a person's message makes about them, in order of appearance."""
    rules = _rules()
    claims: list[Claim] = []
    for raw in rules.sentences.split(text or ""):
        sentence = raw.strip()
        if len(sentence) < 4 or len(sentence) > 400:
            continue
        claims.extend(_sentence_claims(sentence))
    seen: set[tuple[str, str]] = set()
    unique = []
    for c in claims:
        if (c.kind, c.key) not in seen:
            seen.add((c.kind, c.key))
            unique.append(c)
    return unique


def _sentence_claims(sentence: str) -> list[Claim]:
    rules = _rules()
    if has_secret(sentence):
        return []
    out: list[Claim] = []
    remember = rules.remember.match(sentence)
    if remember:
        inner = remember.group(1).rstrip(".!")
        got = _sentence_claims(inner[0].upper() + inner[1:] if inner else inner)
        if got:
            return [Claim(c.kind, c.key, c.value, c.polarity, sentence) for c in got]
        key = norm_key(inner)
        if key and not _secret(inner, inner):
            return [Claim("fact", "note " + key, _clean(inner), 1, sentence)]
        return []
    instruction = _instruction(sentence)
    if instruction is not None:
        return [instruction]
    for pattern, key in rules.facts:
        m = pattern.search(sentence)
        if m:
            value = rules.age.search(sentence).group(1) if key == "age" else _clean(m.group(1))  # type: ignore[union-attr]
            if value and not _secret(key, sentence):
                out.append(Claim("fact", key, value, 1, sentence))
    for start in re.finditer(r"\bmy\b", sentence, re.IGNORECASE):
        m = rules.my_x_is.match(sentence, start.start())
        if m is None:
            continue
        subject, value = m.group(1), _clean(m.group(2))
        if any(w[:1].isupper() for w in subject.split()):
            continue  # "my sister Anna is ...": an entity, read below
        if not value or rules.adverb_value.match(value) or _secret(subject, sentence):
            continue
        if len(value.split()) > 8 or value.split()[0].lower().endswith("ing"):
            continue
        out.append(Claim("fact", norm_key(subject), value, 1, sentence))
    disliked: list[tuple[int, int]] = []
    for m in rules.dislike.finditer(sentence):
        value = _clean(m.group(1))
        if norm_key(value) and len(value.split()) <= 8:
            disliked.append(m.span())
            out.append(Claim("preference", norm_key(value), value, -1, sentence))
    for m in rules.like.finditer(sentence):
        if any(lo <= m.start() < hi for lo, hi in disliked):
            continue
        before = sentence[: m.start()].lower()
        if re.search(r"\b(?:would|'d|don't|do not|dont|never|not)\s*$", before):
            continue
        value = _clean(m.group(2))
        if re.match(r"(?:it|that|this|them|you|him|her)\b", value, re.I):
            continue
        if norm_key(value) and len(value.split()) <= 8:
            out.append(Claim("preference", norm_key(value), value, 1, sentence))
    for m in rules.entity_my.finditer(sentence):
        relation, name = m.group(1).lower(), m.group(2)
        out.append(Claim("entity", name.lower(), relation, 1, sentence))
    for m in rules.entity_is.finditer(sentence):
        name, relation = m.group(1), m.group(2).lower()
        if name.lower() not in {"he", "she", "it", "this", "that", "who", "which"}:
            out.append(Claim("entity", name.lower(), relation, 1, sentence))
    return out


def _instruction(sentence: str) -> Claim | None:
    rules = _rules()
    body = sentence.rstrip(".!")
    m = rules.instruction.match(body)
    if m:
        lead = m.group(1).lower()
        rest = m.group(2)
        polarity = -1 if lead in _NEGATIVE_LEAD else 1
    else:
        m2 = rules.from_now_on.match(body)
        if not m2:
            return None
        rest = m2.group(1)
        polarity = 1
        if re.match(r"(?:please\s+)?(?:don't|do not|never|stop)\b", rest, re.I):
            polarity = -1
            rest = re.sub(r"^(?:please\s+)?(?:don't|do not|never|stop)\s+", "", rest, flags=re.I)
    key = norm_key(rest)
    if not key or _secret(rest, sentence):
        return None
    rest = re.sub(r",?\s+please$", "", rest.strip(), flags=re.I)
    return Claim("instruction", key, rest, polarity, sentence)
