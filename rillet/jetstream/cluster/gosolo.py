"""One-replica streams (and their consumers) that a Go meta leader places on this Rillet server (``rillet_go_meta``).

nats-server runs an R1 stream of a cluster without a RAFT group: the one server of its assignment runs it as a
lone server runs a stream, answers its create request, takes its publishes, serves its API and leads its
consumers (each one replica as well). A Rillet server placed in a Go cluster does the same with Rillet's own
JetStream engine (rillet.jetstream: streams, stores, pull and push consumers, acks), held apart from the server
(``server.jetstream`` stays None: the other JetStream API requests go on to the Go servers, ``bridge_js_api``):

* the meta group's assignments drive it (``SoloHost.reconcile``, from ``gostream.host_streams``): a stream assigned
  to this server alone is created, updated and deleted, and a consumer of it created and deleted, by giving the
  engine the request the Go meta leader committed (the client's reply subject with it), so that the client gets
  the engine's answer as it gets a Go stream leader's;
* the API requests for those streams and consumers that nats-server's stream or consumer leader answers (info,
  message get and delete, purge, consumer info, pause, unpin, leader step-down) reach every server in the system
  account; this server answers those of the streams it runs, in the system account as nats-server does;
* the meta leader's stream and consumer list requests ask each stream's leader over ``$JSC.SI.<account>.<stream>``
  and ``$JSC.CI.<account>.<stream>.<consumer>``: answered with the stream or consumer info;
* messages published to the stream's subjects, pull requests (``CONSUMER.MSG.NEXT``) and acks reach the engine's
  own subscriptions in the account, over the routes from any server of the cluster.

A stream whose replicated group the meta layer leaves as this server alone (a scale-down to R1 that keeps this
replica, removed peers with no replacement) has the same shape but is not run here: its replica, with every
message it stored, goes on as a group of one (``gostream.host_streams``, ``lead_alone``), as nats-server's
replica keeps its store when its group drops to one peer.

Files: ``<store_dir>/go_solo/jetstream/<account>/streams/<stream>/`` as a lone Rillet server keeps them; a restart
loads them back and the assignments confirm them (a stream no longer assigned here is deleted).

An R1 stream scaled up while it is here (this server the source of the scale-up, nats-server's isR1ScaleUpSource)
goes over to the replica of its new group with its files and its consumers' states (``SoloHost.hand_over``,
``gostream._hand_over``), as nats-server's source keeps its stream and sends it to the new peers.

Not done: an R1 stream moved while it is here, the stream snapshot API, and a Rillet ephemeral consumer's
inactivity deletion is local (nats-server's leader asks the meta leader to remove it).
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional

__all__ = ["SoloHost", "is_solo"]

# the API requests a stream's leader answers (nats-server: jsStreamInfoRequest and friends), by the subject tokens
# after $JS.API, with the number of name tokens that follow (stream, or stream and consumer)
_STREAM_API = ("STREAM.INFO", "STREAM.MSG.GET", "STREAM.MSG.DELETE", "STREAM.PURGE", "STREAM.LEADER.STEPDOWN")
_CONSUMER_API = ("CONSUMER.INFO", "CONSUMER.PAUSE", "CONSUMER.UNPIN", "CONSUMER.LEADER.STEPDOWN",
                 "CONSUMER.RESET")


def is_solo(assignment: dict, me: str) -> bool:
    """The stream (or consumer) group is this server alone and has no RAFT group in nats-server's cluster."""
    g = assignment.get("group") or {}
    return list(g.get("peers") or ()) == [me] and not g.get("desired")


def _router_class() -> type:
    from rillet.jetstream.api import codec as apijson
    from rillet.jetstream.api.router import ApiRouter

    class SoloRouter(ApiRouter):
        """The engine's API, answering in the system account (where the requests came from)."""
        sys_ic: Any = None

        def respond(self, reply: Optional[bytes], obj: dict) -> None:
            if reply:
                self.sys_ic.publish(reply, None, apijson.go_json(with_cluster(self.js.server, obj)))
    return SoloRouter


_WITH_CLUSTER = frozenset(f"io.nats.jetstream.api.v1.{t}_response" for t in (
    "stream_create", "stream_update", "stream_info", "consumer_create", "consumer_info"))


def with_cluster(server: Any, obj: dict, always: bool = False) -> dict:
    """A stream or consumer info of this server's as a clustered nats-server gives one of an asset without a
    RAFT group: ``cluster`` names the cluster and this server as the leader (no replicas)."""
    if "error" not in obj and (always or obj.get("type") in _WITH_CLUSTER):
        obj["cluster"] = {"name": server.opts.cluster.name, "leader": server.name}
    return obj


