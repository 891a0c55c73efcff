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

from rillet.gocompat.goquote import go_quote, go_type

from .errors import ConfigError
from .typed import Field
from rillet.gocompat.gotime import parse_go_duration

_RESPONSE_TYPES = ("singleton", "single", "stream", "chunked")



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
    """Exports, imports and mappings of every account of an ``accounts {}`` map.

    What nats-server finds only when it wires the accounts together (an unknown account, an import that no
    export allows, a bad import transform or latency subject) it reports at the ``accounts`` key; so does this."""
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
                errors.extend(_check_exports(sub, acc.key, names, exports[acc.key], f))
            elif sub.name == "imports":
                if not isinstance(sub.value, list):
                    errors.append(sub.error(f"Imports should be an array, got {go_type(sub.value)}"))
                    continue
                imports.extend((acc.key, item) for item in sub.items())
    local_subjects: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (importer, local subject) -> sources
    for acc_name, item in imports:
        dup = _duplicate_service_import(item, acc_name, local_subjects)
        if dup is not None:
            errors.append(dup)
            continue
        err = _check_import(item, acc_name, names, exports, f)
        if err is not None:
            errors.append(err)
    return errors


def _duplicate_service_import(item: Field, acc: str, seen: dict) -> ConfigError | None:
    """nats-server refuses two service imports of one account from the same account to one local subject."""
    v = item.value
    if not isinstance(v, dict) or not isinstance(v.get("service"), dict):
        return None
    src = v["service"]
    an, subject = src.get("account"), src.get("subject")
    if not an or not subject:
        return None
    local = str(v.get("to") or subject)
    prev = seen.setdefault((acc, local), [])
    for p_an, p_subject in prev:
        if p_an == an:
            return item.error(f"Duplicate service import subject {_q(local)}, previously used in import for "
                              f"account {_q(p_an)}, subject {_q(p_subject)}")
    prev.append((str(an), str(subject)))
    return None


def _check_exports(f: Field, acc: str, names: set, out: list, wired: Field) -> list[ConfigError]:
    if not isinstance(f.value, list):
        return [f.error(f"Exports should be an array, got {go_type(f.value)}")]
    errors: list[ConfigError] = []
    latencies: list[tuple[Field, Any, Any, Any]] = []
    for item in f.items():
        if not isinstance(item.value, dict):
            errors.append(item.error(f"Export Items should be a map with type entry, got {go_type(item.value)}"))
            continue
        kind = subject = None
        accounts: set | None = None
        seen_rt = seen_thr = False
        rt_field = lat_field = None
        for e in item.entries():
            n = e.name
            if n == "latency":
                lat_field = e
            elif n in ("stream", "service"):
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
        if lat_field is not None:
            lat = _check_latency_entry(lat_field, kind, errors)
            if lat is not None and kind == "service":
                latencies.append((item, subject, lat, rt_field.value if rt_field is not None and
                                  rt_field.name in ("response", "response_type") else "singleton"))
        if kind is None:
            continue
        for an in sorted(accounts or ()):
            if an not in names:
                errors.append(wired.error(f"{_q(an)} account not defined for {kind} export"))
        out.append((kind, subject, accounts))
    errors.extend(_check_latency_subjects(latencies, out, wired))
    return errors


def _check_latency_entry(f: Field, kind: Any, errors: list) -> Any:
    """A service export's ``latency`` (parse_latency's checks, at the sampling value when that is wrong)."""
    from .latency import BAD_SAMPLING, parse_latency
    if kind == "stream":
        errors.append(f.error("Detected latency directive on non-service"))
        return None
    try:
        return parse_latency(f.value)
    except ValueError as e:
        at = f
        if isinstance(f.value, dict) and (str(e) == BAD_SAMPLING or "latency sample" in str(e)):
            at = next((x for x in f.entries() if x.name == "sampling"), f)
        elif isinstance(f.value, dict) and "latency subject to be" in str(e):
            at = next((x for x in f.entries() if x.name == "subject"), f)
        errors.append(at.error(str(e)))
        return None


def _check_latency_subjects(latencies: list, exports: list, wired: Field) -> list[ConfigError]:
    """Where latency results may be published (nats-server's TrackServiceExportWithSampling): a literal
    subject outside the account's exported services, for a singleton service."""
    from rillet.subjects.validate import is_valid_literal_subject, subject_is_subset_match
    errors: list[ConfigError] = []
    for item, subject, lat, rt in latencies:
        err = ""
        if not is_valid_literal_subject(lat.subject) or any(
                k == "service" and isinstance(s, str) and subject_is_subset_match(lat.subject, s)
                for k, s, _a in exports):
            err = "invalid publish subject"
        elif str(rt).lower() not in ("singleton", "single"):
            err = "bad service response type"
        if err:
            errors.append(wired.error(f"Error adding service latency sampling for {_q(subject)} on subject "
                                     f"{_q(lat.subject)}: {err}"))
    return errors


