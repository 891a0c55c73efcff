"""Faults in a super-cluster of Rillet servers (issue 11, gateways), driven as users meet them.

Two clusters, A and B, of two servers each, every server a subprocess started from a config file (so it
can be killed with SIGKILL or frozen with SIGSTOP):

* the server of A that holds gateway connections (its outbound to B and the inbound ones of B's servers)
  is killed and started again: the gateways reconnect by themselves (nats-server's retries: B's servers
  dial A again, the restarted server dials B after its solicit delay), nats-py clients fail over to the
  other server of A, request/reply across the gateway works again, and no subscriber gets a message twice;
* a server of B is frozen (SIGSTOP) while A sends to it: A's outbound is closed at the gateway write
  deadline (slow consumer) and dialled again (B's other server answers; a dial of the frozen one gets no
  INFO and is closed as stale, as nats-server's watchForStaleConnection); once the frozen server is thawed
  (SIGCONT) it is back in the super-cluster and messages cross both ways.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile

import nats

from helpers import ServerProcess, free_port
from test_cluster_faults import RILLET, SeqSub, _http_json, _until


class GwNode:
    """One server of a super-cluster test: a subprocess with a cluster and a gateway block."""

    def __init__(self, name: str, cluster: str, ports: dict, routes: list[int], remote: str,
                 remote_gw_ports: list[int], tmp: str, gateway_extra: str = "") -> None:
        self.name, self.cluster = name, cluster
        self.port, self.cport, self.gport, self.http = ports["c"], ports["r"], ports["g"], ports["h"]
        r = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in routes)
        u = ", ".join(f'"nats://127.0.0.1:{p}"' for p in remote_gw_ports)
        self.conf = os.path.join(tmp, f"{name}.conf")
        with open(self.conf, "w") as f:
            f.write(f'server_name: "{name}"\nlisten: "127.0.0.1:{self.port}"\nhttp: "127.0.0.1:{self.http}"\n'
                    f'ping_interval: "1s"\n'
                    f'cluster {{ name: "{cluster}", listen: "127.0.0.1:{self.cport}", routes: [{r}] }}\n'
                    f'gateway {{ name: "{cluster}", listen: "127.0.0.1:{self.gport}"\n {gateway_extra}\n'
                    f'  gateways: [{{ name: "{remote}", urls: [{u}] }}] }}\n')
        self.proc: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> "GwNode":
        self.proc = ServerProcess("-c", self.conf, command=RILLET)
        return self

    async def ready(self) -> None:
        assert self.proc is not None
        await self.proc.await_log(r"Server is ready", 15)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.proc.send_signal(signal.SIGKILL)
        self.proc.wait(5)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.proc.poll() is None:
                self.proc.proc.send_signal(signal.SIGCONT)
            self.proc.stop()

    def gatewayz(self) -> dict:
        try:
            return _http_json(f"http://127.0.0.1:{self.http}/gatewayz")
        except OSError:
            return {}

    def outbound(self) -> set[str]:
        return set(self.gatewayz().get("outbound_gateways", {}))

    def inbound_from(self) -> dict[str, int]:
        """Remote cluster -> how many inbound gateway connections from it."""
        return {k: len(v) for k, v in self.gatewayz().get("inbound_gateways", {}).items()}

    def gateway_interest(self, remote: str, account: str = "$G") -> set[str]:
        """The subjects the remote cluster announced on this server's outbound connection to it."""
        try:
            z = _http_json(f"http://127.0.0.1:{self.http}/gatewayz?accs=1&subs=1")
        except OSError:
            return set()
        out = z.get("outbound_gateways", {}).get(remote, {})
        return {s for a in out.get("accounts", []) if a["name"] == account for s in a.get("subscriptions_list", [])}

    def routed_interest(self) -> set[str]:
        try:
            z = _http_json(f"http://127.0.0.1:{self.http}/routez?subs=1")
        except OSError:
            return set()
        return {s for r in z.get("routes", []) for s in r.get("subscriptions_list") or []}



def _out_port(n: GwNode, remote: str) -> int:
    """The gateway port this server's outbound connection to ``remote`` goes to (0: none)."""
    out = n.gatewayz().get("outbound_gateways", {}).get(remote)
    return out["connection"]["port"] if out else 0


