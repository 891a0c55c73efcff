"""Subject transforms for stream ``subject_transform``, source transforms and ``republish``: the account
mapping engine (``rillet.subjects.mapping``), with each (source, destination) pair compiled once."""
from __future__ import annotations

from functools import lru_cache

from rillet.subjects.mapping import SubjectTransform


@lru_cache(maxsize=1024)
def _compiled(src: str, dest: str) -> SubjectTransform:
    return SubjectTransform(src or ">", dest)


def transform_subject(src: str, dest: str, subject: str) -> str:
    """``subject`` (which matches ``src``) rewritten by ``dest``; unchanged when there is no destination. A
    destination of only ``>`` keeps what the source's ``>`` matched (``w.*.>`` -> ``>``: ``w.a.b.c`` -> ``b.c``),
    as nats-server; with a source of ``>`` too that is the subject itself."""
    if not dest:
        return subject
    out = _compiled(src or ">", dest).match_transform(subject)
    return subject if out is None else out
