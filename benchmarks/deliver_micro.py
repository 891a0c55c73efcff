"""A fixed in-process delivery workload, for instruction counts (``valgrind --tool=callgrind``) or CPU time.

No sockets and no event loop: a server object, clients whose output buffers are emptied now and then, and
(for the routed cases) fake routes that count what they are given; the gateway cases (``gw_*``) run on a server
with a ``gateway {}`` block and one fake outbound gateway connection (interest-only mode, as nats-server 2.15
makes every account: ``gw_out`` a subject only the remote cluster wants, ``gw_local`` one subscriber here
and the remote's interest, ``gw_one`` one subscriber here and none there); ``route_reply`` is a reply across a route
(a PubAck or a response: each message to a new ``_INBOX.<x>.<n>`` subject whose only interest is the route's
``_INBOX.<x>.*``, so a sublist cache miss and a new result each time). Each case publishes ``N`` messages through
the path a client's PUB (or a route's RMSG) takes into delivery. Run one case::

    python -m benchmarks.deliver_micro CASE N          # CPU µs per message
    python -m benchmarks.deliver_micro --callgrind [N1 N2]   # instructions per message, every case

``--callgrind`` runs each case twice under callgrind (N1 and N2 messages) and reports the difference per
message, so start-up costs cancel out.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

CASES = ("one", "fanout5", "queue5", "hpub_one", "route_plain", "route_queue", "routed_in", "route_reply", "gw_out",
         "gw_local", "gw_one", "gw_hpub")


class FakeRoute:
    """A route as delivery sees it: counts the messages it is asked to send."""

    def __init__(self, kind: int) -> None:
        self.kind = kind
        self.closed = False
        self.spoke = False
        self.remote_cluster = ""
        self.sent = 0
        self.cid = 0
        self.remote_name = "fake"
        self.echo = True
        self.no_responders = False
        self.headers = True
        self.perms = None

    def send_msg(self, account: bytes, subject: bytes, reply, queues, hdr: int, msg: bytes) -> None:
        self.sent += 1


def fake_gateway(srv, acc, subject: str | None):
    """An outbound gateway connection of ``srv``, registered, that counts what it is asked to send; the remote
    cluster announced interest in ``subject`` of ``acc`` (interest-only mode)."""
    from rillet.cluster.gateway_conn import INTEREST_ONLY, GatewayConn, OutAccount
    from rillet.server.delivery import RemoteSub

    class FakeGateway(GatewayConn):
        sent = 0

        def send_msg(self, account, subject, reply, queues, hdr, msg) -> None:
            self.sent += 1

    gw = srv.gateway
    cfg = next(iter(gw.remotes.values()))
    gc = FakeGateway(gw, cfg)
    gc.iom = True
    e = OutAccount(ni=False)
    e.mode = INTEREST_ONLY
    if subject is not None:
        rs = RemoteSub(gc, subject, None, 1, None)
        e.sl.insert(rs)
        e.subs[(subject, None)] = rs
    gc.outsim[acc.name_b] = e
    gw.out[cfg.name] = gc
    gw.outo.append(gc)
    return gc


def main_case(case: str, n: int) -> float:
    from rillet.config.options import Options
    from rillet.server.client import Client, Subscription
    try:
        from rillet.app.compose import build_server as Server  # (links need the composition root)
    except ImportError:
        from rillet.server.server import Server

    o = Options()
    routed = case.startswith("route")
    if routed:
        o.cluster.port = 1
        o.cluster.name = "bench"
    gwc = case.startswith("gw_")
    if gwc:
        from rillet.config.gateway_section import GatewayOptions, RemoteGateway
        o.gateway_opts = GatewayOptions(name="A", host="127.0.0.1", port=1,
                                        gateways=[RemoteGateway(name="B", urls=["nats://127.0.0.1:2"])])
    srv = Server(o)
    acc = srv.global_account
    pub = Client(srv)
    pub.slow_path = False
    nsubs = {"fanout5": 5, "queue5": 5, "gw_out": 0, "route_reply": 0}.get(case, 1)
    q = "q" if case in ("queue5", "route_queue") else None
    clients = []
    for i in range(nsubs):
        c = Client(srv)
        c.headers = True
        sub = Subscription(c, "bench.x", q, str(i + 1).encode())
        c.subs[sub.sid] = sub
        acc.sublist.insert(sub)
        clients.append(c)
    route = None
    if routed:
        try:
            from rillet.server.delivery import RemoteSub
        except ImportError:
            from rillet.cluster.routed import RemoteSub  # (before the delivery module)
        route = FakeRoute(2)
        acc.sublist.insert(RemoteSub(route, "_INBOX.bench.*" if case == "route_reply" else "bench.x", q, 1, None))
    gwconn = fake_gateway(srv, acc, None if case == "gw_one" else "bench.x") if gwc else None
    subject = b"bench.x"
    payload = b"x" * 16
    pending = srv.pending_flush
    hdrs = b"NATS/1.0\r\nA: b\r\n\r\n"
    hmsg = hdrs + payload
    hl = len(hdrs)
    t0 = time.process_time()
    if case in ("hpub_one", "gw_hpub"):
        for i in range(n):
            pub.proto_hpub(subject, None, hl, hmsg)
            if not i & 1023:
                for c in clients:
                    c.out.clear()
                    c.flush_pending = False
                pending.clear()
    elif case == "route_reply":
        for i in range(n):
            pub.proto_pub(b"_INBOX.bench.%d" % i, None, payload)
            if not i & 1023:
                pending.clear()
    elif case == "routed_in":
        for i in range(n):
            acc.deliver_routed(route, subject, None, (), -1, payload)
            if not i & 1023:
                for c in clients:
                    c.out.clear()
                    c.flush_pending = False
                pending.clear()
    else:
        for i in range(n):
            pub.proto_pub(subject, None, payload)
            if not i & 1023:
                for c in clients:
                    c.out.clear()
                    c.flush_pending = False
                pending.clear()
    dt = time.process_time() - t0
    got = sum(c.out_msgs for c in clients) + (route.sent if route is not None else 0)
    if gwconn is not None:
        assert gwconn.sent == (0 if case == "gw_one" else n), (case, gwconn.sent, n)
        got += gwconn.sent
    assert got >= n, (case, got, n)  # every message reached someone (queue: one member or the route)
    return dt


def callgrind(case: str, n: int) -> int:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
                        "benchmarks.deliver_micro", case, str(n)], check=True, capture_output=True)
        with open(out) as f:
            for line in f:
                m = re.match(r"(?:summary|totals): (\d+)", line)
                if m:
                    return int(m.group(1))
    raise RuntimeError("no callgrind totals")


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--callgrind":
        n1, n2 = (int(args[1]), int(args[2])) if len(args) >= 3 else (2000, 22000)
        cases = args[3:] or CASES
        for case in cases:
            a = callgrind(case, n1)
            b = callgrind(case, n2)
            print(f"{case:12s} {(b - a) / (n2 - n1):10.0f} instructions/msg")
        return
    case, n = args[0], int(args[1])
    dt = main_case(case, n)
    print(f"{case} {dt / n * 1e6:.3f} us/msg")


if __name__ == "__main__":
    main()