def meshed(a: list[GwNode], b: list[GwNode]) -> bool:
    """Every server has its outbound to the other cluster, and every cluster has an inbound from each
    server of the other (one per server: nats-server's full mesh of clusters)."""
    if not all(n.outbound() == {"B"} for n in a) or not all(n.outbound() == {"A"} for n in b):
        return False
    return sum(n.inbound_from().get("B", 0) for n in a) == len(b) and \
        sum(n.inbound_from().get("A", 0) for n in b) == len(a)


@contextlib.asynccontextmanager
async def super_cluster(gateway_extra: str = ""):
    tmp = tempfile.mkdtemp(prefix="rillet-gw-faults-")
    ports = [{k: free_port() for k in "crgh"} for _ in range(4)]
    a_g, b_g = [ports[0]["g"], ports[1]["g"]], [ports[2]["g"], ports[3]["g"]]
    a = [GwNode(f"a{i}", "A", ports[i], [ports[0]["r"]] if i else [], "B",
                b_g, tmp, gateway_extra) for i in range(2)]
    b = [GwNode(f"b{i}", "B", ports[2 + i], [ports[2]["r"]] if i else [], "A", a_g, tmp, gateway_extra)
         for i in range(2)]
    every = a + b
    try:
        for n in every:
            n.start()
        for n in every:
            await n.ready()
        await _until(lambda: meshed(a, b), 12, "the super-cluster's gateways", step=0.1)
        yield a, b
    finally:
        for n in every:
            n.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def _connect(servers: list[str]):
    return await nats.connect(servers=servers, dont_randomize=True, reconnect_time_wait=0.1,
                              max_reconnect_attempts=-1, connect_timeout=1)


async def _seen(cond, what: str, *subs: SeqSub, timeout: float = 5.0) -> None:
    try:
        await _until(cond, timeout, what)
    except AssertionError as e:
        missing = [sorted(set(range(1, max(s.seen | {1}) + 1)) - s.seen)[:5] for s in subs]
        raise AssertionError(f"{e}: received {[len(s.seen) for s in subs]}, duplicates {[s.dups for s in subs]}, "
                             f"first missing {missing}")


async def _retry_request(nc, subject: str, data: bytes, what: str, tries: int = 100):
    for _ in range(tries):
        try:
            return await nc.request(subject, data, timeout=0.5)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            await asyncio.sleep(0.05)
    raise AssertionError(f"no answer for {what}")


async def test_sigkill_a_gateway_server_and_restart():
    async with super_cluster() as (a, b):
        # the victim: a server of A that holds inbound connections from B (besides its outbound to B)
        victim = max(a, key=lambda n: n.inbound_from().get("B", 0))
        survivor = a[1] if victim is a[0] else a[0]
        assert victim.inbound_from().get("B", 0) >= 1
        ua, ub = [victim.url, survivor.url], [n.url for n in b]
        sub_b = await SeqSub().start(ub[::-1], "seq")  # on b1
        sub_a = await SeqSub().start(ua[::-1], "seq")  # on the survivor
        pub = await _connect(ua)  # on the victim, fails over to the survivor
        svc_b = await _connect(ub)
        svc_a = await _connect(ua[::-1])
        asker_b = await _connect(ub)

        async def answer_b(m) -> None:
            await m.respond(b"b:" + m.data)

        async def answer_a(m) -> None:
            await m.respond(b"a:" + m.data)
        await svc_b.subscribe("svc.b", cb=answer_b)
        await svc_a.subscribe("svc.a", cb=answer_a)
        await svc_b.flush()
        await svc_a.flush()
        seq = 0

        async def publish(n: int) -> None:
            nonlocal seq
            for _ in range(n):
                seq += 1
                await pub.publish("seq", b"%d" % seq)
                if seq % 20 == 0:
                    await asyncio.sleep(0.002)
            await pub.flush()
        try:
            assert (await _retry_request(pub, "svc.b", b"1", "A -> B before the kill")).data == b"b:1"
            assert (await _retry_request(asker_b, "svc.a", b"2", "B -> A before the kill")).data == b"a:2"
            await _until(lambda: "seq" in victim.gateway_interest("B") and "seq" in victim.routed_interest(), 5,
                         "the victim knows the subscribers of B and of the survivor", step=0.05)
            await publish(300)
            await _seen(lambda: len(sub_b.seen) == 300 and len(sub_a.seen) == 300, "the first 300", sub_a, sub_b)
            victim.kill()
            await publish(300)  # (sent on to the survivor once the publisher has failed over)
            await _until(lambda: pub.is_connected and pub.connected_url.port == survivor.port, 10, "fail-over")
            # B's servers whose outbound went to the victim dial A again by themselves: the survivor answers
            await _until(lambda: all(_out_port(n, "A") == survivor.gport for n in b)
                         and survivor.outbound() == {"B"}, 10, "B's gateways back to A while the victim is down",
                         step=0.1)
            assert (await _retry_request(pub, "svc.b", b"3", "A -> B after the kill")).data == b"b:3"
            assert (await _retry_request(asker_b, "svc.a", b"4", "B -> A after the kill")).data == b"a:4"
            victim.start()
            await victim.ready()
            await _until(lambda: meshed(a, b), 10, "the restarted server back in the super-cluster", step=0.1)
            late = await _connect([victim.url])
            try:
                assert (await _retry_request(late, "svc.b", b"5", "from the restarted server")).data == b"b:5"
            finally:
                await late.close()
            first_after = seq + 1
            await publish(300)
            after = set(range(first_after, seq + 1))
            await _seen(lambda: after <= sub_b.seen and after <= sub_a.seen, "every message after the restart",
                        sub_a, sub_b, timeout=10)
            await asyncio.sleep(0.2)  # (a duplicate still in flight would arrive)
            assert sub_b.dups == 0 and sub_a.dups == 0
            assert set(range(1, 301)) <= sub_b.seen
        finally:
            for nc in (pub, svc_b, svc_a, asker_b):
                await nc.close()
            await sub_a.close()
            await sub_b.close()