class SoloHost:
    def __init__(self, member: Any, store_dir: str) -> None:
        from rillet.jetstream.manager import JetStream
        self.member = member
        self.server = server = member.server
        self.log = server.log
        js = self.js = JetStream(server)  # (never started: no API subscriptions; the accounts are added here)
        js.store_dir = os.path.abspath(os.path.join(store_dir, "go_solo", "jetstream"))
        js.strict = False  # (the Go meta leader's configs: fields of newer versions tolerated)
        self.sys_ic = server.internal_client(server.system_account, "go solo streams")
        self._router_cls = _router_class()
        self._subs: dict[tuple[str, str], list[Any]] = {}
        self._configs: dict[tuple[str, str], str] = {}  # the stream config last applied (updates)
        self.hosted: dict[tuple[str, str], set[str]] = {}  # (account, stream) -> consumers asked of the engine
        self._jsc_subs = [self.sys_ic.subscribe("$JSC.SI.*.*", self._on_jsc_si),
                          self.sys_ic.subscribe("$JSC.CI.*.*.*", self._on_jsc_ci)]
        # the stores synced every jetstream { sync_interval } (120 s by default), as a lone server's are
        self._sync_task = None
        if not js.sync_always and isinstance(js.sync_interval, (int, float)) and js.sync_interval > 0:
            self._sync_task = server.loop.create_task(js._periodic_sync())
        self.created = self.deleted = self.served = 0
        self._groups_path = os.path.join(self.js.store_dir, "groups.json")
        self.groups = self._load_groups()
        self.recovered = self._recover()

    # -- accounts and recovery ----------------------------------------------------------------------------------
    def _jsa(self, account: str, create: bool = True) -> Any:
        from rillet.jetstream.manager import JSAccount
        from rillet.durable import make_dirs_durable
        jsa = self.js.accounts.get(account)
        if jsa is not None or not create:
            return jsa
        acc = self.server.accounts.get(account)
        if acc is None:
            return None
        jsa = JSAccount(self.js, acc)
        make_dirs_durable(jsa.dir)
        jsa.router = self._router_cls(jsa)
        jsa.router.sys_ic = self.sys_ic
        self.js.accounts[account] = jsa
        return jsa

    def _recover(self) -> int:
        """The streams (and consumers) a previous run kept: loaded as a lone server loads them."""
        n = 0
        if not os.path.isdir(self.js.store_dir):
            return 0
        for account in sorted(os.listdir(self.js.store_dir)):
            if not os.path.isdir(os.path.join(self.js.store_dir, account, "streams")):
                continue
            jsa = self._jsa(account)
            if jsa is None:
                self.log.warn(f"JetStream: solo streams of account {account!r} kept on disk: no such account")
                continue
            jsa._recover()
            for name, stream in jsa.streams.items():
                self.hosted[(account, name)] = set(stream.consumers)
                self._configs[(account, name)] = None  # (the next assignment confirms or updates it)
                self._subscribe(account, name)
                n += 1
        return n

    # -- the assignments ------------------------------------------------------------------------------------
    def _serve(self, jsa: Any, subject: str, reply: str, body: bytes) -> None:
        """A request to the engine, through its API queue (a create goes on off the loop; what follows it
        waits: a consumer's create after its stream's)."""
        self.served += 1
        jsa.router.on_request(None, None, subject.encode(), reply.encode() if reply else None, 0, body)

    def _load_groups(self) -> dict[str, str]:
        try:
            with open(self._groups_path, "rb") as f:
                d = json.loads(f.read())
        except FileNotFoundError:
            return {}
        if not isinstance(d, dict):
            raise ValueError(f"{self._groups_path}: not a JSON object")
        return {str(k): str(v) for k, v in d.items()}

    def _set_group(self, key: tuple[str, str], group: Optional[str]) -> None:
        """The Go group name of each stream kept here (``<account> <stream>`` -> ``S-R1F-...``), on disk: after
        a restart it tells the stream kept from one of the same name created and removed meanwhile."""
        k = f"{key[0]} {key[1]}"
        if self.groups.get(k) == group:
            return
        if group is None:
            self.groups.pop(k, None)
        else:
            self.groups[k] = group
        os.makedirs(os.path.dirname(self._groups_path), exist_ok=True)
        tmp = self._groups_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.groups, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._groups_path)

    def _delete(self, key: tuple[str, str], reply: str) -> None:
        jsa = self._jsa(key[0], create=False)
        self._set_group(key, None)
        self.hosted.pop(key, None)
        self._configs.pop(key, None)
        self._unsubscribe(*key)
        if jsa is not None:
            self._serve(jsa, f"$JS.API.STREAM.DELETE.{key[1]}", reply, b"")
            self.deleted += 1

    def reconcile(self, streams: dict[tuple[str, str], dict], consumers: dict[tuple[str, str], dict[str, dict]],
                  fresh: bool) -> None:
        """Make the engine hold the solo streams and consumers of the assignments (``fresh``: the assignments
        come from live entries, their replies are answered; else from a catch-up, nothing is answered)."""
        me = self.member.peer
        want = {k: sa for k, sa in streams.items() if is_solo(sa, me)}
        if fresh:  # (caught up: what is no longer assigned here goes)
            for key in [k for k in self.hosted if k not in want]:
                self._delete(key, "")
        for key, sa in want.items():
            group = str((sa.get("group") or {}).get("name") or "")
            if key in self.hosted and self.groups.get(f"{key[0]} {key[1]}") not in (None, group):
                self._delete(key, "")  # (kept from a stream of the same name that was removed meanwhile)
            account, name = key
            jsa = self._jsa(account)
            if jsa is None:
                self.member._warn_once(f"solo:{account}", f"JetStream: stream '{account} > {name}' placed here "
                                                          "but the account is not configured on this server")
                continue
            body = json.dumps(sa.get("stream") or {}).encode()  # (in the Go leader's field order: echoed back)
            cfg = json.dumps(sa.get("stream") or {}, sort_keys=True)
            reply = str(sa.get("reply") or "") if fresh else ""
            have = self.hosted.get(key)
            if have is None:
                self._serve(jsa, f"$JS.API.STREAM.CREATE.{name}", reply, body)
                self.hosted[key] = have = set()
                self._set_group(key, group)
                self.created += 1
                self._subscribe(account, name)
            elif self._configs.get(key) not in (None, cfg):
                self._serve(jsa, f"$JS.API.STREAM.UPDATE.{name}", reply, body)
            self._configs[key] = cfg
            assigned = consumers.get(key) or {}
            for cname in sorted(have - set(assigned)) if fresh else ():
                have.discard(cname)
                self._serve(jsa, f"$JS.API.CONSUMER.DELETE.{name}.{cname}", "", b"")
            for cname, ca in assigned.items():
                if cname in have:
                    continue
                have.add(cname)
                ccfg = dict(ca.get("consumer") or ca.get("config") or {})
                ccfg.setdefault("name", cname)
                cbody = json.dumps({"stream_name": name, "config": ccfg}).encode()
                self._serve(jsa, f"$JS.API.CONSUMER.CREATE.{name}.{cname}",
                            str(ca.get("reply") or "") if fresh else "", cbody)

    def removed_stream(self, account: str, name: str, group: str, reply: str) -> None:
        """A stream removal committed: the stream's deletion answered to the client (nats-server: its leader
        answers). Only the removal of the group kept here (another of the same name may have been created)."""
        key = (account, name)
        if key in self.hosted and self.groups.get(f"{account} {name}") in (None, group):
            self._delete(key, reply)

    def removed_consumer(self, account: str, stream: str, name: str, reply: str) -> None:
        have = self.hosted.get((account, stream))
        jsa = self._jsa(account, create=False)
        if have is None or name not in have or jsa is None:
            return
        have.discard(name)
        self._serve(jsa, f"$JS.API.CONSUMER.DELETE.{stream}.{name}", reply, b"")

    def hand_over(self, key: tuple[str, str], dest: str) -> Optional[dict[str, Any]]:
        """The stream of ``key`` run here, taken out of the engine for a replica of its group grown from this
        server (a scale-up from R1, nats-server's isR1ScaleUpSource: the source keeps its stream and sends it to
        the new peers): its store's files moved to ``dest`` (the replica's message directory, which must not
        exist) and its consumers' delivery states returned (name -> ``ConsumerState``), taken from the running
        consumers. None when the engine does not run it, or its files can not be handed over (encrypted: the
        replica's store opens them without the keys), with a warning: the stream is then removed as before."""
        import shutil
        jsa = self._jsa(key[0], create=False)
        stream = jsa.streams.get(key[1]) if jsa is not None else None
        if stream is None or stream.cfg.storage != "file":
            return None
        if getattr(stream.store, "_keys", None) is not None:
            self.log.warn(f"JetStream: stream '{key[0]} > {key[1]}' scaled up from this server: its encrypted "
                          "files can not be handed to the replica, which starts empty")
            return None
        states = {name: c.get_state() for name, c in stream.consumers.items()}
        src, msgs = stream.store.dir, stream.store.state().msgs
        jsa.streams.pop(key[1], None)
        stream.stop()  # (its store synced and closed, its consumers' states written)
        self._set_group(key, None)
        self.hosted.pop(key, None)
        self._configs.pop(key, None)
        self._unsubscribe(*key)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.replace(src, dest)
        shutil.rmtree(os.path.join(dest, "consumers"), ignore_errors=True)  # (the states go with the replicas)
        shutil.rmtree(jsa.stream_dir(key[1]))
        self.log.notice(f"JetStream: stream '{key[0]} > {key[1]}' scaled up from this server: its store ({msgs} "
                        f"messages) handed to the replica of its group, with {len(states)} consumer state(s)")
        return states

    # -- the API requests a stream leader answers -------------------------------------------------------------
    def _subscribe(self, account: str, name: str) -> None:
        if (account, name) in self._subs:
            return
        subs = [self.sys_ic.subscribe(f"$JS.API.{ep}.{name}", self._on_api) for ep in _STREAM_API]
        subs += [self.sys_ic.subscribe(f"$JS.API.{ep}.{name}.*", self._on_api) for ep in _CONSUMER_API]
        self._subs[(account, name)] = subs

    def _unsubscribe(self, account: str, name: str) -> None:
        for sub in self._subs.pop((account, name), ()):
            self.sys_ic.remove_sub(sub)

    @staticmethod
    def _account_of(hdr: int, msg: bytes) -> str:
        """The requester's account, from the ``Nats-Request-Info`` header the service import adds."""
        if hdr <= 0:
            return ""
        from rillet.jetstream import headers as H
        ci = H.get_header(bytes(msg[:hdr]), "Nats-Request-Info")
        if not ci:
            return ""
        try:
            d = json.loads(ci)
        except ValueError:
            return ""
        return str(d.get("acc") or "") if isinstance(d, dict) else ""

    def _on_api(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        account = self._account_of(hdr, msg)
        jsa = self._jsa(account, create=False) if account else None
        if jsa is None:
            return
        toks = subject.decode().split(".")
        name = toks[-1] if toks[2] == "STREAM" else toks[-2]
        if name not in jsa.streams:
            return
        self.served += 1
        jsa.router.on_request(None, None, subject, reply, hdr, bytes(msg))

    def _on_jsc_si(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        """The meta leader's stream info request (its STREAM.LIST): the stream's info, without the API type."""
        _, _, account, name = subject.decode().split(".", 3)
        jsa = self._jsa(account, create=False)
        if jsa is None or name not in jsa.streams or not reply:
            return
        self._info_to(jsa, f"$JS.API.STREAM.INFO.{name}", reply)

    def _on_jsc_ci(self, sub: Any, c: Any, subject: bytes, reply: Optional[bytes], hdr: int, msg: bytes) -> None:
        _, _, account, stream, name = subject.decode().split(".", 4)
        jsa = self._jsa(account, create=False)
        if jsa is None or stream not in jsa.streams or not reply:
            return
        self._info_to(jsa, f"$JS.API.CONSUMER.INFO.{stream}.{name}", reply)

    def _info_to(self, jsa: Any, subject: str, reply: bytes) -> None:
        from rillet.jetstream.api import codec as apijson
        got: list[dict] = []
        router = jsa.router
        orig = router.respond
        router.respond = lambda _r, obj: got.append(obj)  # (captured: answered below without the type)
        try:
            router.serve(subject.encode(), b"_", 0, b"")
        finally:
            router.respond = orig
        if got and "error" not in got[0]:
            obj = with_cluster(self.server, {k: v for k, v in got[0].items() if k != "type"}, always=True)
            self.sys_ic.publish(reply, None, apijson.go_json(obj))

    # -- what the statsz reports ----------------------------------------------------------------------------
    def usage(self) -> tuple[int, int, int, int, set[str]]:
        """(memory bytes, file bytes, reserved memory, reserved file, accounts) of the solo streams."""
        mem = sto = rmem = rsto = 0
        accounts: set[str] = set()
        for account, jsa in self.js.accounts.items():
            for s in jsa.streams.values():
                accounts.add(account)
                b = s.store.state().bytes
                memory = s.cfg.storage == "memory"
                if memory:
                    mem += b
                else:
                    sto += b
                mb = getattr(s.cfg, "max_bytes", -1) or -1
                if mb > 0:
                    if memory:
                        rmem += mb
                    else:
                        rsto += mb
        return mem, sto, rmem, rsto, accounts

    def stop(self) -> None:
        if self._sync_task is not None:
            self._sync_task.cancel()
            self._sync_task = None
        for key in list(self._subs):
            self._unsubscribe(*key)
        for sub in self._jsc_subs:
            self.sys_ic.remove_sub(sub)
        self._jsc_subs = []
        for jsa in list(self.js.accounts.values()):
            jsa.stop()
