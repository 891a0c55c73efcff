"""``/superz`` and ``rillet health``: one health view of a whole super-cluster (Rillet-specific).

nats-server has no such endpoint; ``nats server report`` builds similar tables on the client side. The
view is built from what every server (Rillet or Go) already answers in the system account, gathered from
all servers of all clusters (the requests cross routes and gateways)::

    $SYS.REQ.SERVER.PING.STATSZ  .VARZ  .GATEWAYZ  .JSZ ({"streams": true, "config": true})  .HEALTHZ

Three parts:

* ``aggregate(replies, ...)`` -- pure: the replies per kind in, the health JSON out (unit tested);
* ``Collector`` -- when a gather is complete (every server seen answered every kind, then a pause);
* ``Gatherer`` -- the server side: an internal client of the system account that sends the requests and
  keeps the servers it has seen (``REMEMBER`` seconds), so that one that stops answering is shown down.
  The CLI (``rillet.cli.health``) sends the same requests from a nats-py connection.

What is judged unhealthy (each one a line in ``problems``):

* a server expected but not answering (a meta group peer, or one this server saw in the last
  ``REMEMBER`` seconds), a server whose ``/healthz`` is not ok, or one that answered only some requests;
* a gateway from cluster X to cluster Y missing on some (``partial``) or all (``down``) answering servers
  of X; a cluster named in a gateway configuration or connection with no server answering;
* per meta group (one per JetStream cluster, or one over the clusters of a JetStream super-cluster, shown
  with each of its clusters): no meta leader, servers naming different leaders, the meta group without
  quorum (a peer is up when it answered the gather and the leader heard from it in the last
  ``PEER_ACTIVE`` seconds and does not mark it offline);
* a stream whose group has no leader (or whose named leader does not answer), or fewer replicas up than
  its quorum (counted as for the meta group on the leader's view; without a leader, the replicas that
  answered and hold the stream);
* a mirror or source with an error, lagging more than ``max_lag`` messages, or not heard from its origin
  for more than ``max_inactive`` (``active`` -1: never).

The JSON (``/superz`` adds ``server_id``, ``server_name``, ``now``; 200 when healthy, else 503)::

    {"healthy", "servers_up", "servers_down", "thresholds": {"max_lag", "max_inactive" (ns)},
     "problems": ["<cluster>: <what>", ...],
     "clusters": {"<name>": {
         "healthy", "servers_up", "servers_down", "problems",
         "servers": [{"name", "id", "up", "version", "jetstream", "connections", "healthz", ...},
                     {"name", "up": false, "known_from": "meta" | "seen", "last_seen"}],
         "gateways": {"<other cluster>": {"state": "up" | "partial" | "down", "outbound", "servers",
                                          "inbound", "missing_on"}},
         "meta": {"leader", "agreed", "cluster_size", "quorum_needed", "peers_up", "peers_down",
                  "has_quorum", "clusters"}, "meta_problems",
         "streams": {"total", "unhealthy": [{"account", "stream", "cluster", "replicas", "leader",
                                             "replicas_up", "quorum_needed", "problems"}]},
         "sources": [{"account", "stream", "cluster", "kind": "mirror" | "source", "origin", "lag",
                      "active" (ns, -1 never), "external_api", "error", "problems"}]}},
     "servers_not_placed": [...]}   (meta group peers not answering, of unknown cluster)

Not seen: a stream none of whose replicas answers (an R1 stream on a server that is down) is not listed
(no server answers for it; the meta leader's assignments are not in ``/jsz``).
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from rillet.gocompat.gotime import format_duration, format_time

KINDS = ("STATSZ", "VARZ", "GATEWAYZ", "JSZ", "HEALTHZ")
REQUEST_BODIES = {"JSZ": {"streams": True, "config": True}}
PING = "$SYS.REQ.SERVER.PING."

DEFAULT_TIMEOUT = 1.0  # seconds a gather waits at most
QUIET = 0.3  # once every server seen answered everything, stop after this long without a new reply
SHORT_QUIET = 0.05  # the same once every server expected (seen in earlier gathers) answered
REMEMBER = 15 * 60.0  # a server seen this recently and not answering now is shown down
PEER_ACTIVE = 5.0  # a group peer heard from by its leader this recently (and not offline) counts as up
DEFAULT_MAX_LAG = 1000  # messages
DEFAULT_MAX_INACTIVE = 30.0  # seconds


@dataclass
class Thresholds:
    max_lag: int = DEFAULT_MAX_LAG
    max_inactive_ns: int = int(DEFAULT_MAX_INACTIVE * 1e9)
    peer_active_ns: int = int(PEER_ACTIVE * 1e9)

    def to_json(self) -> dict:
        return {"max_lag": self.max_lag, "max_inactive": self.max_inactive_ns}


# ---------------------------------------------------------------------------------------------------
# The pure part


def _data(kind: str, resp: Mapping) -> Any:
    if kind == "STATSZ" and "statsz" in resp:
        return resp.get("statsz")
    return resp.get("data")


def group_by_server(replies: Mapping[str, Iterable[Mapping]]) -> dict[str, dict]:
    """{server name: {"info": ServerInfo, "KIND": data, "errors": {KIND: description}}} of the replies
    (``replies``: per kind, the ``$SYS`` responses as decoded JSON)."""
    out: dict[str, dict] = {}
    for kind, resps in replies.items():
        for resp in resps:
            if not isinstance(resp, Mapping):
                continue
            info = resp.get("server")
            if not isinstance(info, Mapping) or not info.get("name"):
                continue
            rec = out.setdefault(str(info["name"]), {"info": dict(info), "errors": {}})
            if resp.get("error"):
                err = resp["error"]
                rec["errors"][kind] = err.get("description", str(err)) if isinstance(err, Mapping) else str(err)
                continue
            d = _data(kind, resp)
            if isinstance(d, Mapping):
                rec[kind] = d
    return out


def _cluster_of(rec: dict) -> str:
    c = rec["info"].get("cluster") or ""
    if not c:
        gz = rec.get("GATEWAYZ") or {}
        c = gz.get("name") or ""
    return str(c)


def _gateway_names(rec: dict) -> set[str]:
    """Every cluster a server names in its gateway configuration or connections (its own too)."""
    names: set[str] = set()
    gz = rec.get("GATEWAYZ") or {}
    if gz.get("name"):
        names.add(str(gz["name"]))
    names.update(str(k) for k in (gz.get("outbound_gateways") or {}))
    names.update(str(k) for k in (gz.get("inbound_gateways") or {}))
    vg = (rec.get("VARZ") or {}).get("gateway") or {}
    if vg.get("name"):
        names.add(str(vg["name"]))
    for g in vg.get("gateways") or ():
        if isinstance(g, Mapping) and g.get("name"):
            names.add(str(g["name"]))
    return names


def _has_gateway(rec: dict) -> bool:
    gz = rec.get("GATEWAYZ") or {}
    return bool(gz.get("name"))


def _dur(ns: int) -> str:
    return format_duration(int(ns)) if ns >= 0 else "never"


def _peer_up(p: Mapping, answering: set[str], th: Thresholds) -> bool:
    """A group peer (as its leader lists it) is up when it answered the gather and the leader heard
    from it recently and does not mark it offline: both sides agree it is there."""
    if p.get("name") not in answering or p.get("offline"):
        return False
    active = p.get("active", -1)
    return isinstance(active, int) and 0 <= active <= th.peer_active_ns


def _meta(views: list[tuple[str, Mapping]], answering: set[str], th: Thresholds) -> tuple[dict, list[str], list[str]]:
    """One meta group as its answering servers see it: (summary, problems, peers not answering)."""
    problems: list[str] = []
    claims = Counter(str(v.get("leader") or "") for _n, v in views)
    named = [(c, n) for c, n in claims.most_common() if c]
    leader = named[0][0] if named else ""
    agreed = len(claims) == 1 and bool(leader)
    lview = next((v for n, v in views if n == leader), None)
    ref = lview if lview is not None else max((v for _n, v in views), key=lambda v: v.get("cluster_size", 0))
    size = int(ref.get("cluster_size") or 0)
    quorum = int(ref.get("quorum_needed") or (size // 2 + 1 if size else 0))
    peers: dict[str, Mapping] = {}
    if lview is not None:
        peers = {str(p.get("name")): p for p in lview.get("replicas") or () if p.get("name")}
        peers.setdefault(leader, {"name": leader})
    else:
        for n, v in views:
            peers.setdefault(n, {"name": n})
            for p in v.get("replicas") or ():
                if p.get("name") and p["name"] not in answering:
                    peers.setdefault(str(p["name"]), {"name": p["name"], "offline": True})
    up = sorted(n for n, p in peers.items() if (n == leader and lview is not None) or
                (_peer_up(p, answering, th) if lview is not None else n in answering))
    down = sorted(n for n in peers if n not in up)
    has_quorum = bool(leader) and lview is not None and len(up) >= quorum
    if not leader:
        problems.append("no meta leader")
    elif not agreed:
        problems.append("servers disagree on the meta leader: " + ", ".join(
            f"{n} says {v.get('leader') or 'none'}" for n, v in sorted(views, key=lambda x: x[0])))
    if leader and lview is None:
        problems.append(f"meta leader {leader} does not answer")
    elif leader and not has_quorum:
        problems.append(f"meta group has lost quorum: {len(up)} of {size} peers up, {quorum} needed")
    summary = {"leader": leader, "agreed": agreed, "cluster_size": size, "quorum_needed": quorum,
               "peers_up": len(up), "peers_down": down, "has_quorum": has_quorum}
    return summary, problems, [n for n in down if n not in answering]


def _meta_components(recs: dict[str, dict]) -> list[list[str]]:
    """The answering servers with a meta group view, grouped by meta group: servers that name each other
    (as leader or replica) are in the same group."""
    with_meta = {n: r["JSZ"]["meta_cluster"] for n, r in recs.items()
                 if isinstance((r.get("JSZ") or {}).get("meta_cluster"), Mapping)}
    parent = {n: n for n in with_meta}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for n, m in with_meta.items():
        names = [str(p.get("name")) for p in m.get("replicas") or () if isinstance(p, Mapping)]
        if m.get("leader"):
            names.append(str(m["leader"]))
        for o in names:
            if o in parent:
                parent[find(o)] = find(n)
    comps: dict[str, list[str]] = {}
    for n in sorted(with_meta):
        comps.setdefault(find(n), []).append(n)
    return sorted(comps.values())


def _stream_entries(recs: dict[str, dict]) -> dict[tuple[str, str, str], list[tuple[str, dict]]]:
    out: dict[tuple[str, str, str], list[tuple[str, dict]]] = {}
    for name, rec in recs.items():
        for ad in (rec.get("JSZ") or {}).get("account_details") or ():
            acc = str(ad.get("name") or ad.get("id") or "")
            for sd in ad.get("stream_detail") or ():
                if not isinstance(sd, Mapping) or not sd.get("name"):
                    continue
                cl = (sd.get("cluster") or {}).get("name") or _cluster_of(rec)
                out.setdefault((acc, str(sd["name"]), str(cl)), []).append((name, dict(sd)))
    return out


def _stream(key: tuple[str, str, str], reports: list[tuple[str, dict]], answering: set[str],
            th: Thresholds) -> tuple[dict, list[dict]]:
    """One stream's health (the entry and its mirror/sources) from the replicas that reported it."""
    acc, name, cl = key
    reporters = {n for n, _sd in reports}
    cfg = next((sd.get("config") for _n, sd in reports if isinstance(sd.get("config"), Mapping)), None)
    leader_sd = next((sd for n, sd in reports if (sd.get("cluster") or {}).get("leader") == n), None)
    claims = Counter((sd.get("cluster") or {}).get("leader") or "" for _n, sd in reports)
    named = [c for c, _k in claims.most_common() if c]
    if leader_sd is not None:
        leader = str(leader_sd["cluster"]["leader"])
        reps = [p for p in leader_sd["cluster"].get("replicas") or () if isinstance(p, Mapping)]
        r = int((cfg or {}).get("num_replicas") or len(reps) + 1)
        up = 1 + sum(1 for p in reps if _peer_up(p, reporters & answering, th))
    else:
        leader = ""
        r = int((cfg or {}).get("num_replicas") or len(reporters))
        up = len(reporters)
    quorum = r // 2 + 1
    problems: list[str] = []
    if leader_sd is None:
        if named:
            problems.append(f"leader {named[0]} does not answer")
        else:
            problems.append("no leader")
    if up < quorum:
        problems.append(f"lost quorum: {up} of {r} replicas up, {quorum} needed")
    entry = {"account": acc, "stream": name, "cluster": cl, "replicas": r, "leader": leader,
             "replicas_up": up, "quorum_needed": quorum, "problems": problems}
    sources: list[dict] = []
    src_sd = leader_sd if leader_sd is not None else next(
        (sd for _n, sd in reports if sd.get("mirror") or sd.get("sources")), None)
    if src_sd is not None:
        items = ([("mirror", src_sd["mirror"])] if isinstance(src_sd.get("mirror"), Mapping) else []) + \
                [("source", s) for s in src_sd.get("sources") or () if isinstance(s, Mapping)]
        for kind, s in items:
            lag = int(s.get("lag") or 0)
            active = s.get("active", -1)
            active = int(active) if isinstance(active, (int, float)) else -1
            sp: list[str] = []
            err = s.get("error")
            if err:
                sp.append("error: " + (str(err.get("description") or err) if isinstance(err, Mapping) else str(err)))
            if lag > th.max_lag:
                sp.append(f"lagging {lag} messages (more than {th.max_lag})")
            if active < 0:
                sp.append("never active")
            elif active > th.max_inactive_ns:
                sp.append(f"inactive for {format_duration(active)}")
            d = {"account": acc, "stream": name, "cluster": cl, "kind": kind, "origin": str(s.get("name") or ""),
                 "lag": lag, "active": active}
            ext = s.get("external")
            if isinstance(ext, Mapping) and ext.get("api"):
                d["external_api"] = ext["api"]
            if err:
                d["error"] = err
            d["problems"] = sp
            sources.append(d)
    return entry, sources


