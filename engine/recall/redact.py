"""The last guard before memory leaves recall: credential values are masked in everything it
returns (search results, prefetch blocks, answers) and never become part of a belief.

Capture masks credentials of a recognisable shape (`capture.secrets`: provider key prefixes,
JWTs, PEM blocks, `password=...` assignments) before anything is indexed. A person also hands
over credentials in plain words ("my wifi password is hunter22", "the PIN is 4821"), which capture
keeps readable in the searchable text. Recall adds that conversational layer, and a second
pass of common key shapes, to everything it indexes or returns. Masking is idempotent.
"""

from __future__ import annotations

import re

from ..capture.secrets import MASK_FORMAT
from ..capture.secrets import mask as capture_mask

__all__ = ["MASK", "MASK_MARK", "mask", "mask_words", "has_secret"]

MASK = MASK_FORMAT.format(kind="credential")
MASK_MARK = MASK_FORMAT.split("{", 1)[0]
"""What every masked value starts with, capture's and recall's alike."""

_KEY_SHAPES = re.compile(
    r"""
    (?:sk|pk|rk)-(?:[a-z]+-)?[A-Za-z0-9_\-]{16,}    # OpenAI / Anthropic / Stripe style
    | gh[pousr]_[A-Za-z0-9]{20,}                     # GitHub tokens
    | github_pat_[A-Za-z0-9_]{20,}
    | gl(?:pat|dt|rt)-[A-Za-z0-9_\-]{16,}            # GitLab
    | xox[abprs]-[A-Za-z0-9\-]{10,}                  # Slack
    | AKIA[0-9A-Z]{16}                               # AWS access key id
    | AIza[0-9A-Za-z_\-]{30,}                        # Google API key
    | hf_[A-Za-z0-9]{20,}                            # Hugging Face
    | eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}   # a JWT
    | -----BEGIN[A-Z ]*PRIVATE\ KEY-----[\s\S]*?(?:-----END[A-Z ]*PRIVATE\ KEY-----|\Z)
    """,
    re.VERBOSE,
)

# "password: hunter2", "my api key is abc123...", "token=...", "Bearer ..."
_LABELLED = re.compile(
    r"""
    (?P<label>
        (?:\b(?:pass(?:word|wd|phrase)?|pwd|passcode|pin(?:\ code)?|secret|client[\ _-]?secret
             |api[\ _-]?key|apikey|access[\ _-]?key|auth[\ _-]?token|access[\ _-]?token
             |token|private[\ _-]?key)\b
           (?:\s*[:=]\s*|\s+(?:is|was|is\ now)\s*[:=]?\s*))
        | \bbearer\s+
    )
    (?P<value>(?![\[=:«])[^\s"'`,;]{4,})
    """,
    re.VERBOSE | re.IGNORECASE,
)

# A long run mixing letters and digits, the usual shape of a generated secret.
_OPAQUE = re.compile(
    r"\b(?=[A-Za-z0-9_\-+/]*\d)(?=[A-Za-z0-9_\-+/]*[A-Za-z])[A-Za-z0-9_\-+/]{32,}={0,2}"
)


# Cheap tests that decide whether a pattern can match at all (most text holds no credential, and
# the patterns are slow to run over every position of a long message).
_FOUR_DIGITS = re.compile(r"\d{4}[ -]?\d{4}")
_SHAPE_MARKERS = (
    "sk-", "pk-", "rk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-",
    "gldt-", "glrt-", "xox", "AKIA", "AIza", "hf_", "eyJ", "PRIVATE KEY",
)  # fmt: skip
_LABEL_WORDS = (
    "pass", "pwd", "pin", "secret", "key", "token", "bearer",
)  # fmt: skip


def mask(text: str) -> str:
    """`text` with every credential value masked: capture's shapes, then recall's layer."""
    if not text:
        return text
    return mask_words(capture_mask(text))


def mask_words(text: str) -> str:
    """Recall's layer only, for text capture has already masked (a captured message's `text`)."""
    if not text:
        return text
    out = text
    if any(marker in out for marker in _SHAPE_MARKERS):
        out = _KEY_SHAPES.sub(MASK, out)
    lowered = out.lower()
    if any(word in lowered for word in _LABEL_WORDS):
        out = _LABELLED.sub(lambda m: m.group("label") + MASK, out)
    if any(len(chunk) >= 32 for chunk in out.split()):
        out = _OPAQUE.sub(_opaque, out)
    if _FOUR_DIGITS.search(out):
        out = _CARD.sub(_card, out)
    return out


_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"[ -]", "", match.group(0))
    return MASK if 13 <= len(digits) <= 19 and _luhn(digits) else match.group(0)


def _opaque(match: re.Match[str]) -> str:
    token = match.group(0)
    # Hex digests and UUID-free ids of plain words are common in chat about code; a secret is
    # mixed-case or long. Keep pure lowercase hex under 40 chars (commit ids, short hashes).
    if re.fullmatch(r"[0-9a-f]{32,40}", token):
        return token
    return MASK


def has_secret(text: str) -> bool:
    """Does `text` hold a credential, masked already or not?"""
    return MASK_MARK in text or mask(text) != text
