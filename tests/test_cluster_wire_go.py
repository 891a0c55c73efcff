"""The cluster protocol parser and encoders against a live Go nats-server (skipped only without the binary).

A test plays the other server: it dials the Go server's route or leaf node port (or, for a gateway, is dialled
by it), speaks with rillet.cluster.protocol's encoders and parses everything the Go server sends with
``ServerParser``. A plain client on the Go server makes the interest and the messages. This checks the wire
format both ways: what Go sends parses into the expected calls, and what we encode Go understands (its
clients receive our RMSG/LMSG; our RS-/A- stop its sends).
"""
from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from helpers import free_port
from rillet.cluster import info as ci
from rillet.cluster import protocol as cp
from rillet.cluster.protocol import GATEWAY, LEAF, ROUTE, ProtocolError, ServerParser

from test_cluster_protocol import Recorder
from lanes import LANES, use_lane


@pytest.fixture(autouse=True, scope="module", params=LANES)
def _lane_under_test(request):
    """Every test of this module in both lanes (rillet.lane): the pure-Python parser and its compiled twin."""
    with use_lane(request.param, globals()):
        yield request.param


pytestmark = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


@contextlib.contextmanager
def go_server(conf: str, wait_ports: list[int]):
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(conf)
    p = subprocess.Popen(["nats-server", "-c", f.name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        for port in wait_ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if p.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"nats-server did not start: {p.stderr.read().decode()[-2000:]}")
                    time.sleep(0.02)
        yield p
    finally:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Peer:
    """One server-to-server connection: a socket, our parser on what arrives, a log of the calls."""

    def __init__(self, sock: socket.socket, kind: str, **kw) -> None:
        self.sock = sock
        self.rec = Recorder()
        self.parser = ServerParser(self.rec, kind, **kw)
        self.closed = False
        self.raw = bytearray()

    @classmethod
    def dial(cls, port: int, kind: str, **kw) -> "Peer":
        return cls(socket.create_connection(("127.0.0.1", port), timeout=5), kind, **kw)

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def pump(self, until, timeout: float = 3.0) -> list[tuple]:
        """Read and parse until ``until(calls)`` is true (or the peer closes / time runs out)."""
        deadline = time.monotonic() + timeout
        while not until(self.rec.calls):
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                raise AssertionError(f"condition not met; calls so far: {self.rec.calls[-20:]}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not data:
                self.closed = True
                continue
            self.raw += data
            self.parser.feed(data)
        return self.rec.calls

    def quiet(self, seconds: float = 0.25) -> list[tuple]:
        """Whatever arrives within ``seconds``."""
        n = len(self.rec.calls)
        self.sock.settimeout(seconds)
        with contextlib.suppress(socket.timeout):
            while True:
                data = self.sock.recv(65536)
                if not data:
                    self.closed = True
                    break
                self.raw += data
                self.parser.feed(data)
        return self.rec.calls[n:]

    def close(self) -> None:
        self.sock.close()


class Client:
    """A bare NATS client on the Go server (bytes in, bytes out)."""

    def __init__(self, port: int, **connect) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self.read_until(b"\r\n")
        opts = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1, **connect}
        self.sock.sendall(b"CONNECT " + json.dumps(opts).encode() + b"\r\n")
        self.flush()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def flush(self) -> bytes:
        self.sock.sendall(b"PING\r\n")
        return self.read_until(b"PONG\r\n")

    def read_until(self, marker: bytes) -> bytes:
        deadline = time.monotonic() + 5
        while marker not in self.buf:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            data = self.sock.recv(65536)
            assert data, f"closed; got {self.buf!r}"
            self.buf += data
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def close(self) -> None:
        self.sock.close()


def our_info(**kw) -> ci.Info:
    base = dict(server_id=kw.pop("server_id", "NRILLETTEST"), server_name="rillet-test", version="2.15.1",
                proto=ci.SERVER_PROTO, go="python", host="127.0.0.1", port=kw.pop("port", 1), headers=True,
                max_payload=1048576)
    base.update(kw)
    return ci.Info(**base)


def _first(calls, op):
    return next(c for c in calls if c[0] == op)


# ==== routes ==================================================================================================

def route_conf(client_port: int, cluster_port: int, extra: str = "") -> str:
    return f"port: {client_port}\nserver_name: go1\ncluster {{ name: c1, listen: 127.0.0.1:{cluster_port} }}\n{extra}"


def route_handshake(cluster_port: int, server_id: str, **kw) -> tuple[Peer, ci.Info]:
    peer = Peer.dial(cluster_port, ROUTE)
    calls = peer.pump(lambda c: any(x[0] == "info" for x in c))
    info_arg = _first(calls, "info")[1]
    info = ci.decode_info(info_arg)
    peer.send(cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(
        echo=True, headers=True, name=server_id, cluster="c1", lnoc=True, lnocu=True))),
        cp.info_frame(ci.encode_info(our_info(server_id=server_id, cluster="c1", lnoc=True, lnocu=True, **kw))),
        cp.PING)
    peer.pump(lambda c: ("pong",) in c)
    return peer, info


