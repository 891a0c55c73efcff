"""Subject transforms for stream ``subject_transform``, source transforms and ``republish``.

A source pattern's wildcards are numbered from 1 in order (``*`` tokens, then a trailing ``>``); the
destination refers to them with ``{{wildcard(n)}}`` (or the legacy ``$n``), and a destination ``>`` takes
whatever the source ``>`` matched. (The full mapping engine with partition/split functions is account
subject mapping's; this covers what streams need.)
"""
from __future__ import annotations

import re

_FN = re.compile(r"\{\{\s*wildcard\s*\(\s*(\d+)\s*\)\s*\}\}|\$(\d+)")


def transform_subject(src: str, dest: str, subject: str) -> str:
    """``subject`` (which matches ``src``) rewritten by ``dest``."""
    if not dest or dest == ">":
        return subject
    stoks = (src or ">").split(".")
    toks = subject.split(".")
    wild: list[str] = []
    fwc = ""
    for i, t in enumerate(stoks):
        if t == "*":
            wild.append(toks[i])
        elif t == ">":
            fwc = ".".join(toks[i:])
            wild.append(fwc)
            break

    def repl(m: re.Match) -> str:
        n = int(m.group(1) or m.group(2))
        return wild[n - 1] if 0 < n <= len(wild) else ""

    out = _FN.sub(repl, dest)
    if out.endswith(".>") or out == ">":
        out = out[:-1] + fwc if fwc else out
    return out
