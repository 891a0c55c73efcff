"""The ``exports`` and ``imports`` of an account as /accountz shows them (nats-server's ExtExport and
ExtImport): the configured ones, and the system account's exports and the system imports every other
account has (see ``rillet.server.sysservices``)."""
from __future__ import annotations

from typing import Any

_RT = {"singleton": "Singleton", "single": "Singleton", "stream": "Streamed", "chunked": "Chunked"}
SYS_EXPORTS = [("$SYS.REQ.ACCOUNT.*.CONNZ", "Streamed"), ("$SYS.REQ.ACCOUNT.*.STATZ", "Streamed"),
               ("$SYS.DEBUG.SUBSCRIBERS", "Singleton"), ("$SYS.REQ.USER.*.INFO", "Singleton")]


def _import(subject: str, account: str, local: str, kind: str, to: str | None = None, share: bool = False,
            tracking: bool = False) -> dict:
    d: dict[str, Any] = {"subject": subject, "account": account}
    if to is not None:
        d["to"] = to
    d.update({"local_subject": local, "type": kind, "invalid": False, "share": share, "tracking": tracking})
    return d


def system_imports(acc_name: str, sys_name: str) -> list[dict]:
    if acc_name == sys_name:
        return [_import(f"$SYS.REQ.USER.{acc_name}.INFO", sys_name, "$SYS.REQ.USER.INFO", "service",
                        "$SYS.REQ.USER.INFO", share=True)]
    connz = f"$SYS.REQ.ACCOUNT.{acc_name}.CONNZ"
    return [
        _import(connz, sys_name, "$SYS.REQ.ACCOUNT.PING.CONNZ", "service", "$SYS.REQ.ACCOUNT.PING.CONNZ"),
        _import(connz, sys_name, "$SYS.REQ.SERVER.PING.CONNZ", "service", "$SYS.REQ.SERVER.PING.CONNZ"),
        _import(f"$SYS.REQ.ACCOUNT.{acc_name}.STATZ", sys_name, "$SYS.REQ.ACCOUNT.PING.STATZ", "service",
                "$SYS.REQ.ACCOUNT.PING.STATZ"),
        _import(f"$SYS.REQ.USER.{acc_name}.INFO", sys_name, "$SYS.REQ.USER.INFO", "service",
                "$SYS.REQ.USER.INFO", share=True),
    ]


def exports_imports(server: Any, acc: Any, sys_name: str) -> tuple[list[dict], list[dict]]:
    exports: list[dict] = []
    imports: list[dict] = []
    cfg = (server.opts.accounts or {}).get(acc.name)
    if isinstance(cfg, dict):
        for e in cfg.get("exports") or []:
            if not isinstance(e, dict):
                continue
            kind = "stream" if "stream" in e else "service" if "service" in e else None
            if kind is None:
                continue
            d: dict[str, Any] = {"subject": e[kind], "type": kind}
            if kind == "service":
                rt = str(e.get("response_type", e.get("response", "singleton"))).lower()
                d["response_type"] = _RT.get(rt, "Singleton")
            if e.get("accounts"):
                d["approved_accounts"] = list(e["accounts"])
            exports.append(d)
        for i in cfg.get("imports") or []:
            if not isinstance(i, dict):
                continue
            kind = "stream" if "stream" in i else "service" if "service" in i else None
            src = i.get(kind) if kind else None
            if not isinstance(src, dict):
                continue
            subj, an = src.get("subject", ""), src.get("account", "")
            if kind == "stream":
                prefix = i.get("prefix")
                local = f"{str(prefix).rstrip('.')}.{subj}" if prefix else (i.get("to") or subj)
                imports.append(_import(subj, an, local, "stream", share=bool(i.get("share"))))
            else:
                local = i.get("to") or subj
                imports.append(_import(subj, an, local, "service", local, share=bool(i.get("share"))))
    if sys_name:
        if acc.name == sys_name:
            exports.extend({"subject": s, "type": "service", "response_type": rt} for s, rt in SYS_EXPORTS)
        imports.extend(system_imports(acc.name, sys_name))
    return exports, imports