def _check_import(item: Field, acc: str, names: set, exports: dict, wired: Field) -> ConfigError | None:
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
        return wired.error(f"{_q(an)} account not defined for {kind} import")
    from rillet.subjects.validate import is_valid_subject, subject_has_wildcard, subject_is_subset_match
    ok = is_valid_subject(subject) and any(k == kind and e_subj and subject_is_subset_match(subject, e_subj) and (accs is None or acc in accs)
             for k, e_subj, accs in exports.get(an, []))
    head = f"Error adding {kind} import {_q(subject)}: "
    if not ok:
        return wired.error(head + f"{kind} import not authorized")
    from rillet.subjects.mapping import SubjectTransform
    if kind == "stream":
        if prefix:
            p = str(prefix)
            if any(t in ("*", ">") for t in p.split(".")):
                return wired.error(head + "stream import prefix can not contain wildcard tokens")
        elif to and to != subject:
            try:
                SubjectTransform(subject, str(to))
            except ValueError as e:
                return wired.error(head + f"failed to create mapping transform for stream import subject from "
                                         f"{_q(subject)} to {_q(to)}: {e}")
    elif to and to != subject and subject_has_wildcard(str(subject)):
        # a service import with wildcards and its own local subject needs a reversible transform
        try:
            check_import_transform(str(subject), import_transform_tokenize(str(to)))
        except ValueError as e:
            return wired.error(head + f"failed to create mapping transform for service import subject from "
                                     f"{_q(to)} to {_q(subject)}: {e}")
    return None


def import_transform_tokenize(subject: str) -> str:
    """Each ``*`` of an import's local subject becomes ``$1``, ``$2``... (in order)."""
    out: list[str] = []
    n = 0
    for t in subject.split("."):
        if t == "*":
            n += 1
            out.append(f"${n}")
        else:
            out.append(t)
    return ".".join(out)


def check_import_transform(src: str, dest: str) -> None:
    """The reversible transform a service import with wildcards needs (nats-server's strict transforms: only
    wildcard placeholders, every source wildcard used). ValueError with nats-server's text otherwise."""
    from rillet.subjects import mapping as m
    from rillet.subjects.destination import _MAP_DEST_ERR
    m.SubjectTransform(src, dest)
    npwc = sum(1 for t in src.split(".") if t == "*")
    used = 0
    for t in dest.split("."):
        kind, idx, _i, _s = m._placeholder(t)
        if kind == m._NONE:
            continue
        if kind != m._WILDCARD:
            raise ValueError(f"{_MAP_DEST_ERR}: the only mapping function allowed for import transforms is "
                             f"{{{{Wildcard()}}}} in {t}")
        used += len(idx)
    if used < npwc:
        raise ValueError(f"{_MAP_DEST_ERR}: not using all of the token wildcard(s) in {dest}")



# ---- authorization { auth_callout {} } ------------------------------------------------------------------------

class _Unplaced(ConfigError):
    """An error nats-server reports without a file position."""

    def _format(self) -> str:
        return self.reason


def check_auth_callout(f: Field) -> list[ConfigError]:
    """The ``auth_callout`` block, checked when the file is loaded (as nats-server's parse does)."""
    from .callout import CalloutConfigError, parse_auth_callout
    try:
        parse_auth_callout(f.value)
    except CalloutConfigError as e:
        at = f
        try:
            entries = list(f.entries())
        except ConfigError:
            entries = []
        if entries:  # (the entry at fault; for a missing one nats-server points into the block)
            at = next((x for x in entries if x.key == e.key), entries[0])
        return [at.error(str(e))]
    except ValueError as e:
        return [f.error(str(e))]
    return []


def check_auth_callout_accounts(o: Any) -> list[ConfigError]:
    """After the whole file: every callout ``allowed_accounts`` entry must be a configured account."""
    raw = o.extra.get("auth_callout") if isinstance(o.extra, dict) else None
    if not isinstance(raw, dict):
        return []
    allowed = next((v for k, v in raw.items() if k.lower() == "allowed_accounts"), None)
    if not isinstance(allowed, list):
        return []
    known = set(o.accounts or {})
    return [_Unplaced("", 0, 0, f"auth_callout allowed account {_q(a)} not found in configured accounts")
            for a in allowed if str(a) not in known]


def check_latency_system_account(f: Field) -> list[ConfigError]:
    """Latency tracking publishes through the system account: none (``no_system_account``) refuses it, at the
    ``accounts`` block as nats-server reports it."""
    errors: list[ConfigError] = []
    for acc in f.entries():
        if not isinstance(acc.value, dict):
            continue
        for e in acc.value.get("exports") or []:
            if isinstance(e, dict) and "latency" in e and "service" in e:
                errors.append(f.error(f"Error adding service latency sampling for {_q(e['service'])}: "
                                      "system account not setup"))
    return errors
