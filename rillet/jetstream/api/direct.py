"""MSG.GET, MSG.DELETE and DIRECT.GET (a mixin of ApiRouter)."""
from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING, Any


from rillet.gocompat.gotime import format_time
from rillet.gocompat.gotime import NS, go_unix_nano, parse_time
from rillet.gocompat import jsoncodec as _codec
from rillet.jetstream.api import types as A
from rillet.jetstream import headers as H
from rillet.jetstream.errors import ApiError
from rillet.jetstream.store import ErrTooManyResults
from rillet.jetstream.store.base import ErrStoreCorrupt
from rillet.jetstream.stream import Stream
from rillet import lane
from rillet.subjects.validate import subject_has_wildcard

if TYPE_CHECKING:
    pass

from rillet.jetstream.api.common import (T, NOT_COUNTED, is_empty_request, _api_level_too_high)

def _or_none(load: Any, *args: Any) -> Any:
    """A store read for a get: a message whose record is damaged (the store reports it lost, a replicated
    stream fetches it again) is answered as a missing one, as nats-server answers a read its store fails."""
    try:
        return load(*args)
    except ErrStoreCorrupt:
        return None


_MAX_MULTI_RESULTS = 1024  # subjects one multi_last request may match (413 Too Many Results beyond)


def stored_message_json(m: Any, no_hdr: bool = False) -> dict[str, Any]:
    """A stored message as STREAM.MSG.GET answers it (``message``: subject, seq, base64 headers unless
    ``no_hdr``, base64 data when there is any, time)."""
    d: dict[str, Any] = {"subject": m.subject, "seq": m.seq}
    if m.hdr and not no_hdr:
        d["hdrs"] = base64.b64encode(m.hdr).decode()
    if m.data:
        d["data"] = base64.b64encode(m.data).decode()
    d["time"] = format_time(m.ts)
    return d