def aggregate(replies: Mapping[str, Iterable[Mapping]], *, thresholds: Thresholds | None = None,
              known: Mapping[str, Mapping] | None = None) -> dict:
    """The health view of a super-cluster from the ``$SYS`` replies (per kind: the decoded responses of
    ``$SYS.REQ.SERVER.PING.<KIND>``). ``known``: servers seen before ({name: {"cluster", "id",
    "last_seen"}}); those not answering now are shown down. Pure: no I/O, no clock."""
    th = thresholds or Thresholds()
    recs = group_by_server(replies)
    answering = set(recs)
    clusters: dict[str, dict] = {}
    by_cluster: dict[str, list[str]] = {}
    for name in sorted(recs):
        by_cluster.setdefault(_cluster_of(recs[name]), []).append(name)
    all_gw: set[str] = set()
    for rec in recs.values():
        all_gw |= _gateway_names(rec)
    unplaced: list[dict] = []
    missing: dict[str, list[dict]] = {}  # cluster -> servers expected but not answering
    for n, k in sorted((known or {}).items()):
        if n in answering:
            continue
        c = str(k.get("cluster") or "")
        d = {"name": n, "up": False, "known_from": "seen", "last_seen": k.get("last_seen", "")}
        if k.get("id"):
            d["id"] = k["id"]
        missing.setdefault(c, []).append(d)
    for c in sorted(all_gw | set(missing)):
        by_cluster.setdefault(c, [])

    # JetStream: each meta group (one per cluster, or one over the clusters of a JetStream super-cluster)
    groups = []  # (label, clusters, summary, problems)
    for comp in _meta_components(recs):
        views = [(n, recs[n]["JSZ"]["meta_cluster"]) for n in comp]
        summary, probs, absent = _meta(views, answering, th)
        cls = sorted({_cluster_of(recs[n]) for n in comp})
        summary["clusters"] = cls
        for n in absent:
            place = (known or {}).get(n, {}).get("cluster")
            if place is None and len(cls) == 1:
                place = cls[0]  # (the peers of a group within one cluster are in that cluster)
            if place is None:
                unplaced.append({"name": n, "up": False, "known_from": "meta"})
                probs.insert(0, f"server {n} is not answering (a meta group peer)")
                continue
            by_cluster.setdefault(str(place), [])
            lst = missing.setdefault(str(place), [])
            if not any(d["name"] == n for d in lst):
                lst.append({"name": n, "up": False, "known_from": "meta"})
        groups.append((", ".join(c or "(no cluster)" for c in cls), cls, summary, probs))
    streams: dict[str, list[dict]] = {}
    sources: dict[str, list[dict]] = {}
    for key, reports in sorted(_stream_entries(recs).items()):
        entry, srcs = _stream(key, reports, answering, th)
        streams.setdefault(key[2], []).append(entry)
        sources.setdefault(key[2], []).extend(srcs)
        by_cluster.setdefault(key[2], [])

    problems: list[str] = []
    for c in sorted(by_cluster):
        names = by_cluster[c]
        cp: list[str] = []
        servers = []
        for n in names:
            rec = recs[n]
            info, st, hz = rec["info"], rec.get("STATSZ") or {}, rec.get("HEALTHZ")
            sd: dict[str, Any] = {"name": n, "id": info.get("id", ""), "up": True, "version": info.get("ver", ""),
                                  "jetstream": bool(info.get("jetstream"))}
            if isinstance(st.get("connections"), int):
                sd["connections"] = st["connections"]
            status = str(hz.get("status", "")) if isinstance(hz, Mapping) else ""
            sd["healthz"] = status or "unknown"
            if isinstance(hz, Mapping) and status != "ok":
                err = hz.get("error") or "; ".join(str(e.get("error", e)) for e in hz.get("errors") or ())
                sd["healthz_error"] = err
                cp.append(f"server {n} health check: {status}" + (f" ({err})" if err else ""))
            lacking = [k for k in KINDS if k not in rec and not (k == "JSZ" and not info.get("jetstream"))]
            if lacking:
                sd["missing_answers"] = lacking
                errs = "; ".join(f"{k}: {rec['errors'][k]}" for k in lacking if k in rec["errors"])
                cp.append(f"server {n} did not answer {', '.join(lacking)}" + (f" ({errs})" if errs else ""))
            servers.append(sd)
        for d in sorted(missing.get(c, []), key=lambda d: d["name"]):
            servers.append(d)
            why = "a meta group peer" if d["known_from"] == "meta" else f"seen {d.get('last_seen') or 'before'}"
            cp.append(f"server {d['name']} is not answering ({why})")
        if c and not names:
            cp.append("no server of this cluster answered")
        # gateways, as this cluster's answering servers see them
        gws: dict[str, dict] = {}
        with_gw = [n for n in names if _has_gateway(recs[n])]
        if with_gw:  # (a cluster none of whose servers answered has no view of its own)
            # (the clusters named in gateway configurations and connections, and those of servers seen
            # before: gone clusters whose gateways were implicit are named nowhere else)
            for other in sorted((all_gw | {k for k in missing if k}) - {c}):
                outs = [n for n in with_gw if other in ((recs[n].get("GATEWAYZ") or {}).get("outbound_gateways") or {})]
                inbound = sum(len(v) for n in with_gw
                              for k, v in ((recs[n].get("GATEWAYZ") or {}).get("inbound_gateways") or {}).items()
                              if k == other and isinstance(v, list))
                state = "up" if len(outs) == len(with_gw) else ("partial" if outs else "down")
                g = {"state": state, "outbound": len(outs), "servers": len(with_gw), "inbound": inbound}
                lacking_on = sorted(set(with_gw) - set(outs))
                if lacking_on and outs:
                    g["missing_on"] = lacking_on
                gws[other] = g
                if state == "down":
                    cp.append(f"gateway to {other} is down")
                elif state == "partial":
                    cp.append(f"gateway to {other} is down on {', '.join(lacking_on)}")
        cd: dict[str, Any] = {"healthy": True, "servers_up": len(names), "servers_down": len(missing.get(c, [])),
                              "servers": servers, "gateways": gws}
        group_probs: list[str] = []
        for label, cls, summary, probs in groups:
            if c in cls and "meta" not in cd:
                cd["meta"] = summary
                cd["meta_problems"] = probs  # (listed once in the top-level problems, under the group)
                if c == cls[0]:
                    group_probs = [f"{label}: {p}" for p in probs]
        sts = streams.get(c, [])
        bad = [s for s in sts if s["problems"]]
        cd["streams"] = {"total": len(sts), "unhealthy": bad}
        for s in bad:
            cp.extend(f"stream {s['account']} > {s['stream']}: {p}" for p in s["problems"])
        srcs = sources.get(c, [])
        cd["sources"] = srcs
        for s in srcs:
            cp.extend(f"{s['kind']} {s['origin']} of {s['account']} > {s['stream']}: {p}" for p in s["problems"])
        cd["problems"] = cp
        cd["healthy"] = not cp and not cd.get("meta_problems")
        clusters[c] = cd
        lead = [p for p in cp if p.startswith("server ")]  # (servers first, then the meta group, then the rest)
        problems.extend(f"{c or '(no cluster)'}: {p}" for p in lead)
        problems.extend(group_probs)
        problems.extend(f"{c or '(no cluster)'}: {p}" for p in cp if not p.startswith("server "))
    up = len(answering)
    down = sum(len(v) for v in missing.values()) + len(unplaced)
    out = {"healthy": not problems, "servers_up": up, "servers_down": down, "thresholds": th.to_json(),
           "problems": problems, "clusters": clusters}
    if unplaced:
        out["servers_not_placed"] = unplaced  # (meta group peers of unknown cluster, not answering)
    return out