def test_route_wire_both_ways():
    cport, rport = free_port(), free_port()
    with go_server(route_conf(cport, rport), [cport, rport]):
        peer, info = route_handshake(rport, "NROUTEPEER1")
        # the route INFO: nats-server's fields, and our model writes them back byte for byte
        raw_info = _first(peer.rec.calls, "info")[1]
        assert info.cluster == "c1" and info.lnoc and info.lnocu and info.port == rport and info.server_id
        assert info.route_pool_size >= 1 and info.compression and info.nonce
        assert ci.encode_info(info) == raw_info, "a field of nats-server's route INFO is not modelled"
        assert peer.raw.startswith(b"INFO {") and b"} \r\n" in peer.raw  # INFO ends with a blank before CRLF
        # the Go server's own ($SYS) interest arrives as RS+ with the account
        assert any(c[0] == "rs+" and c[1] == b"$SYS" for c in peer.rec.calls)

        cl = Client(cport)
        cl.send(b"SUB foo 1\r\nSUB bar q1 2\r\nSUB bar q1 3\r\n")
        cl.flush()
        calls = peer.pump(lambda c: ("rs+", b"$G", b"bar", b"q1", 2) in c)
        assert ("rs+", b"$G", b"foo", None, 0) in calls and ("rs+", b"$G", b"bar", b"q1", 1) in calls
        cl.send(b"UNSUB 1\r\nUNSUB 3\r\n")
        cl.flush()
        # foo withdrawn; the queue group's weight back down to 1 (a second RS+ with weight 1)
        peer.pump(lambda c: ("rs-", b"$G", b"foo", None) in c and c.count(("rs+", b"$G", b"bar", b"q1", 1)) == 2)

        # our interest (plain and queue with weight, and a leaf-origin one), then messages Go routes to us
        peer.send(cp.rs_sub(b"$G", b"baz"), cp.rs_sub(b"$G", b"baz", b"qq", 3), cp.ls_sub(b"west", b"$G", b"lf.x"),
                  cp.PING)
        peer.pump(lambda c: c.count(("pong",)) == 2)
        cl.send(b"PUB baz rep 2\r\nhi\r\nHPUB baz rep 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPUB lf.x 1\r\nx\r\n")
        cl.flush()
        calls = peer.pump(lambda c: any(x[0] == "rmsg" and x[2] == b"lf.x" for x in c))
        assert ("rmsg", b"$G", b"baz", b"rep", (b"qq",), b"hi") in calls
        assert ("hmsg", b"$G", b"baz", b"rep", (b"qq",), 12, b"NATS/1.0\r\n\r\nhi") in calls
        assert b"RMSG $G baz + rep qq 2\r\nhi\r\n" in peer.raw
        assert ("rmsg", b"$G", b"lf.x", None, (), b"x") in calls

        # messages we route in reach Go's client: plain, queue form with reply, headers (a routed message
        # without queue names reaches plain subscribers only)
        cl.send(b"SUB pl 7\r\nSUB qs q1 8\r\n")
        cl.flush()
        peer.pump(lambda c: ("rs+", b"$G", b"qs", b"q1", 1) in c)
        peer.send(cp.frame(cp.rmsg_head(b"$G", b"pl", None, (), 3), b"abc"),
                  cp.frame(cp.rmsg_head(b"$G", b"qs", None, (), 3), b"not"),
                  cp.frame(cp.rmsg_head(b"$G", b"qs", b"r1", [b"q1"], 3), b"def"),
                  cp.frame(cp.hmsg_head(b"$G", b"pl", b"r2", (), 12, 14), b"NATS/1.0\r\n\r\nhi"))
        got = cl.read_until(b"NATS/1.0\r\n\r\nhi\r\n")
        assert got == (b"MSG pl 7 3\r\nabc\r\nMSG qs 8 r1 3\r\ndef\r\n"
                       b"HMSG pl 7 r2 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
        # RS- from us: Go stops routing baz (the queue interest is still there, so use the plain one)
        peer.send(cp.rs_unsub(b"$G", b"baz", b"qq"), cp.rs_unsub(b"$G", b"baz"), cp.PING)
        peer.pump(lambda c: c.count(("pong",)) == 3)  # RS- reached Go
        cl.send(b"PUB baz 1\r\nx\r\nPUB lf.x 1\r\ny\r\n")
        cl.flush()
        calls = peer.pump(lambda c: ("rmsg", b"$G", b"lf.x", None, (), b"y") in c)
        assert ("rmsg", b"$G", b"baz", None, (), b"x") not in calls
        cl.close()
        peer.close()


@pytest.mark.parametrize("bad, go_err", [
    (b"XYZ\r\n", cp.UNKNOWN_OP),
    (b"RMSG $G foo 2\r\nhiX\r\n", cp.UNKNOWN_OP),
    (b"RMSG $G foo x\r\n", None),
    (b"RMSG $G foo ? r q 1\r\n", None),
    (b"HMSG $G foo 5 2\r\n", None),
    (b"RS+ $G\r\n", None),
    (b"RS- $G foo q x\r\n", None),
    (b"LMSG west $G foo 2\r\n", None),
    (b"RS+ $G " + b"a" * (4096 * 16 + 10) + b"\r\n", cp.MAX_CONTROL_LINE),
])
def test_route_errors_match_go(bad, go_err):
    """What Go answers to bad route input (an -ERR or a silent close) is what our parser's error says."""
    with pytest.raises(ProtocolError) as ei:
        ServerParser(Recorder(), ROUTE).feed(bad)
    assert ei.value.client_error == go_err
    cport, rport = free_port(), free_port()
    with go_server(route_conf(cport, rport), [cport, rport]):
        peer, _ = route_handshake(rport, "NROUTEBAD")
        n = len(peer.rec.calls)
        peer.send(bad)
        peer.pump(lambda c: False if not peer.closed else True, timeout=3)
        errs = [c[1] for c in peer.rec.calls[n:] if c[0] == "err"]
        assert errs == ([] if go_err is None else [f"'{go_err}'".encode()])
        peer.close()


def test_pinned_account_route_omits_the_account():
    cport, rport = free_port(), free_port()
    conf = route_conf(cport, rport, "accounts { A { users: [{user: a, password: a}] } }\n").replace(
        "cluster { name: c1,", "cluster { name: c1, accounts: [A],")
    with go_server(conf, [cport, rport]):
        peer = Peer.dial(rport, ROUTE)
        peer.pump(lambda c: any(x[0] == "info" for x in c))
        # a route dedicated to account A: our INFO names it; from then on no account on the wire
        peer.send(cp.connect_frame(ci.encode_route_connect(ci.RouteConnect(
            echo=True, headers=True, name="NPINNED", cluster="c1", lnoc=True, lnocu=True))),
            cp.info_frame(ci.encode_info(our_info(server_id="NPINNED", cluster="c1", lnoc=True, lnocu=True,
                                                  route_account="A", route_pool_size=3))), cp.PING)
        peer.parser.pin(b"A")
        peer.pump(lambda c: ("pong",) in c)
        cl = Client(cport, user="a", **{"pass": "a"})
        cl.send(b"SUB pin.> 9\r\n")
        cl.flush()
        peer.pump(lambda c: ("rs+", b"A", b"pin.>", None, 0) in c)
        assert b"RS+ pin.>\r\n" in peer.raw  # no account on a pinned route
        peer.send(cp.frame(cp.rmsg_head(None, b"pin.x", b"r", (), 2), b"ok"))
        assert cl.read_until(b"ok\r\n") == b"MSG pin.x 9 r 2\r\nok\r\n"
        peer.send(cp.rs_sub(None, b"from.go"), cp.PING)
        peer.pump(lambda c: c.count(("pong",)) == 2)
        cl.send(b"PUB from.go 3\r\nabc\r\n")
        cl.flush()
        peer.pump(lambda c: ("rmsg", b"A", b"from.go", None, (), b"abc") in c)
        assert b"RMSG from.go 3\r\nabc\r\n" in peer.raw
        cl.close()
        peer.close()


# ==== gateways ================================================================================================

GW_ACCOUNTS = ("accounts { SYS { users: [{user: sys, password: sys}] }, APP { users: [{user: a, password: a}] } }\n"
               "system_account: SYS\nno_auth_user: a\n")


def test_gateway_wire_both_ways():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    our_port = listener.getsockname()[1]
    cport, gport = free_port(), free_port()
    conf = (f"port: {cport}\nserver_name: goA\n{GW_ACCOUNTS}"
            f"gateway {{ name: A, listen: 127.0.0.1:{gport}, "
            f'gateways: [{{name: B, url: "nats://127.0.0.1:{our_port}"}}] }}\n')
    with go_server(conf, [cport, gport]):
        listener.settimeout(8)
        sock, _ = listener.accept()  # Go solicits gateway B: us
        peer = Peer(sock, GATEWAY)
        # the accepting side speaks first
        peer.send(cp.info_frame(ci.encode_info(our_info(server_id="NGWPEERB", gateway="B", port=our_port,
                                                        gateway_url=f"127.0.0.1:{our_port}", gateway_nrp=True)),
                                blank=False))
        calls = peer.pump(lambda c: any(x[0] == "info" for x in c))
        conn = ci.decode_route_connect(_first(calls, "connect")[1])
        assert conn.gateway == "A" and not conn.echo and conn.name
        assert cp.info_frame(_first(calls, "info")[1], blank=False) in peer.raw  # no blank on gateways
        ginfo = ci.decode_info(_first(calls, "info")[1])
        assert ginfo.gateway == "A" and ginfo.gateway_url and ginfo.gateway_nrp and ginfo.server_id == conn.name
        assert ci.encode_info(ginfo) == _first(calls, "info")[1], "a field of the gateway INFO is not modelled"

        cl = Client(cport)
        # optimistic mode: Go sends everything; a request's reply is mapped to _GR_.<cluster>.<server>.<reply>
        cl.send(b"SUB _INBOX.x 1\r\nPUB foo 2\r\nhi\r\nPUB req _INBOX.x 2\r\nhi\r\n")
        cl.flush()
        calls = peer.pump(lambda c: any(x[0] == "rmsg" and x[2] == b"req" for x in c))
        assert ("rmsg", b"APP", b"foo", None, (), b"hi") in calls
        req = next(x for x in calls if x[0] == "rmsg" and x[2] == b"req")
        assert req[3] == ci.gateway_reply(ci.gateway_hash("A"), ci.gateway_hash(ginfo.server_id), b"_INBOX.x")
        assert ci.gateway_reply_origin(req[3])[2] == b"_INBOX.x"

        # RS- (no interest in a subject) and A- (none in the account) from us stop Go's sends
        peer.send(cp.rs_unsub(b"APP", b"foo"), cp.PING)
        peer.pump(lambda c: ("pong",) in c)  # Go has read the RS-
        cl.send(b"PUB foo 2\r\nno\r\nPUB bar 2\r\nok\r\n")
        cl.flush()
        calls = peer.pump(lambda c: ("rmsg", b"APP", b"bar", None, (), b"ok") in c)
        assert ("rmsg", b"APP", b"foo", None, (), b"no") not in calls
        peer.send(cp.account_unsub(b"APP"), cp.PING)
        peer.pump(lambda c: c.count(("pong",)) == 2)
        cl.send(b"PUB bar 3\r\nnot\r\n")
        cl.flush()
        assert [c for c in peer.quiet(0.3) if c[0] == "rmsg" and c[1] == b"APP"] == []
        cl.close()
        peer.close()
    listener.close()


# ==== leaf nodes ==============================================================================================

def test_leaf_wire_both_ways_and_loop_detection():
    cport, lport = free_port(), free_port()
    conf = f"port: {cport}\nserver_name: hub\n{GW_ACCOUNTS}leafnodes {{ listen: 127.0.0.1:{lport} }}\n"
    with go_server(conf, [cport, lport]):
        peer = Peer.dial(lport, LEAF, max_payload=1048576)
        calls = peer.pump(lambda c: any(x[0] == "info" for x in c))
        hub = ci.decode_info(_first(calls, "info")[1])
        assert hub.server_name == "hub" and hub.nonce and hub.leafnode_urls
        assert ci.encode_info(hub) == _first(calls, "info")[1], "a field of the leaf INFO is not modelled"
        peer.send(cp.connect_frame(ci.encode_leaf_connect(ci.LeafConnect(
            version="2.15.1", server_id="NLEAFPEER", name="leafy", headers=True, protocol=ci.SERVER_PROTO))),
            cp.PING, cp.leaf_sub(b"baz"), cp.leaf_sub(b"bq", b"g", 2))
        calls = peer.pump(lambda c: ("pong",) in c)
        # the hub answers CONNECT with an INFO naming the bound account, then its interest, loop subject included
        infos = [ci.decode_info(c[1]) for c in calls if c[0] == "info"]
        assert infos[-1].connect_info and infos[-1].remote_account == "APP"
        lds = [c[1] for c in calls if c[0] == "leaf+" and ci.is_loop_detection_subject(c[1])]
        assert len(lds) == 1

        cl = Client(cport)
        cl.send(b"SUB lf 5\r\nSUB lq qq 6\r\nPUB baz r 2\r\nhi\r\nHPUB baz 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
                b"PUB bq 1\r\nq\r\n")
        cl.flush()
        calls = peer.pump(lambda c: any(x[0] == "leafmsg" and x[1] == b"bq" for x in c))
        assert ("leaf+", b"lf", None, 0) in calls and ("leaf+", b"lq", b"qq", 1) in calls
        assert ("leafmsg", b"baz", b"r", (), b"hi") in calls
        assert ("leafhmsg", b"baz", None, (), 12, b"NATS/1.0\r\n\r\nhi") in calls
        assert ("leafmsg", b"bq", None, (b"g",), b"q") in calls  # a queue sub over a leaf: '|' form
        peer.send(cp.frame(cp.leaf_msg_head(b"lf", None, (), 3), b"abc"),
                  cp.frame(cp.leaf_msg_head(b"lq", b"r", [b"qq"], 2), b"hi"),
                  cp.frame(cp.leaf_hmsg_head(b"lf", None, (), 12, 14), b"NATS/1.0\r\n\r\nhi"))
        got = cl.read_until(b"NATS/1.0\r\n\r\nhi\r\n")
        assert got == b"MSG lf 5 3\r\nabc\r\nMSG lq 6 r 2\r\nhi\r\nHMSG lf 5 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
        cl.send(b"UNSUB 5\r\n")
        cl.flush()
        peer.pump(lambda c: ("leaf-", b"lf", None) in c)

        # our LS+ on the hub's own loop-detection subject: the hub reports a loop and closes
        n = len(peer.rec.calls)
        peer.send(cp.leaf_sub(lds[0]))
        peer.pump(lambda c: peer.closed, timeout=3)
        errs = [c[1] for c in peer.rec.calls[n:] if c[0] == "err"]
        assert errs == [f"'{ci.leaf_loop_error('APP')}'".encode()]
        cl.close()
        peer.close()


def test_leaf_bad_message_arguments_close_without_err():
    cport, lport = free_port(), free_port()
    conf = f"port: {cport}\nleafnodes {{ listen: 127.0.0.1:{lport} }}\n"
    with go_server(conf, [cport, lport]):
        for bad in (b"LMSG foo x\r\n", b"LS+ foo q\r\n"):
            with pytest.raises(ProtocolError) as ei:
                ServerParser(Recorder(), LEAF).feed(bad)
            assert ei.value.client_error is None
            peer = Peer.dial(lport, LEAF)
            peer.pump(lambda c: any(x[0] == "info" for x in c))
            peer.send(cp.connect_frame(ci.encode_leaf_connect(ci.LeafConnect(name="l", server_id="NL"))), cp.PING)
            peer.pump(lambda c: ("pong",) in c)
            n = len(peer.rec.calls)
            peer.send(bad)
            peer.pump(lambda c: peer.closed, timeout=3)
            assert [c for c in peer.rec.calls[n:] if c[0] == "err"] == []
            peer.close()