async def test_sigstop_a_gateway_peer_write_deadline_and_reconnect():
    async with super_cluster(gateway_extra="write_deadline: 300ms") as (a, b):
        # the server of B that a0's outbound goes to is frozen; the other one holds the subscriber
        port = _http_json(f"http://127.0.0.1:{a[0].http}/gatewayz")["outbound_gateways"]["B"]["connection"]["port"]
        frozen, other = (b[0], b[1]) if port == b[0].gport else (b[1], b[0])
        assert port == frozen.gport
        sub = await SeqSub().start([other.url], "load")  # B's interest, announced to A by both servers of B
        bulk = 0

        async def count(m) -> None:
            nonlocal bulk
            bulk += 1
        await sub.nc.subscribe("bulk", cb=count)
        await sub.nc.flush()
        na = await _connect([a[0].url])
        nb0 = await _connect([frozen.url])
        try:
            await _until(lambda: {"load", "bulk"} <= a[0].gateway_interest("B"), 5, "B's interest at a0", step=0.05)
            for i in range(1, 51):
                await na.publish("load", b"%d" % i)
            await na.flush()
            await _until(lambda: len(sub.seen) == 50, 5, "messages through the server to freeze")
            frozen.signal(signal.SIGSTOP)
            mark = a[0].proc.mark()
            chunk = b"x" * 4000
            for _ in range(4000):  # 16 MB towards a peer that reads nothing
                await na.publish("bulk", chunk)
            await na.flush()
            await a[0].proc.await_log(r"Slow Consumer Detected: WriteDeadline of 300ms exceeded", 10, mark)
            await a[0].proc.await_log(r"Gateway connection closed: Slow Consumer \(Write Deadline\)", 5, mark)
            # a0 dials B again (URLs in a random order): the other server answers; the frozen one takes the TCP
            # connection but sends no INFO, so that dial is closed as stale after ping_max + 1 ping intervals
            later = a[0].proc.mark()
            await a[0].proc.await_log(r'(Outbound gateway connection to "B" .* registered|'
                                      r"Gateway connection closed: Stale Connection)", 10, later)
            frozen.signal(signal.SIGCONT)
            await _until(lambda: meshed(a, b), 15, "the thawed server back in the super-cluster", step=0.1)
            # messages cross both ways again, from a client of the thawed server too
            got = SeqSub()
            await got.start([a[1].url], "back")
            try:
                for _ in range(50):
                    await nb0.publish("back", b"1")
                    await nb0.flush()
                    await asyncio.sleep(0.05)
                    if got.seen:
                        break
                assert got.seen == {1}
            finally:
                await got.close()
            n0 = len(sub.seen)
            for i in range(1001, 1051):
                await na.publish("load", b"%d" % i)
            await na.flush()
            await _until(lambda: set(range(1001, 1051)) <= sub.seen, 5, "A -> B after the thaw")
            assert sub.dups == 0 and len(sub.seen) == n0 + 50
        finally:
            await na.close()
            await nb0.close()
            await sub.close()