# ---------------------------------------------------------------------------------------------------
# Text view (the CLI's output, and /superz?format=text)


def _rows(headers: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = [indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for r in rows:
        out.append(indent + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return out


def text_view(h: Mapping) -> str:
    """A compact, per-cluster text rendering of ``aggregate``'s result."""
    lines = [f"Super-cluster: {'healthy' if h['healthy'] else 'UNHEALTHY'}, "
             f"{h['servers_up']} servers up, {h['servers_down']} down"]
    for c, cd in h["clusters"].items():
        lines.append("")
        head = f"Cluster {c or '(none)'}: {'ok' if cd['healthy'] else 'UNHEALTHY'}, " \
               f"{cd['servers_up']} servers up, {cd['servers_down']} down"
        m = cd.get("meta")
        if m is not None:
            head += f"; meta leader {m['leader'] or 'NONE'} ({m['peers_up']}/{m['cluster_size']} up, " \
                    f"quorum {m['quorum_needed']}{'' if m['has_quorum'] else ' LOST'})"
        st = cd["streams"]
        if st["total"]:
            head += f"; streams {st['total']} ({len(st['unhealthy'])} unhealthy)"
        lines.append(head)
        lines += _rows(["Server", "State", "Health", "JS", "Conns", "Version"], [
            [s["name"], "up" if s["up"] else "DOWN", s.get("healthz", "-"), "yes" if s.get("jetstream") else "no",
             str(s.get("connections", "")), s.get("version", "")] for s in cd["servers"]])
        if cd["gateways"]:
            lines += _rows(["Gateway", "State", "Outbound", "Inbound", "Missing on"], [
                [n, g["state"], f"{g['outbound']}/{g['servers']}", str(g["inbound"]), ", ".join(g.get("missing_on", ()))]
                for n, g in cd["gateways"].items()])
        if st["unhealthy"]:
            lines += _rows(["Stream", "Replicas", "Up", "Leader", "Problem"], [
                [f"{s['account']} > {s['stream']}", str(s["replicas"]), str(s["replicas_up"]), s["leader"] or "-",
                 "; ".join(s["problems"])] for s in st["unhealthy"]])
        if cd["sources"]:
            lines += _rows(["Stream", "Kind", "Origin", "Lag", "Active", "Problem"], [
                [f"{s['account']} > {s['stream']}", s["kind"], s["origin"], str(s["lag"]), _dur(s["active"]),
                 "; ".join(s["problems"]) or "ok"] for s in cd["sources"]])
    if h["problems"]:
        lines.append("")
        lines.append("Problems:")
        lines += [f"  - {p}" for p in h["problems"]]
    return "\n".join(lines) + "\n"


def parse_duration(text: str, what: str) -> float:
    """Seconds of a Go-style duration (``1.5s``, ``500ms``, ``2m``, ``1h``) or a bare number of seconds."""
    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    units = (("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("ns", 1e-9), ("h", 3600.0), ("m", 60.0), ("s", 1.0))
    total, rest = 0.0, t
    while rest:
        i = 0
        while i < len(rest) and (rest[i].isdigit() or rest[i] == "."):
            i += 1
        if i == 0:
            raise ValueError(f"invalid {what} duration {text!r}")
        for u, mul in units:
            if rest[i:].startswith(u):
                try:
                    total += float(rest[:i]) * mul
                except ValueError:
                    raise ValueError(f"invalid {what} duration {text!r}") from None
                rest = rest[i + len(u):]
                break
        else:
            raise ValueError(f"invalid {what} duration {text!r}")
    if not t:
        raise ValueError(f"invalid {what} duration {text!r}")
    return total


# ---------------------------------------------------------------------------------------------------
# Gathering


class Collector:
    """The replies of one gather, and when it is complete: every server seen answered every kind it
    should (JSZ only from JetStream servers), and then ``QUIET`` seconds passed without a new reply
    (more servers may be far away), or ``SHORT_QUIET`` seconds when the ``expected`` servers (those seen
    in earlier gathers) all answered. ``wait`` never waits longer than its timeout."""

    def __init__(self, expected: Iterable[str] = ()) -> None:
        self.replies: dict[str, list[dict]] = {k: [] for k in KINDS}
        self.answered: dict[str, set[str]] = {}
        self.js: dict[str, bool] = {}
        self.expected = set(expected)
        self.bad = 0  # replies that were not JSON objects
        self.event = asyncio.Event()
        self.last = time.monotonic()
        self.finished = False  # set (then ``event``) to end ``wait`` early, e.g. on no-responders answers

    def add(self, kind: str, body: bytes) -> None:
        if kind not in self.replies:
            return
        try:
            resp = json.loads(body)
        except ValueError:
            self.bad += 1
            return
        if not isinstance(resp, dict):
            self.bad += 1
            return
        self.replies[kind].append(resp)
        info = resp.get("server") or {}
        name = str(info.get("name") or "")
        if name:
            self.answered.setdefault(name, set()).add(kind)
            self.js[name] = bool(info.get("jetstream"))
        self.last = time.monotonic()
        self.event.set()

    def complete(self) -> bool:
        if not self.answered:
            return False
        for name, kinds in self.answered.items():
            need = set(KINDS) if self.js.get(name) else set(KINDS) - {"JSZ"}
            if not need <= kinds:
                return False
        return True

    async def wait(self, timeout: float, quiet: float = QUIET) -> None:
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if now >= deadline or self.finished:
                return
            if self.complete():
                # every server seen before answered: a shorter pause is enough (a new one may still come)
                q = SHORT_QUIET if self.expected and self.expected <= set(self.answered) else quiet
                left = min(deadline - now, self.last + q - now)
                if left <= 0:
                    return
            else:
                left = deadline - now
            self.event.clear()
            try:
                await asyncio.wait_for(self.event.wait(), left)
            except asyncio.TimeoutError:
                pass


class NoSystemAccount(Exception):
    pass


class Gatherer:
    """Sends the requests from the server's system account and remembers the servers it has seen."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.ic: Any = None
        self.inbox = ""
        self.pending: dict[str, Collector] = {}
        self.seq = 0
        self.seen: dict[str, dict] = {}  # name -> {"cluster", "id", "t": unix seconds}
        self.bad_replies = 0

    def _start(self) -> None:
        sa = getattr(self.server, "system_account", None)
        if sa is None:
            raise NoSystemAccount("no system account: the health view is gathered over $SYS")
        self.ic = self.server.internal_client(sa, "superz")
        self.inbox = f"$SYS._INBOX.{os.urandom(6).hex()}."
        self.ic.subscribe(self.inbox + "*", self._on_reply)

    def _on_reply(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        token = subject.decode(errors="replace").rsplit(".", 1)[-1]
        gid, _, kind = token.partition("-")
        col = self.pending.get(gid)
        if col is None:
            return  # a late answer to a finished gather
        col.add(kind, bytes(msg[hdr:]) if hdr > 0 else bytes(msg))

    async def gather(self, timeout: float = DEFAULT_TIMEOUT) -> Collector:
        if self.ic is None:
            self._start()
        now = time.time()
        for n in [n for n, k in self.seen.items() if now - k["t"] > REMEMBER]:
            del self.seen[n]
        self.seq += 1
        gid = str(self.seq)
        col = Collector(expected=self.seen)
        self.pending[gid] = col
        try:
            for kind in KINDS:
                body = json.dumps(REQUEST_BODIES[kind]).encode() if kind in REQUEST_BODIES else b""
                self.ic.publish((PING + kind).encode(), f"{self.inbox}{gid}-{kind}".encode(), body)
            await col.wait(timeout)
        finally:
            self.pending.pop(gid, None)
        if col.bad:
            self.bad_replies += col.bad
            self.server.log.warn(f"superz: {col.bad} replies that were not JSON objects were ignored")
        return col

    def known(self, answered: Iterable[str]) -> dict[str, dict]:
        """The servers seen before that did not answer this time ({name: cluster, id, last_seen})."""
        got = set(answered)
        return {n: {"cluster": k["cluster"], "id": k["id"], "last_seen": format_time(int(k["t"] * 1e9))}
                for n, k in self.seen.items() if n not in got}

    def remember(self, replies: Mapping[str, Iterable[Mapping]]) -> None:
        now = time.time()
        for name, rec in group_by_server(replies).items():
            self.seen[name] = {"cluster": _cluster_of(rec), "id": rec["info"].get("id", ""), "t": now}

    async def health(self, timeout: float = DEFAULT_TIMEOUT, thresholds: Thresholds | None = None) -> dict:
        col = await self.gather(timeout)
        known = self.known(col.answered)
        self.remember(col.replies)
        return aggregate(col.replies, thresholds=thresholds, known=known)


def gatherer(server: Any) -> Gatherer:
    g = getattr(server, "superz_gatherer", None)
    if g is None:
        g = Gatherer(server)
        server.superz_gatherer = g
    return g


MAX_TIMEOUT = 10.0


def query_options(q: Mapping[str, str]) -> tuple[float, Thresholds, bool]:
    """(timeout, thresholds, text) from /superz's query: ``timeout`` (default 1s, at most 10s),
    ``max_lag`` (messages), ``max_inactive`` (a duration), ``format=text``."""
    from rillet.gocompat.monitorfmt import QueryError
    try:
        timeout = parse_duration(q["timeout"], "timeout") if q.get("timeout") else DEFAULT_TIMEOUT
        inactive = parse_duration(q["max_inactive"], "max_inactive") if q.get("max_inactive") else DEFAULT_MAX_INACTIVE
    except ValueError as e:
        raise QueryError(str(e)) from None
    if not 0 < timeout <= MAX_TIMEOUT:
        raise QueryError(f"timeout must be more than 0 and at most {MAX_TIMEOUT:g}s")
    max_lag = DEFAULT_MAX_LAG
    if q.get("max_lag"):
        try:
            max_lag = int(q["max_lag"])
        except ValueError:
            raise QueryError(f"invalid max_lag {q['max_lag']!r}: a number of messages") from None
    fmt = q.get("format", "json")
    if fmt not in ("json", "text"):
        raise QueryError(f"invalid format {fmt!r}: json or text")
    return timeout, Thresholds(max_lag=max_lag, max_inactive_ns=int(inactive * 1e9)), fmt == "text"