class DirectApi:
    # ---- messages ---------------------------------------------------------------------------------

    @staticmethod
    def _check_get(req: A.JSApiMsgGetRequest) -> None:
        """A MSG.GET request nats-server refuses (before it looks for the stream): no batches here, a
        sequence, a subject or a start time needed, and the sequence, the last for a subject and a start
        time exclude each other."""
        seq, last, nxt, start = req.seq, req.last_by_subj, req.next_by_subj, req.start_time
        if (req.batch > 0 or req.max_bytes > 0 or (seq and start is not None) or (last and start is not None)
                or (last and (seq or nxt)) or not (seq or last or nxt or start is not None)):
            raise ApiError.make("BAD_REQUEST")

    def _get(self, stream: Stream, req: A.JSApiMsgGetRequest) -> Any:
        """The message a (checked) MSG.GET request names (None if there is none)."""
        store = stream.store
        seq, last, nxt = req.seq, req.last_by_subj, req.next_by_subj
        if req.start_time is not None:
            seq = store.get_seq_from_time(parse_time(req.start_time)[0])
        if last:
            return _or_none(store.load_last_msg, last)
        if nxt:
            return _or_none(store.load_next_msg, nxt, max(seq, 1), subject_has_wildcard(nxt))
        if seq <= 0:
            return None
        return _or_none(store.load_msg, seq)

    def msg_get(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> object:
        typ = T + "stream_msg_get_response"
        if is_empty_request(body):
            raise ApiError.make("BAD_REQUEST")
        req = self.decode(body, A.JSApiMsgGetRequest)  # (before the stream is looked up, as nats-server)
        self._check_get(req)
        stream = self.stream(args[0] if args else "")
        m = self._get(stream, req)
        if m is None:
            raise ApiError.make("NO_MESSAGE_FOUND")
        self.respond(reply, {"type": typ, "message": stored_message_json(m, req.no_hdr)})
        return NOT_COUNTED  # nats-server answers a found message outside its API accounting

    def msg_delete(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        typ = T + "stream_msg_delete_response"
        if is_empty_request(body):
            raise ApiError.make("BAD_REQUEST")
        req = self.decode(body, A.JSApiMsgDeleteRequest)  # (before the stream is looked up, as nats-server)
        stream = self.stream(args[0] if args else "")
        if stream.cfg.sealed:
            raise ApiError.make("STREAM_SEALED")
        if stream.cfg.deny_delete:
            raise ApiError.make("STREAM_MSG_DELETE_FAILED", err="message delete not permitted")
        seq = req.seq
        if not seq:  # (nats-server: the store finds no message 0)
            raise ApiError.make("STREAM_MSG_DELETE_FAILED", err="no message found")

        def done(ok: Any, err: BaseException | None) -> None:
            if err is None and not ok:
                err = ApiError.make("STREAM_MSG_DELETE_FAILED", err="no message found")
            if err is not None:
                self._entry_failed(reply, typ, err)
            else:
                self.respond(reply, {"type": typ, "success": True})

        stream.delete_msg(seq, not req.no_erase, done)

    def on_direct_get(self, stream: Stream, sub: Any, subject: bytes, reply: bytes | None, hdr: int,
                      msg: bytes) -> None:
        """A request on one of ``stream``'s direct get subscriptions (``Stream.on_direct_get``). The common
        request, ``DIRECT.GET.<stream>`` with ``{"seq":N}`` and no headers, is answered here as
        ``direct_get`` answers it, without its general steps (the subject's tokens, the request object, the
        batch loop); anything else goes to ``direct_get``."""
        if hdr < 0 and reply and sub is not None and sub.subject[-1] != ">":  # (DIRECT.GET.<stream> exactly)
            st = self.jsa.streams.get(stream.name)
            m = _SEQ_ONLY(msg)
            if st is not None and m is not None:
                if not (st.cfg.allow_direct or st.cfg.mirror_direct):
                    return  # no responder (as direct_get)
                seq = int(m.group(1))
                if not seq:
                    self._status(reply, 408, "Empty Request")
                    return
                found = _or_none(st.store.load_msg, seq)
                if found is None:
                    self._status(reply, 404, "Message Not Found")
                else:
                    self._direct_reply(st, reply, found)
                return
        toks = subject.decode("utf-8", "surrogateescape").split(".")
        i = toks.index("GET")
        args = [stream.name] + toks[i + 2:]
        hdr_b, body = (msg[:hdr], msg[hdr:]) if hdr >= 0 else (b"", msg)
        self.direct_get(args, reply, hdr_b, body)

    def direct_get(self, args: list[str], reply: bytes | None, hdr: bytes, body: bytes) -> None:
        """DIRECT.GET.<stream> (request body) and DIRECT.GET.<stream>.<subject...> (last for subject).

        Answers are messages with the stored headers plus Nats-Stream/Subject/Sequence/Time-Stamp, or a
        status with nats-server's code and text: 408 Empty Request / Malformed Request / Bad Request,
        404 Message Not Found (No Results for multi_last), 412 Required Api Level, 413 Too Many Results.
        """
        if not args or not reply:
            return
        stream = self.jsa.streams.get(args[0])
        if stream is None or not (stream.cfg.allow_direct or stream.cfg.mirror_direct):
            return  # no responder, as nats-server (direct gets are only served when allowed)
        if hdr and _api_level_too_high(hdr):
            self._status(reply, 412, "Required Api Level")
            return
        if len(args) > 1:  # the subject names the message: a body may only add no_hdr / max_bytes
            req = _DirectReq.parse(body) if body else _DirectReq()
            if req is None:
                self._status(reply, 408, "Malformed Request")
                return
            if (req.last or req.next or req.multi or req.seq or req.batch or req.start is not None
                    or req.up_to_seq or req.up_to_time is not None):
                self._status(reply, 408, "Bad Request")
                return
            req.last = ".".join(args[1:])
            self._direct_serve(stream, reply, req)
            return
        if not body:
            self._status(reply, 408, "Empty Request")
            return
        m = _SEQ_ONLY(body)
        if m is not None:  # {"seq":N}, the common request: what the full decode gives, without it
            req = _DirectReq()
            req.seq = int(m.group(1))
        else:
            req = _DirectReq.parse(body)
        if req is None:
            self._status(reply, 408, "Malformed Request")
            return
        if not (req.seq or req.last or req.next or req.multi or req.start is not None):
            self._status(reply, 408, "Empty Request")
            return
        if ((req.seq and (req.last or req.start is not None)) or (req.start is not None and req.last)
                or (req.last and (req.next or req.batch or req.multi)) or (req.next and req.multi)
                or (req.up_to_seq and req.up_to_time is not None)):
            self._status(reply, 408, "Bad Request")
            return
        self._direct_serve(stream, reply, req)

    def _status(self, reply: bytes, code: int, desc: str, extra: list[tuple[str, str]] | None = None) -> None:
        hdr = H.make_headers(extra or [], status=code, desc=desc)
        self.jsa.ic.publish(reply, None, hdr, len(hdr))

    def _direct_reply(self, stream: Stream, reply: bytes, m: Any, extra: list[tuple[str, str]] | None = None,
                      no_hdr: bool = False) -> None:
        """One stored message as a direct get answer: its own headers, then the stream's (appended, as
        nats-server does, even when the stored message already has such a header)."""
        if no_hdr:
            self.jsa.ic.publish(reply, None, m.data)
            return
        if not extra:  # (append_headers' bytes for these four, written out)
            tail = b"Nats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n\r\n" % (
                stream.name.encode("utf-8", "surrogateescape"), m.subject.encode("utf-8", "surrogateescape"), m.seq,
                _time_stamp(m.ts))
            h = m.hdr
            hdr = h[:-2] + tail if len(h) > 2 else H.HDR_LINE + tail
            self.jsa.ic.publish(reply, None, hdr + m.data, len(hdr))
            return
        pairs = [(H.STREAM, stream.name), (H.SUBJECT, m.subject), (H.SEQUENCE, str(m.seq)),
                 (H.TIMESTAMP, format_time(m.ts))]
        if extra:
            pairs.extend(extra)
        hdr = H.append_headers(m.hdr, pairs)
        self.jsa.ic.publish(reply, None, hdr + m.data, len(hdr))

    def _direct_serve(self, stream: Stream, reply: bytes, req: "_DirectReq") -> None:
        """One message, or a batch (``batch``) ending with a 204 EOB status. In a batch each message's
        Nats-Num-Pending counts what still matches after it (one count for the batch, then decremented)
        and Nats-Last-Sequence is the sequence of the message before it in the batch."""
        if req.multi:
            self._direct_multi(stream, reply, req)
            return
        store = stream.store
        seq = store.get_seq_from_time(req.start) if req.start is not None else req.seq
        nxt = req.next
        wc = subject_has_wildcard(nxt) if nxt else False
        is_batch = req.batch != 0
        batch = req.batch if is_batch else 1
        np = store.num_pending(seq, nxt, False)[0] if is_batch else 0
        mb = req.max_bytes or self.js.server.opts.max_pending
        sent_bytes = 0
        lseq = 0
        for i in range(batch):
            if seq > 0 and not nxt:
                m = (_or_none(store.load_msg, seq) if i == 0 and not is_batch
                     else _or_none(store.load_next_msg, ">", seq, False))
            elif nxt:
                m = _or_none(store.load_next_msg, nxt, seq, wc)
            else:
                m = _or_none(store.load_last_msg, req.last)
            if m is None:
                if batch > 1 and i > 0:
                    break  # a batch that ran out: the EOB below
                self._status(reply, 404, "Message Not Found")
                return
            seq = m.seq + 1
            if is_batch:
                if np > 0 and not req.no_hdr:  # (nats-server counts down only the answers with headers)
                    np -= 1
                self._direct_reply(stream, reply, m, [(H.NUM_PENDING, str(np)), (H.LAST_SEQUENCE, str(lseq))],
                                   req.no_hdr)
            else:
                self._direct_reply(stream, reply, m, no_hdr=req.no_hdr)
            lseq = m.seq
            sent_bytes += len(m.subject) + len(m.hdr) + len(m.data)
            if sent_bytes >= mb:
                break
        if is_batch:
            hdr = H.make_headers([(H.NUM_PENDING, str(np)), (H.LAST_SEQUENCE, str(lseq))], 204, "EOB")
            self.jsa.ic.publish(reply, None, hdr, len(hdr))

    def _direct_multi(self, stream: Stream, reply: bytes, req: "_DirectReq") -> None:
        """multi_last: the last message of each subject matching the filters (at or below up_to_seq or
        before up_to_time), in sequence order, skipping those below ``seq``; then an EOB status that also
        carries the upper bound. Nats-Num-Pending counts the matches after each message."""
        store = stream.store
        up_to = req.up_to_seq
        if req.up_to_time is not None:
            up_to = store.get_seq_from_time(req.up_to_time)
            if up_to <= store.state().first_seq:
                self._status(reply, 404, "No Results")
                return
            up_to -= 1  # the first message at or after the time is excluded
        if not up_to:
            up_to = store.state().last_seq
        # an empty filter matches no subject here (nats-server's subject tree matches nothing for it), while
        # the store reads an empty filter as "all": drop them, and answer No Results when none is left
        filters = [f for f in req.multi if f]
        try:
            seqs = store.multi_last_seqs(filters, up_to, _MAX_MULTI_RESULTS) if up_to and filters else []
        except ErrTooManyResults:
            self._status(reply, 413, "Too Many Results")
            return
        if not seqs:
            self._status(reply, 404, "No Results")
            return
        mb = req.max_bytes or self.js.server.opts.max_pending
        np = len(seqs)
        lseq = sent = sent_bytes = 0
        for s in seqs:
            np -= 1
            if s < req.seq:
                continue
            m = _or_none(store.load_msg, s)
            if m is None:
                self._status(reply, 404, "Message Not Found")
                return
            self._direct_reply(stream, reply, m, [(H.NUM_PENDING, str(np)), (H.LAST_SEQUENCE, str(lseq))])
            lseq = s
            sent_bytes += len(m.subject) + len(m.hdr) + len(m.data)
            if sent_bytes >= mb:
                break
            sent += 1
            if 0 < req.batch <= sent:
                break
        hdr = H.make_headers([(H.NUM_PENDING, str(np)), (H.LAST_SEQUENCE, str(lseq)),
                              (H.UP_TO_SEQUENCE, str(up_to))], 204, "EOB")
        self.jsa.ic.publish(reply, None, hdr, len(hdr))

_STAMP_SECS: dict[int, bytes] = {}  # whole seconds since the epoch -> their RFC 3339 text without the "Z"


def _time_stamp(ns: int) -> bytes:
    """``format_time(ns).encode()`` (Nats-Time-Stamp), with the text of the whole second kept: messages stored
    in the same second (most of those read one after another) share it, and only the fraction is written."""
    secs, frac = divmod(ns, NS)
    p = _STAMP_SECS.get(secs)
    if p is None:
        if secs <= 0:  # (the zero time and before the epoch: as format_time, not kept)
            return format_time(ns).encode()
        if len(_STAMP_SECS) >= 4096:
            _STAMP_SECS.clear()
        p = _STAMP_SECS[secs] = format_time(secs * NS)[:-1].encode()
    if not frac:
        return p + b"Z"
    return b"%s.%sZ" % (p, (b"%09d" % frac).rstrip(b"0"))


# a direct get body that is only a sequence (JSON whitespace allowed; at most 19 digits: always a uint64)
_SEQ_ONLY = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"seq"[ \t\n\r]*:[ \t\n\r]*(0|[1-9][0-9]{0,18})[ \t\n\r]*\}[ \t\n\r]*').fullmatch


class _DirectReq:
    """A direct get request body, decoded with the type rules nats-server's JSON decoder applies (an
    unsigned sequence, integer counts, RFC 3339 times, a list of strings; field names matched without
    regard to case; unknown fields ignored). ``parse`` returns None for what it refuses."""

    __slots__ = ("seq", "last", "next", "batch", "max_bytes", "start", "multi", "up_to_seq", "up_to_time",
                 "no_hdr")

    def __init__(self) -> None:
        self.seq = 0
        self.last = ""
        self.next = ""
        self.batch = 0
        self.max_bytes = 0
        self.start: int | None = None  # ns since the epoch
        self.multi: list[str] = []
        self.up_to_seq = 0
        self.up_to_time: int | None = None
        self.no_hdr = False

    @classmethod
    def parse(cls, body: bytes) -> "_DirectReq | None":
        try:  # (as nats-server's plain json.Unmarshal: unknown fields ignored)
            d = _codec.go_unmarshal(body, A.JSApiMsgGetRequest)
        except _codec.GoJSONError:
            return None
        req = cls()
        req.seq, req.last, req.next = d.seq, d.last_by_subj, d.next_by_subj
        req.batch, req.max_bytes, req.up_to_seq, req.no_hdr = d.batch, d.max_bytes, d.up_to_seq, d.no_hdr
        req.multi = list(d.multi_last or ())
        # (as nats-server compares them: Go's UnixNano, wrapped to 64 bits past the year 2262)
        if d.start_time is not None:
            req.start = go_unix_nano(parse_time(d.start_time)[0])
        if d.up_to_time is not None:
            req.up_to_time = go_unix_nano(parse_time(d.up_to_time)[0])
        return req



# the handler of a stream's direct get subscriptions: ``reference_on_direct_get`` (DirectApi.on_direct_get as written
# above, the pure-Python lane's) or, in the compiled lane, its twin rillet._speedups._cjs.direct_on_get (the short
# path, {"seq":N} on DIRECT.GET.<stream>, in C; the rest to the reference)
reference_on_direct_get = DirectApi.on_direct_get
lane.use_compiled_methods(DirectApi, "rillet._speedups._cjs", on_direct_get="direct_on_get")
