"""Credentials in text: found, named and masked. The one place Chronicle decides what a credential
looks like; capture, recall, compaction and consolidation all call this module.

Invariant: a credential's value never leaves the raw archived message. Everything derived from a
message (its searchable `text`, the person's own words, snippets, beliefs, prefetch, section
prose, the handoff) is built from `mask(...)`'s output, so a key the user pasted into the chat is
still in the transcript they can expand, and nowhere else. `mask` is idempotent, never lengthens
a text that holds no credential, and leaves nothing `find_secrets` would find.

Detection is conservative; ordinary prose and code must pass through untouched (the tests keep a
corpus of both). Four layers:
- shapes that are random by construction: provider prefixes, JWTs, PEM armour, `Bearer <token>`,
  the password in a URL;
- a value assigned to a credential-named key (`password=...`, `"api_key": "..."`);
- a value labelled in plain words ("my wifi password is hunter22", "the PIN is 4821");
- a card number (Luhn-valid, a card network's prefix and length) and an opaque token (32+
  characters that mix letters and digits the way generated secrets do, not the way identifiers,
  digests or UUIDs do).

Most text holds no credential, and capture runs on every message of every turn, so each layer is
gated by a test C does in one pass (a literal every match holds, found with `str.find` or `in`;
a key word only where "is", "=" or ":" follows); a regex only runs anchored at a candidate.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Finding",
    "find_secrets",
    "mask",
    "has_secret",
    "MASK_FORMAT",
    "MASK_MARK",
    "MASKER_KEY",
]

MASK_FORMAT = "«masked:{kind}»"
"""What replaces a credential's value. No brackets or angle brackets, so masking never creates or
breaks a host frame (`[System note: ...]`, `<memory-context>`) in the text it is applied to."""

MASK_MARK = MASK_FORMAT.split("{", 1)[0]
"""What every masked value starts with."""


@dataclass(frozen=True, slots=True)
class Finding:
    """A credential found in a text: its kind and the range of its value."""

    kind: str
    start: int  # char range of the value that is masked (the key name stays readable)
    end: int


_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")  # of a lower-cased name
_DIGITS = "0123456789"


def _mixed(value: str) -> bool:
    """Random keys mix letters and digits; words and kebab-case identifiers do not. Not asked of
    fixed formats no word can take (`ghp_` and 36 alphanumerics, `AKIA` and 16 capitals): one
    such key in a few dozen has no digit at all."""
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _compiled(source: str) -> Callable[[], re.Pattern[str]]:
    """The pattern `source`, compiled on its first call: the long ones below cost a tenth of the
    plugin's import to compile, and most texts never reach them (each runs behind a C test)."""
    return functools.cache(lambda: re.compile(source))


# -- shapes: formats that are random by construction --------------------------------------------


@dataclass(frozen=True, slots=True)
class _Shape:
    """A credential's shape: the literal every match holds, and the pattern matched there."""

    kind: str
    find: (
        str  # a literal every match holds, found with str.find (in the lower-cased text if folded)
    )
    # Matched where the credential starts; compiled on the first text that holds `find` (most
    # shapes never meet one, and compiling them all cost a fifth of registering the plugin).
    pattern: str
    back: int = 0  # how far before `find` the credential starts
    starts: tuple[str, ...] = ()  # what the credential may start with (none: `find` is enough)
    group: int = 0  # the group that holds the value to mask
    check: Callable[[str], bool] | None = None  # a value check; _mixed implies a digit
    bounded: bool = True  # must not follow a token character
    folded: bool = False  # `find` is case-insensitive
    # A character every match holds and ordinary prose seldom does: a text without it is not
    # searched for `find` at all (one memchr instead of a substring search per shape, which on
    # a 4 KB tool output was most of the shapes' cost). Taken from `starts` or `find` unless given.
    gate: str | None = None

    def __post_init__(self) -> None:
        if self.gate is None:
            held = self.starts or (self.find,)
            rare = "_-:" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
            gate = "" if self.folded else next((c for c in rare if all(c in h for h in held)), "")
            object.__setattr__(self, "gate", gate)

    def scan(self, text: str, haystack: str, found: list[Finding]) -> None:
        i = haystack.find(self.find)
        while i >= 0:
            at = i - self.back
            if (
                at >= 0
                and not (self.bounded and at and text[at - 1] in _TOKEN_CHARS)
                and (not self.starts or text.startswith(self.starts, at))
            ):
                match = re.compile(self.pattern).match(text, at)  # re's cache after the first
                if match is not None:
                    value = match.group(self.group)
                    if value and (self.check is None or self.check(value)):
                        start, end = match.span(self.group)
                        found.append(Finding(self.kind, start, end))
            i = haystack.find(self.find, i + 1)


