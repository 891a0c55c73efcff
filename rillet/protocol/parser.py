"""Sans-IO parser for the NATS client protocol (what a client sends to the server).

Bytes go in through ``feed``; each complete operation becomes one call on a handler object:

    proto_connect(arg: bytes)
    proto_pub(subject: bytes, reply: bytes | None, payload: bytes)
    proto_hpub(subject: bytes, reply: bytes | None, hdr_len: int, msg: bytes)   # msg = headers + payload
    proto_sub(subject: bytes, queue: bytes | None, sid: bytes)
    proto_unsub(sid: bytes, max_msgs: int)      # 0 = unsubscribe now
    proto_ping(), proto_pong(), proto_info(arg), proto_ok(), proto_err(arg)
    proto_before_connect() -> bool              # an op other than CONNECT arrived while awaiting CONNECT

Protocol errors raise ``ProtocolError``; its ``client_error`` is the text for ``-ERR '...'`` (or None when
nats-server closes the connection without one), ``reason`` names the close reason for logs and /connz.

The parser works on whole buffers with ``find`` and slicing: a read that holds many messages is parsed in
one pass with no per-byte Python loop. A trailing partial operation is kept and completed by later reads.
"""
from __future__ import annotations

__all__ = ["ClientParser", "ProtocolError", "UNKNOWN_OP", "MAX_PAYLOAD_VIOLATION", "MAX_CONTROL_LINE"]

UNKNOWN_OP = "Unknown Protocol Operation"
MAX_PAYLOAD_VIOLATION = "Maximum Payload Violation"
MAX_CONTROL_LINE = "maximum control line exceeded"  # nats-server sends it in lower case
AUTH_VIOLATION = "Authorization Violation"

_CR = 13
_LF = 10


class ProtocolError(Exception):
    """A fatal protocol error: the connection is closed after sending ``client_error`` (when set)."""

    def __init__(self, client_error: str | None, detail: str, reason: str = "Protocol Violation") -> None:
        super().__init__(detail)
        self.client_error = client_error
        self.detail = detail
        self.reason = reason


def _snippet(data: bytes, start: int, size: int = 32) -> str:
    return repr(bytes(data[start:start + size]))


def _parse_size(b: bytes) -> int:
    """A non-negative decimal size of at most 9 digits, or -1 when the token is not one (as nats-server)."""
    if not b or not b.isdigit() or len(b) > 9:
        return -1
    return int(b)


class BufferedParser:
    """What the client parser and the inter-server parser (rillet.cluster.protocol) share: the bytes of an
    operation cut by a read wait in ``_partial`` until the rest (``_need`` bytes, or a newline) arrives.
    A subclass provides ``_parse(data) -> offset of the first unparsed byte`` and ``_check_incomplete``."""
    __slots__ = ("_partial", "_need")

    def pending_bytes(self) -> int:
        return len(self._partial) if self._partial is not None else 0

    def feed(self, data: bytes) -> None:
        partial = self._partial
        if partial is not None:
            partial += data
            if self._need:
                if len(partial) < self._need:
                    return
            elif data.find(b"\n") < 0:
                self._check_incomplete(partial, 0, len(partial))
                return
            data = bytes(partial)
            self._partial = None
            self._need = 0
        pos = self._parse(data)
        if pos < len(data):
            self._partial = bytearray(data[pos:])


