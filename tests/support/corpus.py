"""The scrubber's corpora (``tests/data/credentials.txt`` and ``benign.txt``), expanded.

Credential lines are templates so that no file holds a credential-shaped literal: fillers are
expanded here, from the same patterned alphabets the rule table's examples use.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from cvdiag.scrubbing.rules import fake

DATA = Path(__file__).resolve().parent.parent / "data"
_FILLER = re.compile(r"\{(an|hex|HEX|up|lo|dig|b64|url|b32|alpha):([0-9]+)\}")
_ESCAPE = re.compile(r"\\(\\|n)")


class Credential(NamedTuple):
    family: str
    #: The credential as it appears in the wild, with its context.
    text: str
    #: The parts that must never reach an envelope.
    secrets: tuple[str, ...]

    def pieces(self) -> set[str]:
        """Every 8-character piece of its secrets, lowercased (ids and slugs are lowercased, and
        a lowercased credential is still a credential)."""
        return {s[i : i + 8].lower() for s in self.secrets for i in range(max(len(s) - 7, 1))}

    def leaked(self, output: str) -> list[str]:
        lower = output.lower()
        return sorted(piece for piece in self.pieces() if piece in lower)


def _expand(template: str) -> str:
    text = _FILLER.sub(lambda m: fake(m.group(1), int(m.group(2))), template)
    return _ESCAPE.sub(lambda m: "\\" if m.group(1) == "\\" else "\n", text)


def credentials() -> list[Credential]:
    out = []
    for line in (DATA / "credentials.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        family, template = line.split("\t", 1)
        text = _expand(template)
        secrets = tuple(re.findall("«(.*?)»", text, re.DOTALL))
        plain = text.replace("«", "").replace("»", "")
        out.append(Credential(family, plain, secrets or (plain,)))
    return out


def benign() -> list[tuple[str, str]]:
    """(category, text) pairs that the scrubber must leave exactly as they are."""
    out = []
    for line in (DATA / "benign.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        category, text = line.split("\t", 1)
        out.append((category, text))
    return out
