"""MQTT topics and NATS subjects, both ways, with nats-server's rules.

MQTT levels are separated by ``/``, NATS tokens by ``.``. A topic maps to a subject by:

* ``/`` between two non-empty levels becomes ``.`` (``a/b`` -> ``a.b``);
* an empty level keeps its ``/`` inside the token so the subject stays valid: a leading ``/`` becomes
  ``/.`` (``/a`` -> ``/.a``), a ``/`` followed by another ``/`` or ending the topic becomes ``./``
  (``a//b`` -> ``a./.b``, ``a/`` -> ``a./``);
* a ``.`` inside a level becomes ``//`` (``a.b`` -> ``a//b``);
* in filters ``+`` becomes ``*`` and ``#`` becomes ``>``; in topic names they are refused;
* whitespace and DEL are refused (they cannot be carried in a subject).

A subject maps back by undoing those: ``.`` -> ``/``, ``//`` -> ``.``, ``/.`` -> ``/``.
"""
from __future__ import annotations

__all__ = ["TopicError", "topic_to_subject", "filter_to_subject", "subject_to_topic", "needs_level_up",
           "reserved_filter"]


class TopicError(ValueError):
    pass


_BAD = frozenset(" \t\n\r\f\x7f")


def _convert(mt: str, wildcards: bool) -> str:
    out: list[str] = []
    n = len(mt)
    for i, ch in enumerate(mt):
        if ch == "/":
            if i == 0 or out[-1][-1] == ".":
                out.append("/.")
            elif i == n - 1 or mt[i + 1] == "/":
                out.append("./")
            else:
                out.append(".")
        elif ch in _BAD:
            raise TopicError("character not supported for MQTT topics")
        elif ch == ".":
            out.append("//")
        elif ch == "+" or ch == "#":
            if not wildcards:
                raise TopicError(f"wildcards not allowed in publish's topic: {mt!r}")
            out.append("*" if ch == "+" else ">")
        else:
            out.append(ch)
    s = "".join(out)
    if s.endswith("."):
        s += "/"
    return s


def topic_to_subject(topic: str) -> str:
    """The NATS subject of an MQTT topic name (PUBLISH, will). TopicError if it cannot be one."""
    return _convert(topic, False)


def filter_to_subject(flt: str) -> str:
    """The NATS subject of an MQTT topic filter (SUBSCRIBE), after checking the wildcards' places."""
    levels = flt.split("/")
    for i, lv in enumerate(levels):
        if "#" in lv and (lv != "#" or i != len(levels) - 1):
            raise TopicError(f"invalid use of multi-level wildcard in filter {flt!r}")
        if "+" in lv and lv != "+":
            raise TopicError(f"invalid use of single-level wildcard in filter {flt!r}")
    return _convert(flt, True)


def subject_to_topic(subject: str) -> str:
    """The MQTT topic a NATS subject is delivered under."""
    out: list[str] = []
    i, n = 0, len(subject)
    while i < n:
        ch = subject[i]
        if ch == "/":
            if i < n - 1 and subject[i + 1] in "./":
                out.append("/" if subject[i + 1] == "." else ".")
                i += 2
                continue
            i += 1  # (a lone '/' inside a token: dropped, as nats-server does)
            continue
        out.append("/" if ch == "." else ch)
        i += 1
    return "".join(out)


def needs_level_up(subject: str) -> bool:
    """``a.>`` (from ``a/#``): MQTT's ``#`` also matches the parent level ``a``, so a second subscription
    on ``a`` is needed (nats-server makes it with the sid suffix `` fwc``)."""
    return len(subject) >= 3 and subject.endswith(".>")


def reserved_filter(subject: str) -> bool:
    """A filter starting with a wildcard: it must not match topics beginning with ``$`` [MQTT-4.7.2-1]."""
    return subject in ("*", ">") or subject.startswith("*.")