class ClientParser(BufferedParser):
    __slots__ = ("handler", "max_payload", "max_control_line", "awaiting_connect", "headers")

    def __init__(self, handler, max_payload: int = 1024 * 1024, max_control_line: int = 4096) -> None:
        self.handler = handler
        self.max_payload = max_payload
        self.max_control_line = max_control_line
        # While True, any operation other than CONNECT asks handler.proto_before_connect() first.
        self.awaiting_connect = False
        # False: HPUB closes the connection (a server connection sets this from CONNECT's "headers")
        self.headers = True
        self._partial: bytearray | None = None
        self._need = 0  # >0: total bytes needed in _partial before parsing again; 0: waiting for a newline

    def resume(self, more: bytes = b"") -> None:
        """Parse what was left after a CONNECT that suspended parsing, followed by ``more``."""
        data = bytes(self._partial or b"") + more
        self._partial = None
        self._need = 0
        if data:
            self.feed(data)

    def _parse(self, data: bytes) -> int:
        """Parse complete operations from ``data``; return the offset of the first unparsed byte.

        Fast path: split the buffer at every CRLF once (one C call), then walk the pieces. A PUB whose
        payload holds no CRLF is a control-line piece followed by a payload piece of exactly the announced
        size; PING and PONG are single pieces. Anything else (SUB, CONNECT, HPUB, payloads containing CRLF,
        odd spacing, errors, an incomplete tail) goes through the general parser for one operation, and the
        walk resynchronises on the piece where that operation ended.
        """
        parts = data.split(b"\r\n")
        last = len(parts) - 1  # parts[last] follows the final CRLF: possibly an incomplete operation
        i = 0
        pos = 0
        handler = self.handler
        pub = handler.proto_pub
        limit = self.max_control_line + 4
        max_payload = self.max_payload
        if self.awaiting_connect:
            last = 0  # until CONNECT: everything through the general parser (it checks each operation)
        while i < last:
            line = parts[i]
            if line[:4] == b"PUB ":
                args = line.split(b" ")
                na = len(args)
                if (na == 3 or na == 4) and len(line) <= limit and i + 1 < last and 9 not in line \
                        and 10 not in line and args[1] and args[-2]:
                    sz = args[-1]
                    payload = parts[i + 1]
                    if sz.isdigit() and len(payload) == int(sz) and len(payload) <= max_payload and len(sz) < 10:
                        pub(args[1], args[2] if na == 4 else None, payload)
                        pos += len(line) + len(payload) + 4
                        i += 2
                        continue
            elif line == b"PING":
                handler.proto_ping()
                pos += 6
                i += 1
                continue
            elif line == b"PONG":
                handler.proto_pong()
                pos += 6
                i += 1
                continue
            # the general parser, for exactly one operation
            newpos = self._parse_general(data, pos, True)
            if newpos == pos:
                return pos  # incomplete: wait for more data
            limit = self.max_control_line + 4
            max_payload = self.max_payload
            if self.awaiting_connect:
                return newpos  # a CONNECT that waits for the auth callout: the rest waits for resume()
            while i < last and pos < newpos:
                pos += len(parts[i]) + 2
                i += 1
            if pos != newpos:
                # the operation ended on a bare LF inside a piece: finish with the general parser
                return self._parse_general(data, newpos, False)
        if pos < len(data):
            return self._parse_general(data, pos, False)
        return pos

    def _parse_general(self, data: bytes, pos: int, one: bool) -> int:
        """Parse operations from ``pos`` (only one when ``one``); return the offset after the last one.

        Mirrors nats-server's byte-by-byte state machine on whole lines: op names are case-insensitive;
        PUB, HPUB, SUB, UNSUB and -ERR need a space or tab after the name, CONNECT and INFO do not; PING,
        PONG and +OK ignore the rest of their line; arguments are separated by spaces and tabs only; a
        control line may end in LF alone, a payload must be followed by CRLF.
        """
        handler = self.handler
        find = data.find
        n = len(data)
        while pos < n:
            nl = find(b"\n", pos)
            if nl < 0:
                self._check_incomplete(data, pos, n)
                return pos
            end = nl - 1 if nl > pos and data[nl - 1] == _CR else nl
            c = data[pos]
            if self.awaiting_connect and c != 67 and c != 99:  # not 'C'/'c'
                if not handler.proto_before_connect():
                    raise ProtocolError(AUTH_VIOLATION, "authorization violation: operation before CONNECT",
                                        "Authentication Failure")
            op = _op_at(data, pos, end)
            if op == _PUB:
                args = self._args(data, pos + 4, end)
                na = len(args)
                if na == 2:
                    subject, reply, size = args[0], None, _parse_size(args[1])
                elif na == 3:
                    subject, reply, size = args[0], args[1], _parse_size(args[2])
                else:
                    raise ProtocolError(None, f"processPub Parse Error: {_snippet(data, pos + 4, 64)}")
                if size < 0:
                    raise ProtocolError(None, f"processPub Bad or Missing Size: {_snippet(data, pos + 4, 64)}")
                if size > self.max_payload:
                    raise ProtocolError(MAX_PAYLOAD_VIOLATION,
                                        f"Maximum Payload Violation: {size} vs {self.max_payload}",
                                        "Maximum Message Payload Exceeded")
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._need = stop + 2 - pos
                    return pos
                if data[stop] != _CR or data[stop + 1] != _LF:
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR after payload: {_snippet(data, stop)}")
                handler.proto_pub(subject, reply, data[start:stop])
                pos = stop + 2
            elif op == _HPUB:
                if not self.headers:
                    raise ProtocolError(None, "message headers not supported", "Protocol Violation")
                args = self._args(data, pos + 5, end)
                na = len(args)
                if na == 3:
                    subject, reply = args[0], None
                elif na == 4:
                    subject, reply = args[0], args[1]
                else:
                    raise ProtocolError(None, f"processHeaderPub Parse Error: {_snippet(data, pos + 5, 64)}")
                hdr = _parse_size(args[-2])
                size = _parse_size(args[-1])
                if hdr < 0:
                    raise ProtocolError(None, f"processHeaderPub Bad or Missing Header Size: "
                                              f"{_snippet(data, pos + 5, 64)}")
                if size < 0:
                    raise ProtocolError(None, f"processHeaderPub Bad or Missing Total Size: "
                                              f"{_snippet(data, pos + 5, 64)}")
                if hdr > size:
                    raise ProtocolError(None, f"processHeaderPub Header Size larger then TotalSize: "
                                              f"{_snippet(data, pos + 5, 64)}")
                if size > self.max_payload:
                    if hdr > 0 and nl + 1 < n and hasattr(handler, "hpub_too_big"):  # (a trace event: msgtrace)
                        handler.hpub_too_big(subject, data[nl + 1:nl + 1 + hdr], size)
                    raise ProtocolError(MAX_PAYLOAD_VIOLATION,
                                        f"Maximum Payload Violation: {size} vs {self.max_payload}",
                                        "Maximum Message Payload Exceeded")
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._need = stop + 2 - pos
                    return pos
                if data[stop] != _CR or data[stop + 1] != _LF:
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR after payload: {_snippet(data, stop)}")
                handler.proto_hpub(subject, reply, hdr, data[start:stop])
                pos = stop + 2
            elif op == _PING:
                handler.proto_ping()
                pos = nl + 1
            elif op == _PONG:
                handler.proto_pong()
                pos = nl + 1
            elif op == _SUB:
                args = self._args(data, pos + 4, end)
                na = len(args)
                if na == 2:
                    handler.proto_sub(args[0], None, args[1])
                elif na == 3:
                    handler.proto_sub(args[0], args[1], args[2])
                else:
                    raise ProtocolError(None, f"processSub Parse Error: {_snippet(data, pos + 4, 64)}")
                pos = nl + 1
            elif op == _UNSUB:
                args = self._args(data, pos + 6, end)
                na = len(args)
                if na == 1:
                    handler.proto_unsub(args[0], 0)
                elif na == 2:
                    # a max that is not a number removes the subscription now, as nats-server does
                    handler.proto_unsub(args[0], max(_parse_size(args[1]), 0))
                else:
                    raise ProtocolError(None, f"processUnsub Parse Error: {_snippet(data, pos + 6, 64)}")
                pos = nl + 1
            elif op == _CONNECT:
                handler.proto_connect(self._arg(data, pos + 7, end).rstrip(b" \t"))
                pos = nl + 1
                if self.awaiting_connect:
                    return pos  # CONNECT is not decided yet (auth callout): the rest waits for resume()
            elif op == _INFO:
                handler.proto_info(self._arg(data, pos + 4, end).rstrip(b" \t"))
                pos = nl + 1
            elif op == _OK:
                handler.proto_ok()
                pos = nl + 1
            elif op == _ERR:
                handler.proto_err(self._arg(data, pos + 5, end))
                pos = nl + 1
            else:
                raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
            if one:
                return pos
        return pos

    def _arg(self, data: bytes, start: int, end: int) -> bytes:
        """The argument of an operation: blanks after the op name skipped, checked against max_control_line."""
        while start < end and (data[start] == 32 or data[start] == 9):
            start += 1
        if end - start > self.max_control_line:
            raise ProtocolError(MAX_CONTROL_LINE, f"max_control_line {self.max_control_line}, "
                                                  f"argument length {end - start}", "Maximum Control Line Exceeded")
        return data[start:end]

    def _args(self, data: bytes, start: int, end: int) -> list[bytes]:
        """Arguments separated by spaces and tabs only (not the other ASCII whitespace ``split()`` knows)."""
        arg = self._arg(data, start, end)
        if 9 in arg:
            arg = arg.replace(b"\t", b" ")
        return [a for a in arg.split(b" ") if a]

    def _check_incomplete(self, data: bytes | bytearray, pos: int, n: int) -> None:
        """A control line without its end yet: a wrong op name fails now, an endless line fails at the limit."""
        seg = bytes(data[pos:pos + 9])
        if not _op_prefix_ok(seg):
            raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
        start = pos
        while start < n and data[start] not in (32, 9):
            start += 1
        while start < n and (data[start] == 32 or data[start] == 9):
            start += 1
        if n - start > self.max_control_line or n - pos > self.max_control_line + 32:
            self._partial = None
            raise ProtocolError(MAX_CONTROL_LINE, f"control line of {n - pos} bytes without end",
                                "Maximum Control Line Exceeded")


