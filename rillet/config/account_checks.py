"""Checks of the ``accounts {}`` exports, imports and mappings, and of the top-level ``mappings {}``, made
when the configuration is loaded: a bad entry fails the load with its file:line:column and nats-server's
wording (opts.go ``parseAccounts``, ``parseAccountExports``/``Imports``, ``parseAccountMappings``).

nats-server reports the export/import errors it finds while wiring accounts together (unknown account,
import not authorized, bad ``prefix``/``to``) at the position of the whole ``accounts`` block (1:0);
Rillet points at the offending export or import entry instead.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from rillet.goquote import go_quote

from .errors import ConfigError
from .typed import Field
from .values import parse_go_duration

_RESPONSE_TYPES = ("singleton", "single", "stream", "chunked")


def go_type(v: Any) -> str:
    """The Go type name nats-server's messages print (``%T``) for a parsed config value."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "map[string]interface {}"
    if isinstance(v, list):
        return "[]interface {}"
    return type(v).__name__


def _q(s: Any) -> str:
    return go_quote(str(s).encode())


def check_mappings(f: Field, cluster: str = "") -> list[ConfigError]:
    """Each ``subject: destination(s)`` of a mappings block, as nats-server checks it."""
    from rillet.subjects.mapping import parse_mappings
    errors: list[ConfigError] = []
    if not isinstance(f.value, dict):
        return [f.error(f"Expected mappings to be a map, got {go_type(f.value)}")]
    for entry in f.entries():
        try:
            parse_mappings({entry.key: entry.value}, cluster)
        except ValueError as e:
            errors.append(entry.error(str(e)))
    return errors


def check_accounts(f: Field) -> list[ConfigError]:
    """Exports, imports and mappings of every account of an ``accounts {}`` map."""
    if not isinstance(f.value, dict):
        return []
    errors: list[ConfigError] = []
    names = set(f.value.keys())
    exports: dict[str, list[tuple[str, str, set | None]]] = {}  # account -> (kind, subject, accounts)
    imports: list[tuple[str, Field]] = []
    for acc in f.entries():
        if not isinstance(acc.value, dict):
            continue
        exports[acc.key] = []
        for sub in acc.entries():
            if sub.name in ("mappings", "maps"):
                errors.extend(check_mappings(sub))
            elif sub.name == "exports":
                errors.extend(_check_exports(sub, acc.key, names, exports[acc.key]))
            elif sub.name == "imports":
                if not isinstance(sub.value, list):
                    errors.append(sub.error(f"Imports should be an array, got {go_type(sub.value)}"))
                    continue
                imports.extend((acc.key, item) for item in sub.items())
    for acc_name, item in imports:
        err = _check_import(item, acc_name, names, exports)
        if err is not None:
            errors.append(err)
    return errors


def _check_exports(f: Field, acc: str, names: set, out: list) -> list[ConfigError]:
    if not isinstance(f.value, list):
        return [f.error(f"Exports should be an array, got {go_type(f.value)}")]
    errors: list[ConfigError] = []
    for item in f.items():
        if not isinstance(item.value, dict):
            errors.append(item.error(f"Export Items should be a map with type entry, got {go_type(item.value)}"))
            continue
        kind = subject = None
        accounts: set | None = None
        seen_rt = seen_thr = False
        rt_field = None
        for e in item.entries():
            n = e.name
            if n in ("stream", "service"):
                kind, subject = n, e.value
            elif n == "accounts":
                accounts = set(e.value) if isinstance(e.value, list) else {e.value}
            elif n in ("response", "response_type"):
                if seen_rt:
                    errors.append(e.error("Duplicate response type definition"))
                    continue
                seen_rt = True
                rt_field = e
                if not isinstance(e.value, str):
                    errors.append(e.error(f"Expected response type to be string, got {go_type(e.value)}"))
                elif e.value.lower() not in _RESPONSE_TYPES:
                    errors.append(e.error(f"Unknown response type: {_q(e.value)}"))
            elif n in ("threshold", "response_threshold", "response_max_time", "response_time"):
                if seen_thr:
                    errors.append(e.error("Duplicate response threshold detected"))
                    continue
                seen_thr = True
                rt_field = rt_field or e
                if isinstance(e.value, timedelta):
                    continue
                if not isinstance(e.value, str):
                    errors.append(e.error("Expected response threshold to be a parseable time duration, got "
                                          f"{go_type(e.value)}"))
                    continue
                try:
                    parse_go_duration(e.value)
                except ValueError:
                    errors.append(e.error("Expected response threshold to be a parseable time duration, got "
                                          f"{_q(e.value)}"))
        if kind == "stream" and rt_field is not None:
            errors.append(rt_field.error("Detected response directive on non-service"))
        if kind is None:
            continue
        for an in sorted(accounts or ()):
            if an not in names:
                errors.append(item.error(f"{_q(an)} account not defined for {kind} export"))
        out.append((kind, subject, accounts))
    return errors


def _check_import(item: Field, acc: str, names: set, exports: dict) -> ConfigError | None:
    if not isinstance(item.value, dict):
        return item.error(f"Import Items should be a map with type entry, got {go_type(item.value)}")
    kind = None
    src: Any = None
    kind_field = None
    prefix = to = None
    to_field = None
    for e in item.entries():
        if e.name in ("stream", "service"):
            kind, src, kind_field = e.name, e.value, e
        elif e.name == "prefix":
            prefix = e.value
            to_field = to_field or e
        elif e.name == "to":
            to = e.value
            to_field = e
    if kind is None or kind_field is None:
        return None
    if not isinstance(src, dict):
        return kind_field.error(f"{kind.capitalize()} entry should be an account map, got {go_type(src)}")
    an, subject = src.get("account"), src.get("subject")
    if not an or not subject:
        return kind_field.error("Expect an account name and a subject")
    if kind == "stream" and prefix and to:
        assert to_field is not None
        return to_field.error("Stream import can not have a 'prefix' and a 'to' property")
    if an not in names:
        return item.error(f"{_q(an)} account not defined for {kind} import")
    from rillet.subjects.validate import is_valid_subject, subject_is_subset_match
    ok = is_valid_subject(subject) and any(k == kind and e_subj and subject_is_subset_match(subject, e_subj) and (accs is None or acc in accs)
             for k, e_subj, accs in exports.get(an, []))
    head = f"Error adding {kind} import {_q(subject)}: "
    if not ok:
        return item.error(head + f"{kind} import not authorized")
    from rillet.subjects.mapping import SubjectTransform
    if kind == "stream":
        if prefix:
            p = str(prefix)
            if any(t in ("*", ">") for t in p.split(".")):
                return item.error(head + "stream import prefix can not contain wildcard tokens")
        elif to and to != subject:
            try:
                SubjectTransform(subject, str(to))
            except ValueError as e:
                return item.error(head + f"failed to create mapping transform for stream import subject from "
                                         f"{_q(subject)} to {_q(to)}: {e}")
    elif to and to != subject and ("$" in str(to) or "{{" in str(to)):  # a destination template
        try:
            SubjectTransform(subject, str(to))
        except ValueError as e:
            return item.error(head + f"failed to create mapping transform for service import subject from "
                                     f"{_q(to)} to {_q(subject)}: {e}")
    return None
