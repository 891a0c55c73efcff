"""The operators' drill of a KV bucket at its ``max_bytes`` limit (issue 24), for the JetStream fault harness.

:class:`KVLimitWorkload` puts new keys (``k000001``, ``k000002``, ..., each value unique) into an R3 file bucket
of history 1 whose ``max_bytes`` holds about a hundred of them and whose stream discards old messages (a bucket
made by the clients refuses puts at its limit instead), so that from a few seconds in every put evicts the oldest
one: the stream's first sequence moves steadily while servers are killed, wiped and restarted.
Every put is recorded (acknowledged with its revision, refused, or unknown).

At the end each server is made the bucket's leader in turn and the bucket's stream is read back in full through
it (the runner's replica comparison): :meth:`KVLimitWorkload.check` then requires of that replica that every
acknowledged put at or after the first sequence it still holds is there, at its revision, with its value
(evicted puts, below the first sequence, are gone by design; a replica that came back from its own disk short
of acknowledged messages lacks its newest ones), and that nothing it holds was never sent or sits at another
revision than the one acknowledged. The comparison itself requires every replica to hold the same.
nats-server's own failure here (measured before this drill was in the harness, issue 24): in 3 of 5 runs the
replica that had been leader came back ~97 messages short, kept that history and reported itself current.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from nats.js import api

from .workloads import classify, connect, err_text

LBUCKET = "jfkvmax"
LSTREAM = f"KV_{LBUCKET}"
LSUBJECT = f"$KV.{LBUCKET}.>"
PAD = 200  # bytes of padding in each value: with the subject and headers ~280 bytes a message


@dataclass
class LimitReport:
    acked: int = 0
    refused: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    unknown: int = 0
    # replica (server name) -> (messages held, first sequence, acknowledged puts missing, bad entries)
    replicas: dict[str, tuple[int, int, list[str], list[str]]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        top = sorted(self.refusals.items(), key=lambda kv: -kv[1])[:3]
        out = [f"kv-limit: puts acked {self.acked}, refused {self.refused}"
               f"{' (' + ', '.join(f'{k} x{v}' for k, v in top) + ')' if top else ''}, unknown {self.unknown}"]
        for name, (n, first, missing, bad) in sorted(self.replicas.items()):
            out.append(f"kv-limit: replica on {name}: {n} messages from seq {first}, acknowledged puts missing "
                       f"{len(missing)}{' ' + str(missing[:5]) if missing else ''}, wrong or unsent "
                       f"{len(bad)}{' ' + str(bad[:5]) if bad else ''}")
        return out


class KVLimitWorkload:
    def __init__(self, urls_from, max_bytes: int, timeout: float = 3.0, pace: float = 0.02) -> None:
        self.urls_from = urls_from
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.pace = pace
        self.errors: list[str] = []
        self.stop = asyncio.Event()
        self.sent: dict[str, str] = {}      # value -> key, every put attempted
        self.acked: dict[int, str] = {}     # revision -> value, the acknowledged puts
        self.refused_values: set[str] = set()
        self.acked_twice: list[str] = []
        self.refusals: dict[str, int] = {}  # error text -> how many puts it refused
        self.unknown = 0
        self.report = LimitReport()
        self._nc = None

    async def setup(self, js, replicas: int = 3) -> None:
        await js.create_key_value(bucket=LBUCKET, history=1, replicas=replicas, storage=api.StorageType.FILE,
                                  max_bytes=self.max_bytes)
        # (a bucket made by the clients discards new puts at its limit: the drill's bucket evicts its oldest
        # instead, its stream updated to discard old, as an operator does to keep a bounded bucket writable)
        cfg = (await js.stream_info(LSTREAM)).config
        if cfg.discard != api.DiscardPolicy.OLD:
            cfg.discard = api.DiscardPolicy.OLD
            await js.update_stream(cfg)
        got = (await js.stream_info(LSTREAM)).config.discard
        if got != api.DiscardPolicy.OLD:  # (raised: the caller tries the setup again)
            raise RuntimeError(f"{LSTREAM}: discard is {got} after the update to old")

    async def run(self) -> None:
        self._nc = await connect(self.urls_from(0), "kv-limit", self.errors)
        kv = await self._nc.jetstream(timeout=self.timeout).key_value(LBUCKET)
        n = 0
        while not self.stop.is_set():
            n += 1
            key, value = f"k{n:06d}", f"{n}:" + "x" * PAD
            self.sent[value] = key
            try:
                rev = await kv.put(key, value.encode())
                if rev in self.acked:  # (one revision acknowledged for two puts: a failure, runner.report)
                    self.acked_twice.append(f"revision {rev} acknowledged for {self.acked[rev][:12]} and "
                                            f"{value[:12]}")
                self.acked[rev] = value
            except Exception as e:  # a refusal or an unknown outcome, recorded (a refused put must not be stored)
                if classify(e) == "fail":
                    self.refused_values.add(value)
                    why = err_text(e)
                    self.refusals[why] = self.refusals.get(why, 0) + 1
                else:
                    self.unknown += 1
                    if len(self.errors) < 20:
                        self.errors.append(err_text(e))
                await asyncio.sleep(0.05)
            if self.pace:
                await asyncio.sleep(self.pace)

    def check(self, server: str, msgs: list[tuple[int, str]]) -> list[str]:
        """Failures of the replica read through ``server`` (module docstring); recorded in the report."""
        held = dict(msgs)
        first = min(held) if held else 0
        # (nothing held at all: every acknowledged put is missing, the bucket can not have evicted its newest)
        missing = [f"seq {rev}" for rev, v in sorted(self.acked.items()) if rev >= first and held.get(rev) != v]
        bad = []
        for seq, v in msgs:
            if v not in self.sent:
                bad.append(f"seq {seq}: never sent")
            elif v in self.refused_values:
                bad.append(f"seq {seq}: its put was refused")
            elif seq in self.acked and self.acked[seq] != v:
                bad.append(f"seq {seq}: holds {v[:12]}, acknowledged at it: {self.acked[seq][:12]}")
        self.report.replicas[server] = (len(msgs), first, missing, bad)
        out = []
        if missing:
            out.append(f"{LSTREAM}: the replica on {server} lacks {len(missing)} acknowledged puts at or after its "
                       f"first sequence {first} ({', '.join(missing[:5])})")
        if bad:
            out.append(f"{LSTREAM}: the replica on {server} holds {len(bad)} wrong or unsent values "
                       f"({', '.join(bad[:5])})")
        return out

    def summary(self) -> LimitReport:
        r = self.report
        r.acked, r.refused, r.unknown, r.refusals = len(self.acked), len(self.refused_values), self.unknown, self.refusals
        return self.report

    async def close(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
