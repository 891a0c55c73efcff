"""Stream and consumer info between the servers of a JetStream cluster (``$JSC.SI`` / ``$JSC.CI``): a group's leader
answers with its own info, and the meta leader (or any server answering an API request) asks for it."""
from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Callable, Optional

from rillet.jetstream.api import codec as apijson
from rillet.jetstream.api.cluster import INFO_TIMEOUT

if TYPE_CHECKING:
    from rillet.jetstream.cluster.meta import JetStreamCluster



class InfoRequests:
    """The part of ``JetStreamCluster`` moved here; ``self.cl`` is the JetStreamCluster."""

    def __init__(self, cl: "JetStreamCluster") -> None:
        self.cl = cl

    def _leader_stream_info(self, account: str, name: str) -> Optional[dict]:
        """The stream info, when this server holds the stream's leader replica."""
        st = self.cl.streams
        rep = st.replica(account, name) if st is not None else None
        if rep is None or not rep.leader:
            return None
        return st.stream_info(account, name)

    def _leader_consumer_info(self, account: str, stream: str, name: str, initial: bool = False) -> Optional[dict]:
        """The consumer info, when this server holds the consumer's leader (``initial``: a create's answer)."""
        st = self.cl.streams
        return st.consumer_info(account, stream, name, initial=initial) if st is not None else None

    def _on_stream_info_req(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                            msg: bytes) -> None:
        if not reply or self.cl.streams is None:
            return
        try:
            q = json.loads(msg[hdr:] if hdr > 0 else msg)
            acc, name = q["account"], q["stream"]
            info = self._leader_stream_info(acc, name)
        except (ValueError, KeyError, TypeError) as e:
            self.cl.log.warn(f"JetStream cluster: bad stream info request: {e}")
            return
        self._answer(reply, info, lambda: self._leader_stream_info(acc, name), acc, name, "")

    def _on_consumer_info_req(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int,
                              msg: bytes) -> None:
        if not reply or self.cl.streams is None:
            return
        try:
            q = json.loads(msg[hdr:] if hdr > 0 else msg)
            acc, stream, name = q["account"], q["stream"], q["consumer"]
            if q.get("direct"):  # (CONSUMER.DELETE of a consumer not in the assignments: see _api_consumer_delete)
                if self.cl.streams.direct_consumer_known(acc, stream, name):
                    self.cl._ic.publish(reply, None, b'{"direct":true}')
                    self.cl.server.schedule_flush()
                return
            initial = bool(q.get("initial"))
            info = self._leader_consumer_info(acc, stream, name, initial)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self.cl.log.warn(f"JetStream cluster: bad consumer info request: {e}")
            return
        if info is not None or name:
            self._answer(reply, info, lambda: self._leader_consumer_info(acc, stream, name, initial), acc, stream,
                         name)

    def _answer(self, reply: bytes, info: Optional[dict], info_of: Callable[[], Optional[dict]], acc: str,
                stream: str, consumer: str) -> None:
        """An info request answered with ``info`` (this server leads the stream's or consumer's group), else
        once this server wins the group's first election (``info_of()`` then), if within INFO_TIMEOUT."""
        if info is not None:
            self.cl._ic.publish(reply, None, apijson.go_json(info))
            return
        reply = bytes(reply)

        def elected() -> None:  # (this server won the group's first election: answer now)
            i = info_of()
            if i is not None:
                self.cl._ic.publish(reply, None, apijson.go_json(i))
                self.cl.server.schedule_flush()  # (not in a read cycle: nothing else flushes it)
        self.cl.streams.when_leader(acc, stream, consumer, elected, INFO_TIMEOUT)

    def _on_reply(self, sub: Any, c: Any, subject: bytes, reply: bytes | None, hdr: int, msg: bytes) -> None:
        f = self.cl._replies.pop(subject.decode(), None)
        if f is not None and not f.done():
            try:
                f.set_result(json.loads(msg[hdr:] if hdr > 0 else msg))
            except ValueError as e:
                f.set_exception(e)

    async def _ask(self, subject: str, q: dict, timeout: float = INFO_TIMEOUT) -> Optional[dict]:
        inbox = f"$JSC.R.{self.cl.peer}.{next(self.cl._req_ids)}"
        f = self.cl.loop.create_future()
        self.cl._replies[inbox] = f
        self.cl._ic.publish(subject.encode(), inbox.encode(), json.dumps(q).encode())
        self.cl.server.schedule_flush()  # (asked from a task: out now, not with the next read cycle)
        try:
            return await asyncio.wait_for(f, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self.cl._replies.pop(inbox, None)

    async def stream_info(self, account: str, name: str, timeout: float = INFO_TIMEOUT) -> Optional[dict]:
        """The stream info its leader gives (None: no leader answered)."""
        if self.cl.streams is None:
            return None
        info = self._leader_stream_info(account, name)
        if info is not None:
            return info
        return await self._ask("$JSC.SI", {"account": account, "stream": name}, timeout)

    async def consumer_info(self, account: str, stream: str, name: str,
                            timeout: float = INFO_TIMEOUT, initial: bool = False) -> Optional[dict]:
        """The consumer info its leader gives (None: no leader answered); ``initial``: for a new consumer's
        create answer, the consumer as its leader started it (ConsumerReplica.take_initial_info)."""
        if self.cl.streams is None:
            return None
        info = self._leader_consumer_info(account, stream, name, initial)
        if info is not None:
            return info
        q = {"account": account, "stream": stream, "consumer": name}
        if initial:
            q["initial"] = True
        return await self._ask("$JSC.CI", q, timeout)
