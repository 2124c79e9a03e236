"""A small reader of the WordNet 3.0 database files, for `bench/ranking_probes.py`'s thesaurus
probes (`wn-*`). Not part of the plugin.

The files are Princeton's WordNet 3.0 as Debian's `wordnet-base` package installs them
(`/usr/share/wordnet`: `index.*`, `data.*`, `*.exc`); without root, `apt-get download
wordnet-base` and `dpkg-deb -x` give the same files in a folder of one's own.

What it gives a query word: its base form per part of speech (WordNet's morphy: the exception
lists, then the detachment rules), its synsets in WordNet's sense order (most frequent sense
first, from the sense-tagged corpora), and each synset's lemmas that the search index would
keep as one word ("Dr." -> "dr"; "tae_kwon_do" is left out).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

DEFAULT_DIR = Path("/usr/share/wordnet")
PARTS = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_DETACH = {
    "n": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
          ("men", "man"), ("ies", "y")),
    "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""),
          ("ing", "e"), ("ing", "")),
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "r": (),
}  # fmt: skip
_ONE_WORD = re.compile(r"[a-z0-9]+\.?")


class WordNet:
    def __init__(self, folder: Path = DEFAULT_DIR) -> None:
        if not (folder / "index.noun").exists():
            raise SystemExit(
                f"no WordNet 3.0 database in {folder}: install Debian's wordnet-base, or"
                " `apt-get download wordnet-base && dpkg-deb -x wordnet-base_*.deb DIR` and"
                " pass DIR/usr/share/wordnet"
            )
        self._senses: dict[str, dict[str, list[int]]] = {}
        self._exceptions: dict[str, dict[str, list[str]]] = {}
        self._data: dict[str, BinaryIO] = {}
        for part, name in PARTS.items():
            senses: dict[str, list[int]] = {}
            for line in (folder / f"index.{name}").read_text(encoding="latin-1").splitlines():
                if line.startswith(" "):
                    continue  # the licence at the top
                f = line.split()
                pointers = int(f[3])
                senses[f[0]] = [int(o) for o in f[4 + pointers + 2 :]]
            self._senses[part] = senses
            exceptions: dict[str, list[str]] = {}
            for line in (folder / f"{name}.exc").read_text(encoding="latin-1").splitlines():
                inflected, *bases = line.split()
                exceptions.setdefault(inflected, []).extend(bases)
            self._exceptions[part] = exceptions
            self._data[part] = (folder / f"data.{name}").open("rb")

    def base_forms(self, word: str, part: str) -> list[str]:
        """WordNet's morphy: the word itself, its listed exceptions, then each detachment rule
        whose result WordNet knows."""
        word = word.lower()
        known = self._senses[part]
        out = [word] if word in known else []
        candidates = [*self._exceptions[part].get(word, ())]
        candidates += [word[: len(word) - len(s)] + r for s, r in _DETACH[part] if word.endswith(s)]
        out += [c for c in candidates if c in known and c not in out]
        return out

    @lru_cache(maxsize=100_000)  # noqa: B019 - one reader per run
    def _lemmas(self, part: str, offset: int) -> tuple[str, ...]:
        data = self._data[part]
        data.seek(offset)
        fields = data.readline().decode("latin-1").split("|")[0].split()
        count = int(fields[3], 16)
        return tuple(fields[4 + 2 * i] for i in range(count))

    @lru_cache(maxsize=100_000)  # noqa: B019 - one reader per run
    def _narrower(self, offset: int) -> tuple[int, ...]:
        """The noun synsets directly below a noun synset: its hyponyms and instances."""
        data = self._data["n"]
        data.seek(offset)
        fields = data.readline().decode("latin-1").split("|")[0].split()
        at = 4 + 2 * int(fields[3], 16)
        count = int(fields[at])
        pointers = [fields[at + 1 + 4 * i : at + 5 + 4 * i] for i in range(count)]
        return tuple(int(p[1]) for p in pointers if p[0] in ("~", "~i") and p[2] == "n")

    def kinds(self, word: str, *, levels: int = 1, first_sense: bool = True) -> list[str]:
        """The one-word lemmas of `word`'s noun synsets (its most frequent sense, or every one)
        and of the synsets up to `levels` below them (its kinds: "sibling" -> "brother",
        "sister"), nearest first, without the word's own forms."""
        bases = self.base_forms(word, "n")
        own = {word.lower(), *bases}
        out: list[str] = []
        for base in bases:
            offsets = self._senses["n"][base]
            level = list(offsets[:1] if first_sense else offsets)
            seen = set(level)
            for depth in range(levels + 1):
                for offset in level:
                    for lemma in self._lemmas("n", offset):
                        one = _one_word(lemma)
                        if one and one not in own and one not in out:
                            out.append(one)
                if depth == levels:
                    break
                level = [n for o in level for n in self._narrower(o) if n not in seen]
                seen.update(level)
        return out

    def synonyms(self, word: str, *, parts: str = "nva", first_sense: bool = True) -> list[str]:
        """The one-word lemmas of `word`'s synsets (its most frequent sense per part of speech,
        or every sense), in sense order, without the word's own forms."""
        own = {word.lower()}
        for part in PARTS:
            own.update(self.base_forms(word, part))
        out: list[str] = []
        for part in parts:
            for base in self.base_forms(word, part)[:1]:
                offsets = self._senses[part][base]
                for offset in offsets[:1] if first_sense else offsets:
                    for lemma in self._lemmas(part, offset):
                        one = _one_word(lemma)
                        if one and one not in own and one not in out:
                            out.append(one)
        return out


def _one_word(lemma: str) -> str | None:
    lemma = re.sub(r"\(.*\)$", "", lemma).lower()  # an adjective's marker: "galore(ip)"
    return lemma.rstrip(".") if _ONE_WORD.fullmatch(lemma) else None