_PUB, _HPUB, _SUB, _UNSUB, _PING, _PONG, _CONNECT, _INFO, _OK, _ERR, _BAD = range(11)

# op name -> (code, needs a space or tab after the name)
_OPS: dict[bytes, tuple[int, bool]] = {
    b"PUB": (_PUB, True), b"HPUB": (_HPUB, True), b"SUB": (_SUB, True), b"UNSUB": (_UNSUB, True),
    b"PING": (_PING, False), b"PONG": (_PONG, False), b"CONNECT": (_CONNECT, False), b"INFO": (_INFO, False),
    b"+OK": (_OK, False), b"-ERR": (_ERR, True),
}


def _op_at(data: bytes, pos: int, end: int) -> int:
    """Which operation the control line data[pos:end] holds (_BAD if none)."""
    c = data[pos]
    if c == 80 or c == 112:  # P
        names = (b"PUB", b"PING", b"PONG")
    elif c == 72 or c == 104:
        names = (b"HPUB",)
    elif c == 83 or c == 115:
        names = (b"SUB",)
    elif c == 85 or c == 117:
        names = (b"UNSUB",)
    elif c == 67 or c == 99:
        names = (b"CONNECT",)
    elif c == 73 or c == 105:
        names = (b"INFO",)
    elif c == 43:
        names = (b"+OK",)
    elif c == 45:
        names = (b"-ERR",)
    else:
        return _BAD
    for name in names:
        k = len(name)
        if data[pos:pos + k].upper() == name:
            code, needs_sep = _OPS[name]
            if needs_sep and (pos + k >= end or data[pos + k] not in (32, 9)):
                return _BAD
            return code
    return _BAD


def _op_prefix_ok(seg: bytes) -> bool:
    """Could ``seg`` (the first bytes of an unfinished control line) still become a valid operation?"""
    u = seg.upper()
    for name, (_, needs_sep) in _OPS.items():
        k = len(name)
        if len(u) <= k:
            if name.startswith(u):
                return True
        elif u.startswith(name) and (not needs_sep or u[k] in (32, 9)):
            return True
    return False

