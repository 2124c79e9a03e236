"""Credentials in captured text: found, named and masked.

Invariant: a credential's value never leaves the raw archived message. Everything derived from a
message (its searchable `text`, the person's own words, snippets, beliefs, prefetch) is built from
`mask(...)`'s output, so a key the user pasted into the chat is still in the transcript they can
expand, and nowhere else.

Detection is deliberately shape-based and conservative: each pattern names a credential format
that is random by construction (provider prefixes, JWT's three base64url parts, PEM armour), or an
explicit assignment to a credential-named key (`password=...`). Ordinary prose and code must pass
through untouched; the tests keep a corpus of both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Finding", "find_secrets", "mask", "has_secret", "MASK_FORMAT"]

MASK_FORMAT = "«masked:{kind}»"
"""What replaces a credential's value. No brackets or angle brackets, so masking never creates or
breaks a host frame (`[System note: ...]`, `<memory-context>`) in the text it is applied to."""


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    start: int  # char range of the value that is masked (the key name stays readable)
    end: int


def _mixed(value: str) -> bool:
    """Random keys mix letters and digits; words and kebab-case identifiers do not."""
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


_Check = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class _Shape:
    kind: str
    hint: tuple[str, ...]  # cheap substring test before the regex runs (lower-cased text)
    pattern: re.Pattern[str]
    group: int = 0  # the group that holds the value to mask
    check: _Check | None = None


_B = r"(?<![A-Za-z0-9_\-])"  # not preceded by a token character
_E = r"(?![A-Za-z0-9_\-])"  # not followed by one

_SHAPES: tuple[_Shape, ...] = (
    _Shape(
        "private_key",
        ("private key-----",),
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)"
        ),
    ),
    _Shape(
        "anthropic_key",
        ("sk-ant-",),
        re.compile(_B + r"sk-ant-[A-Za-z0-9_\-]{20,}" + _E),
        check=_mixed,
    ),
    _Shape(
        "openai_key",
        ("sk-",),
        re.compile(_B + r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}" + _E),
        check=_mixed,
    ),
    _Shape(
        "github_token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(_B + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})" + _E),
        check=_mixed,
    ),
    _Shape(
        "aws_access_key",
        ("akia", "asia"),
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
        check=_mixed,
    ),
    _Shape(
        "slack_token",
        ("xox", "xapp-"),
        re.compile(_B + r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-[A-Za-z0-9\-]{10,})" + _E),
        check=_mixed,
    ),
    _Shape(
        "google_api_key",
        ("aiza",),
        re.compile(_B + r"AIza[0-9A-Za-z_\-]{35}" + _E),
    ),
    _Shape(
        "stripe_key",
        ("sk_live_", "rk_live_", "sk_test_", "rk_test_"),
        re.compile(_B + r"(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}" + _E),
        check=_mixed,
    ),
    _Shape(
        "jwt",
        ("eyj",),
        re.compile(_B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}" + _E),
    ),
    _Shape(
        "bearer_token",
        ("bearer", "basic"),
        re.compile(r"(?i)\b(?:bearer|basic)\s+([A-Za-z0-9._~+/\-]{16,}=*)"),
        group=1,
        check=_mixed,
    ),
    _Shape(
        "url_credentials",
        ("://",),
        re.compile(
            r"\b[a-zA-Z][a-zA-Z0-9+.\-]{1,20}://[^\s:/@'\"<>]{1,128}:([^\s@/'\"<>]{1,256})@"
        ),
        group=1,
    ),
)

# An explicit assignment to a credential-named key: `password=...`, `"api_key": "..."`,
# `passwd: ...`, `export GITHUB_TOKEN=...`. The value is what is masked.
_KEY_WORDS = (
    r"password|passwd|passwort|pwd|passphrase|secret|client[_\-]?secret|secret[_\-]?key|"
    r"api[_\-]?key|apikey|access[_\-]?key|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token|"
    r"private[_\-]?key|token"
)
# Where an assignment may be: a key word, the rest of its name, then `=` or `:`.
_KEY_WORD = re.compile(r"(?:pass|pwd|secret|token|key)[a-z0-9_\-]*[\"']?[ \t]*[=:]")
_KEY_WORD_ANY_CASE = re.compile(r"(?i)(?:pass|pwd|secret|token|key)[A-Za-z0-9_\-]*[\"']?[ \t]*[=:]")
_ASSIGNMENT = re.compile(
    r"(?i)([A-Za-z0-9_\-]*?(?:" + _KEY_WORDS + r"))[\"']?"
    r"[ \t]*(?:=(?!=)|:(?![:/]))[ \t]*"
    r"(?:\"([^\"\n]{1,512})\"|'([^'\n]{1,512})'|`([^`\n]{1,512})`|([^\s\"'`,;)}\]]{1,512}))"
)
_ASSIGNMENT_HINTS = ("pass", "pwd", "secret", "token", "key")

# Values that are code, types or placeholders rather than a credential.
_NOT_A_VALUE = frozenset(
    (
        "str",
        "string",
        "int",
        "bytes",
        "bool",
        "boolean",
        "none",
        "null",
        "nil",
        "true",
        "false",
        "any",
        "optional",
        "secretstr",
        "undefined",
        "required",
        "optional[str]",
        "str",
        "|",
        "none",
        "list",
        "dict",
        "object",
        "env",
        "environ",
        "getenv",
        "self",
        "cls",
        "default",
        "placeholder",
        "redacted",
        "hidden",
        "changeme",
        "your_password",
        "yourpassword",
    )
)
_PASSWORD_KEY = re.compile(r"(?i)pass|pwd")
_FUNCTION_WORDS = frozenset(
    (
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "must",
        "should",
        "will",
        "would",
        "can",
        "could",
        "may",
        "might",
        "not",
        "no",
        "yes",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "for",
        "to",
        "of",
        "in",
        "on",
        "at",
        "by",
        "with",
        "from",
        "as",
        "it",
        "this",
        "that",
        "these",
        "those",
        "field",
        "fields",
        "value",
        "values",
        "required",
        "optional",
        "empty",
        "set",
        "unset",
        "same",
        "here",
        "there",
        "below",
        "above",
    )
)
_PLACEHOLDER = re.compile(
    r"^(?:[*xX•.\-_#]+|<[^>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%\(?[a-z_]*\)?s|\{\{?[^}]*\}?\})$"
)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CODE_VALUE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:[.\[(]|$)")


def _assignment_value_is_secret(key: str, value: str, quoted: bool, following: str) -> bool:
    lowered = value.lower()
    if not value.strip() or lowered in _NOT_A_VALUE or _PLACEHOLDER.match(value):
        return False
    if value.startswith(("<", "${", "{{", "%(")):
        return False
    if quoted:
        # A quoted literal is data; only a lone word the same as the key is a template echo.
        return lowered != key.lower()
    if following.startswith(("(", ".", "[")):
        return False  # a call or an attribute: code computing the value, not the value
    if _CODE_VALUE.match(value) and ("." in value or "(" in value or "[" in value):
        return False
    if lowered == key.lower() or lowered.endswith(("_password", "_secret", "_token", "_key")):
        return False  # password=password, token=self_token: a variable passed along
    if _IDENTIFIER.match(value):
        # A bare word after `password:` is a credential in prose ("password: swordfish") but a
        # type or a variable in code. Words containing a digit or a capital after the first
        # letter read as credentials; plain lower-case words only when nothing code-like follows.
        if any(c.isdigit() for c in value) or any(c.isupper() for c in value[1:]):
            return True
        return (
            _PASSWORD_KEY.search(key) is not None
            and lowered not in _FUNCTION_WORDS
            and "_" not in value
            and not following.startswith(("=", ":", ","))
        )
    return True


def find_secrets(text: str) -> list[Finding]:
    """Every credential value in `text`, in order, non-overlapping."""
    if not text:
        return []
    lowered = text.lower()
    found: list[Finding] = []
    for shape in _SHAPES:
        for h in shape.hint:
            if h in lowered:
                break
        else:
            continue
        for match in shape.pattern.finditer(text):
            value = match.group(shape.group)
            if value is None or (shape.check is not None and not shape.check(value)):
                continue
            found.append(Finding(shape.kind, match.start(shape.group), match.end(shape.group)))
    if any(h in lowered for h in _ASSIGNMENT_HINTS):
        for match in _assignments(text, lowered):
            key = match.group(1)
            for group in (2, 3, 4, 5):
                value = match.group(group)
                if value is not None:
                    break
            else:  # pragma: no cover - the regex always fills one value group
                continue
            following = text[match.end(group) : match.end(group) + 1]
            if _assignment_value_is_secret(key, value, group != 5, following):
                found.append(Finding(_assignment_kind(key), match.start(group), match.end(group)))
    return _non_overlapping(found)


def _assignments(text: str, lowered: str) -> list[re.Match[str]]:
    """Assignments to credential-named keys. The full pattern is tried only at the start of a
    word that contains a key word, which keeps a long text without credentials cheap."""
    found: list[re.Match[str]] = []
    next_free = 0
    # The finder runs case-sensitively on the lower-cased text (much faster than (?i)); when
    # lower-casing changed the length (some non-ASCII letters), offsets would not line up.
    haystack = lowered if len(lowered) == len(text) else text.lower()
    finder = _KEY_WORD if haystack is lowered else _KEY_WORD_ANY_CASE
    for word in finder.finditer(haystack if finder is _KEY_WORD else text):
        start = word.start()
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_-"):
            start -= 1
        if start < next_free:
            continue
        match = _ASSIGNMENT.match(text, start)
        if match is not None:
            found.append(match)
            next_free = match.end()
    return found


def _assignment_kind(key: str) -> str:
    k = key.lower()
    if "pass" in k or "pwd" in k:
        return "password"
    if "token" in k:
        return "token"
    if "key" in k:
        return "api_key"
    return "secret"


def _non_overlapping(found: list[Finding]) -> list[Finding]:
    # Prefer the earliest start; at equal starts the longer span (a PEM block over a key inside).
    found.sort(key=lambda f: (f.start, -(f.end - f.start)))
    out: list[Finding] = []
    for finding in found:
        if out and finding.start < out[-1].end:
            continue
        out.append(finding)
    return out


def has_secret(text: str) -> bool:
    return bool(find_secrets(text))


def mask(text: str) -> str:
    """`text` with every credential value replaced by `«masked:<kind>»`."""
    findings = find_secrets(text)
    if not findings:
        return text
    pieces: list[str] = []
    cursor = 0
    for f in findings:
        pieces.append(text[cursor : f.start])
        pieces.append(MASK_FORMAT.format(kind=f.kind))
        cursor = f.end
    pieces.append(text[cursor:])
    return "".join(pieces)