_SHAPES: tuple[_Shape, ...] = (
    _Shape(
        "private_key",
        "-----BEGIN ",
        (
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)"
        ),
        bounded=False,
    ),
    _Shape(
        "anthropic_key",
        "sk-ant-",
        r"sk-ant-[A-Za-z0-9_\-]{20,}(?![A-Za-z0-9_\-])",
        check=_mixed,
    ),
    _Shape(
        "openai_key",
        "sk-",
        r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}(?![A-Za-z0-9_\-])",
        check=_mixed,
    ),
    *(
        _Shape(
            "github_token",
            prefix,
            prefix + r"[A-Za-z0-9]{30,}(?![A-Za-z0-9_\-])",
        )
        for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
    ),
    _Shape(
        "github_token",
        "github_pat_",
        r"github_pat_[A-Za-z0-9_]{22,}(?![A-Za-z0-9_\-])",
    ),
    _Shape(
        "gitlab_token",
        "gl",
        r"gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_\-]{20,}(?![A-Za-z0-9_\-])",
        starts=("glpat-", "gldt-", "glrt-", "glptt-"),
        check=_mixed,
    ),
    _Shape(
        "huggingface_token",
        "hf_",
        r"hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9_\-])",
    ),
    *(
        _Shape(
            "aws_access_key",
            prefix,
            prefix + r"[0-9A-Z]{16}(?![A-Za-z0-9])",
        )
        for prefix in ("AKIA", "ASIA")
    ),
    *(
        _Shape(
            "slack_token",
            prefix,
            r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-[A-Za-z0-9\-]{10,})(?![A-Za-z0-9_\-])",
            check=_mixed,
            gate="-",
        )
        for prefix in ("xox", "xapp-")  # not "x": ordinary words ("index") hold it
    ),
    _Shape(
        "google_api_key",
        "AIza",
        r"AIza[0-9A-Za-z_\-]{35}(?![A-Za-z0-9_\-])",
    ),
    _Shape(
        "stripe_key",
        "k_",
        r"[sr]k_(?:live|test)_[0-9A-Za-z]{16,}(?![A-Za-z0-9_\-])",
        back=1,
        starts=("sk_live_", "rk_live_", "sk_test_", "rk_test_"),
        check=_mixed,
    ),
    _Shape(
        "jwt",
        "eyJ",
        r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}(?![A-Za-z0-9_\-])",
    ),
    _Shape(
        "bearer_token",
        "bearer",
        r"(?i)bearer\s+([A-Za-z0-9._~+/\-]{16,}=*)",
        group=1,
        check=_mixed,
        folded=True,
    ),
    _Shape(
        "bearer_token",
        "basic",
        r"(?i)basic\s+([A-Za-z0-9._~+/\-]{16,}=*)",
        group=1,
        check=_mixed,
        folded=True,
    ),
    _Shape(
        "url_credentials",
        "://",
        r"[a-zA-Z0-9+.\-]://[^\s:/@'\"<>]{1,128}:([^\s@/'\"<>]{1,256})@",
        back=1,
        group=1,
        bounded=False,
    ),
)


def _shapes(text: str, lowered: str, digits: bool, found: list[Finding]) -> None:
    held: dict[str, bool] = {}
    for shape in _SHAPES:
        if shape.check is _mixed and not digits:
            continue
        if shape.gate:
            has = held.get(shape.gate)
            if has is None:
                has = held[shape.gate] = shape.gate in text
            if not has:
                continue
        haystack = lowered if shape.folded else text
        if shape.find in haystack:  # most texts hold no shape's literal: no call at all
            shape.scan(text, haystack, found)


def _words(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


# -- assignments: `password=...`, `"api_key": "..."`, `export GITHUB_TOKEN=...` ------------------

_KEY_WORDS = (
    r"password|passwd|passwort|passcode|pwd|passphrase|secret|client[_\-]?secret|secret[_\-]?key|"
    r"api[_\-]?key|apikey|access[_\-]?key|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token|"
    r"private[_\-]?key|token"
)
# From a key word onwards: the rest of the name, then `=` or `:` (matched on lower-cased text).
# A quote may come escaped, once or more (`\\"password\\": \\"...\\"`): JSON inside a JSON string, as a
# tool call's arguments carry a `curl -d '{"password": ...}'`.
_KEY_WORD_TAIL = _compiled(r"(?:pass|pwd|secret|token|key)[a-z0-9_\-]*\\*[\"']?[ \t]*[=:]")
_ASSIGNMENT = _compiled(
    r"(?i)([A-Za-z0-9_\-]*?(?:" + _KEY_WORDS + r"))\\*[\"']?"
    r"[ \t]*(?:=(?!=)|:(?![:/]))[ \t]*"
    r"(?:(\\+)\"([^\n]{1,512}?)\2\"|\"([^\"\n]{1,512})\"|'([^'\n]{1,512})'|`([^`\n]{1,512})`"
    r"|([^\s\"'`,;)}\]\\]{1,512}))"
)

# Values that are code, types or placeholders rather than a credential.
_NOT_A_VALUE = _words(
    """str string int bytes bool boolean none null nil true false any optional secretstr undefined
    required optional[str] | list dict object env environ getenv self cls default placeholder
    redacted hidden changeme your_password yourpassword"""
)
_FUNCTION_WORDS = _words(
    """a an the is are was were be been must should will would can could may might not no yes and
    or but if then else for to of in on at by with from as it this that these those field fields
    value values required optional empty set unset same here there below above my your his her
    our their its"""
)
_PASSWORD_KEY = re.compile(r"(?i)pass|pwd")
_PLACEHOLDER = _compiled(
    r"^(?:[*xX•.\-_#]+|<[^>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%\(?[a-z_]*\)?s|\{\{?[^}]*\}?\})$"
)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CODE_VALUE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:[.\[(]|$)")


def _is_code_or_placeholder(value: str) -> bool:
    lowered = value.lower()
    if not value.strip() or lowered in _NOT_A_VALUE or _PLACEHOLDER().match(value):
        return True
    if value.startswith(("<", "${", "{{", "%(")):
        return True
    return _CODE_VALUE.match(value) is not None and any(c in value for c in ".[(")


def _assignment_value_is_secret(key: str, value: str, quoted: bool, following: str) -> bool:
    lowered = value.lower()
    if not value.strip() or lowered in _NOT_A_VALUE or _PLACEHOLDER().match(value):
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


def _assignment_kind(key: str) -> str:
    k = key.lower()
    if "pass" in k or "pwd" in k:
        return "password"
    if "token" in k:
        return "token"
    if "key" in k:
        return "api_key"
    return "secret"


def _assignment_at(text: str, start: int, found: list[Finding]) -> int:
    """Try an assignment whose name starts at `start`; returns where it ends (or `start`)."""
    match = _ASSIGNMENT().match(text, start)
    if match is None:
        return start
    key = match.group(1)
    for group in (3, 4, 5, 6, 7):  # (2 is the escape of an escaped quote)
        if match.group(group) is not None:
            break
    value = match.group(group)
    following = text[match.end(group) : match.end(group) + 1]
    if _assignment_value_is_secret(key, value, group != 7, following):
        found.append(Finding(_assignment_kind(key), match.start(group), match.end(group)))
    return match.end()


# -- labelled in plain words: "my wifi password is hunter22", "the PIN is 4821" --------------------

# After the label: an optional "for the router", then "is"/"was" (or, for two-word labels and the
# PIN, `:`/`=`), then the value. Matched on the lower-cased text, at the end of the label word.
_SAID = _compiled(
    r"(?:[ \t]+(?:code|number))?"
    r"(?:[ \t]+(?:for|to|of|on|at)(?:[ \t]+[^\s.,;:!?=«\"'`]+){1,3}?)??"
    r"(?P<sep>[ \t]+(?:is|was)(?:[ \t]+(?:now|still|just|actually))?(?:[ \t]*:)?[ \t]+|[ \t]*(?:=(?!=)|:(?![:/]))[ \t]*)"
    r"(?P<value>\"[^\"\n]{1,128}\"|'[^'\n]{1,128}'|`[^`\n]{1,128}`|[^\s\"'`«]{1,128})"
)
_PASSWORD_WORDS = ("password", "passwd", "passwort", "passphrase", "passcode")
_KEY_QUALIFIERS = _words(
    """api access private secret license licence product activation encryption ssh signing deploy
    master recovery wifi wi-fi wpa wpa2 network"""
)
_TOKEN_QUALIFIERS = _words("api auth access refresh bearer session personal")
_INDEFINITE = _words("a an any every each no whose which what")
# Words that describe a credential rather than being one ("the password is incorrect").
_PREDICATES = _words(
    """wrong right correct incorrect valid invalid required optional mandatory empty blank missing
    unknown known different same similar new old default hidden visible public private personal
    important necessary secure insecure safe unsafe easy hard simple complex good bad great fine ok
    okay weak strong long short better worse best worst stronger weaker longer shorter safer easier
    harder simpler set unset reset stored saved hashed encrypted expired locked shown written
    given taken forgotten lost stolen leaked compromised there here what which how where why who
    whatever something anything nothing everything one mine yours hers ours theirs too so very
    quite pretty really also still now just only always never usually probably definitely actually
    enough random secret none null empty unchanged case-sensitive"""
)
_PREDICATE_ENDINGS = ("ed", "ing", "ly", "able", "ible", "ful", "less", "ous", "ive")
_TRAILING = ".,;:!?)]}>"
_PIN = re.compile(r"\d{4,12}")


def _label_kind(lowered: str, start: int, end: int) -> tuple[str, bool] | None:
    """The kind of credential the word lowered[start:end] labels, and whether it is a two-word
    label ("api key"), or None when the word labels nothing."""
    word = lowered[start:end]
    previous = lowered[max(0, start - 16) : start].rstrip().rpartition(" ")[2]
    if word.endswith(_PASSWORD_WORDS):
        return "password", False
    if word == "pin":
        return "pin", False
    if word.endswith("token") and (word == "token" or word[-6] in "_-"):
        return "token", word == "token" and previous in _TOKEN_QUALIFIERS
    if word == "secret" or word.endswith(("_secret", "-secret")):
        return "secret", word == "secret" and previous == "client"
    if word.endswith("key"):
        if word == "key":
            return ("api_key", True) if previous in _KEY_QUALIFIERS else None
        stem = word[:-3].rstrip("_-")
        return ("api_key", False) if stem in _KEY_QUALIFIERS else None
    return None


def _said_value_is_secret(kind: str, value: str, quoted: bool, lowered: str, start: int) -> bool:
    if value.startswith(MASK_MARK) or _is_code_or_placeholder(value):
        return False
    if kind == "pin":
        return _PIN.fullmatch(value) is not None
    if value.startswith(("/", "~/", "./", "../", "http://", "https://")):
        return False
    if kind != "password":
        # A key, a token or a secret is generated: letters and digits, or a long run joined by
        # `_`/`-` with one long random-looking part (a prefixed token such as `ghp_...`), which
        # words joined by hyphens ("stored-in-the-vault") never have.
        if len(value) < 8 or " " in value:
            return False
        if _mixed(value):
            return True
        parts = re.split(r"[_\-]", value.lower())
        return len(parts) > 1 and max(len(p) for p in parts) >= 16
    if len(value) < 4:
        return False
    word = value.lower()
    if quoted or not word.replace("-", "").isalpha():
        return word not in _PREDICATES
    # A plain word: a password only when it is not a description of one.
    last = word.rpartition("-")[2]
    if word in _PREDICATES or word in _FUNCTION_WORDS or last.endswith(_PREDICATE_ENDINGS):
        return False
    before = lowered[max(0, start - 24) : start].split()[-2:]
    return not any(w in _INDEFINITE for w in before)  # "a passphrase is better": general talk


def _said_at(text: str, lowered: str, start: int, end: int, found: list[Finding]) -> None:
    label = _label_kind(lowered, start, end)
    if label is None:
        return
    kind, two_words = label
    match = _SAID().match(lowered, end)
    if match is None:
        return
    if not match.group("sep").strip(" \t").startswith(("is", "was")) and not (
        two_words or kind == "pin"
    ):
        return  # `password: ...` with a one-word name is an assignment, judged as code is
    v_start, v_end = match.span("value")
    quoted = lowered[v_start] in "\"'`"
    if quoted:
        v_start, v_end = v_start + 1, v_end - 1
    else:
        while v_end > v_start and text[v_end - 1] in _TRAILING:
            v_end -= 1
    value = text[v_start:v_end]
    if value and _said_value_is_secret(kind, value, quoted, lowered, start):
        found.append(Finding(kind, v_start, v_end))


_LABEL_HINTS = ("pass", "pwd", "secret", "token", "key", "pin")
# What must follow a key word for it to label anything: the rest of its name, then within five
# words "is"/"was", `=` or `:`. A superset of what `_SAID` and `_KEY_WORD_TAIL` accept, tested in
# C, so the many "token"s and "key"s of ordinary text cost almost nothing.
_LABEL_FOLLOWS = _compiled(
    r"[a-z0-9_\-]*+(?:[ \t]++[^\s=:]++){0,5}?(?:[ \t]+(?:is|was)(?![a-z])|\\*[\"']?[ \t]*[=:])"
)


def _labelled(text: str, lowered: str, digits: bool, found: list[Finding]) -> None:
    """Assignments and labels in plain words, tried at each name holding a key word."""
    hits: list[tuple[int, str]] = []
    for hint in _LABEL_HINTS:
        if hint == "pin" and not digits:
            continue  # a PIN is digits
        i = lowered.find(hint)
        while i >= 0:
            near = lowered[i : i + 200]  # a cheap necessary test before the exact one
            if ("=" in near or ":" in near or " is" in near or " was" in near) and (
                _LABEL_FOLLOWS().match(lowered, i + len(hint))
            ):
                hits.append((i, hint))
            i = lowered.find(hint, i + 1)
    if not hits:
        return
    hits.sort()
    # Word bounds by `bytes.find` over a class map: ordinary text says "token" or "key" often,
    # and walking each name character by character made masking a compaction's dominant cost.
    classes = _classes(lowered, _NAME_CLASS)
    assigns = "=" in text or ":" in text
    next_free = 0
    last_start = -1
    for i, hint in hits:
        start = classes.rfind(b" ", 0, i) + 1
        if start == last_start:
            continue  # one word, several key words ("secret_token")
        last_start = start
        if assigns and hint != "pin" and start >= next_free and _KEY_WORD_TAIL().match(lowered, i):
            next_free = _assignment_at(text, start, found)
        end = classes.find(b" ", i)
        _said_at(text, lowered, start, len(lowered) if end < 0 else end, found)


# -- card numbers ---------------------------------------------------------------------------------

_CARD = re.compile(r"\d(?:[ -]?\d){12,18}(?!\d)")


def _classes(text: str, table: bytes) -> bytes:
    """`text` as one byte per character (non-ASCII as "?"), mapped through `table`: a string
    `bytes.find` can scan at C speed, with offsets that are `text`'s."""
    return text.encode("ascii", "replace").translate(table)


_DIGIT_CLASS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_TOKEN_CLASS = bytes(
    97 if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_-+/") else 32 for b in range(256)
)
_NAME_CLASS = bytes(97 if chr(b) in _NAME_CHARS else 32 for b in range(256))


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_network(digits: str) -> bool:
    """A prefix and a length some card network issues (Visa, Mastercard, Amex, Discover, JCB,
    Diners, UnionPay, Maestro). Epoch milliseconds (13 digits starting with 1) are not cards."""
    n, first = len(digits), digits[0]
    if first == "4":
        return n in (13, 16, 19)
    if first == "5":
        return 12 < n < 20
    if first == "2":
        return n == 16 and 2221 <= int(digits[:4]) <= 2720
    if first == "3":
        return digits[:2] in ("34", "37") and n == 15 or digits[:2] in ("30", "35", "36", "38")
    return first == "6"


def _cards(text: str, found: list[Finding]) -> None:
    # Every card number holds a run of four digits; a number only starts where a run does.
    classes = _classes(text, _DIGIT_CLASS)
    i = classes.find(b"0000")
    while i >= 0:
        match = None
        if not (i and text[i - 1] in "+.,-/"):  # a phone's +, a decimal, a date or a path
            match = _CARD.match(text, i)
        if match is not None:
            raw = match.group(0)
            groups = re.split(r"[ -]", raw)
            consistent = len(groups) == 1 or (len(groups) <= 5 and len(set(raw) & {" ", "-"}) == 1)
            digits = "".join(groups)
            if consistent and _card_network(digits) and _luhn(digits):
                found.append(Finding("card_number", match.start(), match.end()))
        end = classes.find(b" ", i)
        if end < 0:
            break
        i = classes.find(b"0000", max(end, match.end() if match else end))


# -- opaque tokens --------------------------------------------------------------------------------

_PADDING = re.compile(r"={1,2}(?![=\w])")
_HEX = re.compile(r"[0-9a-fA-F\-]+")
_PARTS = re.compile(r"[-_/+=.]+")


def _random_looking(token: str) -> bool:
    """Generated secrets change character class (digit to letter, lower to upper) far more often
    than identifiers do: `validate_user_input_v2`, `ThisIsCamelCase2`, `python3.11-site-packages`
    score low, `Xk9mP2qL7vR4...` high. Hex (digests, commit ids, UUIDs) is never masked alone, nor
    a name with a short random part (a pod's `-7d9f8c6b5-x2k4p`): 24 characters at least must mix."""
    if not _mixed(token) or _HEX.fullmatch(token.rstrip("=")):
        return False
    changes = 0.0
    mixing = 0  # characters in parts that mix digits and letters, or cases
    total = 0
    for part in _PARTS.split(token):
        total += len(part)
        if len(part) >= 4 and (_mixed(part) or part.lower() != part != part.upper()):
            mixing += len(part)
        for a, b in zip(part, part[1:], strict=False):
            if a.isdigit() != b.isdigit():
                changes += 1
            elif a.isupper() != b.isupper():
                changes += 1 / 3
    return mixing >= 24 and changes >= 0.22 * total


def _opaque(text: str, taken: list[Finding], found: list[Finding]) -> None:
    classes = _classes(text, _TOKEN_CLASS)
    i = classes.find(b"a" * 32)  # the start of a run of 32 token characters or more
    while i >= 0:
        end = classes.find(b" ", i)
        end = len(text) if end < 0 else end
        padding = _PADDING.match(text, end)
        if padding is not None:
            end = padding.end()
        if not any(f.start < end and i < f.end for f in taken) and _random_looking(text[i:end]):
            found.append(Finding("opaque_token", i, end))
        i = classes.find(b"a" * 32, end)


# -- the public functions -------------------------------------------------------------------------


def _lower(text: str) -> str:
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    # A few letters lower-case to two characters; keep offsets aligned with `text`.
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _non_overlapping(found: list[Finding]) -> list[Finding]:
    # Prefer the earliest start; at equal starts the longer span (a PEM block over a key inside).
    found.sort(key=lambda f: (f.start, -(f.end - f.start)))
    out: list[Finding] = []
    for finding in found:
        if out and finding.start < out[-1].end:
            continue
        out.append(finding)
    return out


def find_secrets(text: str) -> list[Finding]:
    """Every credential value in `text`, in order, non-overlapping."""
    if not text:
        return []
    lowered = _lower(text)
    digits = any(d in text for d in _DIGITS)
    found: list[Finding] = []
    _shapes(text, lowered, digits, found)
    _labelled(text, lowered, digits, found)
    if digits:
        _cards(text, found)
        found = _non_overlapping(found)
        # Last, and only where nothing more specific matched: the catch-all for a bare token.
        if len(text) >= 32:
            extra: list[Finding] = []
            _opaque(text, found, extra)
            found += extra
    return _non_overlapping(found)


def has_secret(text: str) -> bool:
    """Does `text` hold a credential, masked already or not?"""
    return MASK_MARK in text or bool(find_secrets(text))


def _replace(text: str, findings: list[Finding]) -> str:
    pieces: list[str] = []
    cursor = 0
    for f in findings:
        pieces.append(text[cursor : f.start])
        pieces.append(MASK_FORMAT.format(kind=f.kind))
        cursor = f.end
    pieces.append(text[cursor:])
    return "".join(pieces)


def mask(text: str) -> str:
    """`text` with every credential value replaced by `«masked:<kind>»`."""
    if text in _clean:
        return text
    findings = find_secrets(text)
    # Masking can leave a fragment that reads differently on its own (a label now next to a
    # second value): mask again until nothing is found, so masking is idempotent.
    for _ in range(4):
        if not findings:
            _remember_clean(text)
            return text
        text = _replace(text, findings)
        findings = find_secrets(text)
    return text


# Texts this process found clean (no credential: what `mask` gives back unchanged), most recent
# last. A captured message is masked when it is captured and again when recall folds it, usually
# a moment later in the same process: the second time is a dictionary lookup instead of a scan.
# Only clean text is kept (never a text that held a credential), bounded in entries and characters.
_CLEAN_ENTRIES = 4096
_CLEAN_CHARS = 2_000_000
_clean: dict[str, int] = {}
_clean_chars = 0
_clean_lock = threading.Lock()


def _remember_clean(text: str) -> None:
    global _clean_chars
    with _clean_lock:
        if text in _clean:
            return
        _clean[text] = len(text)
        _clean_chars += len(text)
        while len(_clean) > _CLEAN_ENTRIES or _clean_chars > _CLEAN_CHARS:
            _clean_chars -= _clean.pop(next(iter(_clean)))


def _masker_key() -> bytes | None:
    """What this masker is: this module's source, read as it is imported, and the exact Python
    (and so the `re`) that runs it. None when the source cannot be read."""
    try:
        with open(__file__, "rb") as source:
            code = source.read()
    except (OSError, TypeError, NameError):
        return None
    return hashlib.blake2b(code + b"\0" + str(sys.hexversion).encode(), digest_size=32).digest()


MASKER_KEY = _masker_key()
"""Names this masker for a stamp that says it found nothing in a text (`chronicle/blocks.py`).
Read when the module is imported, not at first use: a release installed over a running process
must not lend its key to the masker that process still runs."""
