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
MAX_CONTROL_LINE = "Maximum Control Line Exceeded"
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
    """A non-negative decimal size, or -1 when the token is not one (as nats-server's parseSize)."""
    if not b or not b.isdigit() or len(b) > 18:
        return -1
    return int(b)


class ClientParser:
    __slots__ = ("handler", "max_payload", "max_control_line", "awaiting_connect", "_partial", "_need")

    def __init__(self, handler, max_payload: int = 1024 * 1024, max_control_line: int = 4096) -> None:
        self.handler = handler
        self.max_payload = max_payload
        self.max_control_line = max_control_line
        # While True, any operation other than CONNECT asks handler.proto_before_connect() first.
        self.awaiting_connect = False
        self._partial: bytearray | None = None
        self._need = 0  # >0: total bytes needed in _partial before parsing again; 0: waiting for a newline

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
                self._check_partial_line(partial)
                return
            data = bytes(partial)
            self._partial = None
            self._need = 0
        pos = self._parse(data)
        if pos < len(data):
            self._partial = bytearray(data[pos:])
            if not self._need:
                self._check_partial_line(self._partial)

    def _check_partial_line(self, partial: bytearray) -> None:
        # An endless control line: nats-server compares the argument part against max_control_line.
        if len(partial) > self.max_control_line + 8:
            self._partial = None
            raise ProtocolError(MAX_CONTROL_LINE, f"control line of {len(partial)} bytes without end",
                                "Maximum Control Line Exceeded")

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
                args = line.split()
                na = len(args)
                if (na == 3 or na == 4) and len(line) <= limit and 10 not in line and i + 1 < last:
                    sz = args[-1]
                    payload = parts[i + 1]
                    if sz.isdigit() and len(payload) == int(sz) and len(payload) <= max_payload:
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
                return self._parse_general(data, newpos, False)
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
        """Parse operations from ``pos`` (only one when ``one``); return the offset after the last one."""
        handler = self.handler
        pub = handler.proto_pub
        find = data.find
        n = len(data)
        mcl = self.max_control_line
        max_payload = self.max_payload
        awaiting = self.awaiting_connect
        while pos < n:
            nl = find(b"\n", pos)
            if nl < 0:
                # Incomplete control line: but a bad first byte is an error right away.
                if data[pos] not in _OP_START_BYTES:
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
                return pos
            end = nl - 1 if nl > pos and data[nl - 1] == _CR else nl
            c = data[pos]
            if awaiting and c != 67 and c != 99:  # not 'C'/'c'
                if not handler.proto_before_connect():
                    raise ProtocolError(AUTH_VIOLATION, "authorization violation: operation before CONNECT",
                                        "Authentication Failure")
                awaiting = self.awaiting_connect
            if c == 80 or c == 112:  # P p: PUB, PING, PONG
                args = data[pos:end].split()
                op = args[0] if args else b""
                if op == b"PUB" or op.upper() == b"PUB":
                    na = len(args)
                    if na == 3:
                        subject = args[1]
                        reply = None
                        sz = args[2]
                    elif na == 4:
                        subject = args[1]
                        reply = args[2]
                        sz = args[3]
                    else:
                        self._check_mcl(data, pos + 4, end, mcl)
                        raise ProtocolError(None, f"processPub Parse Error: {_snippet(data, pos + 4, 64)}")
                    if end - pos > mcl:
                        self._check_mcl(data, pos + 4, end, mcl)
                    if not sz.isdigit() or len(sz) > 18:
                        raise ProtocolError(None, f"processPub Bad or Missing Size: {_snippet(data, pos + 4, 64)}")
                    size = int(sz)
                    if size > max_payload:
                        raise ProtocolError(MAX_PAYLOAD_VIOLATION,
                                            f"Maximum Payload Violation: {size} vs {max_payload}",
                                            "Maximum Payload Exceeded")
                    start = nl + 1
                    stop = start + size
                    if stop + 2 > n:
                        self._need = stop + 2 - pos
                        return pos
                    if data[stop] != _CR or data[stop + 1] != _LF:
                        raise ProtocolError(UNKNOWN_OP, f"parser ERROR after payload: {_snippet(data, stop)}")
                    pub(subject, reply, data[start:stop])
                    pos = stop + 2
                    if one:
                        return pos
                    continue
                word = data[pos:end].strip().upper()
                if word == b"PING":
                    handler.proto_ping()
                elif word == b"PONG":
                    handler.proto_pong()
                else:
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
                pos = nl + 1
                if one:
                    return pos
                continue
            if c == 72 or c == 104:  # H h: HPUB
                if data[pos:pos + 4].upper() != b"HPUB" or data[pos + 4] not in (32, 9):
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
                if end - pos - 5 > mcl:
                    self._check_mcl(data, pos + 5, end, mcl)
                args = data[pos + 5:end].split()
                na = len(args)
                if na == 3:
                    subject = args[0]
                    reply = None
                    hdr = _parse_size(args[1])
                    size = _parse_size(args[2])
                elif na == 4:
                    subject = args[0]
                    reply = args[1]
                    hdr = _parse_size(args[2])
                    size = _parse_size(args[3])
                else:
                    raise ProtocolError(None, f"processHeaderPub Parse Error: {_snippet(data, pos + 5, 64)}")
                if hdr < 0:
                    raise ProtocolError(None, f"processHeaderPub Bad or Missing Header Size: "
                                              f"{_snippet(data, pos + 5, 64)}")
                if size < 0:
                    raise ProtocolError(None, f"processHeaderPub Bad or Missing Total Size: "
                                              f"{_snippet(data, pos + 5, 64)}")
                if hdr > size:
                    raise ProtocolError(None, f"processHeaderPub Header Size larger then TotalSize: "
                                              f"{_snippet(data, pos + 5, 64)}")
                if size > max_payload:
                    raise ProtocolError(MAX_PAYLOAD_VIOLATION,
                                        f"Maximum Payload Violation: {size} vs {max_payload}",
                                        "Maximum Payload Exceeded")
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._need = stop + 2 - pos
                    return pos
                if data[stop] != _CR or data[stop + 1] != _LF:
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR after payload: {_snippet(data, stop)}")
                handler.proto_hpub(subject, reply, hdr, data[start:stop])
                pos = stop + 2
                if one:
                    return pos
                continue
            if c == 83 or c == 115:  # S s: SUB
                if data[pos:pos + 3].upper() != b"SUB" or data[pos + 3] not in (32, 9):
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
                self._check_mcl(data, pos + 4, end, mcl)
                args = data[pos + 4:end].split()
                na = len(args)
                if na == 2:
                    handler.proto_sub(args[0], None, args[1])
                elif na == 3:
                    handler.proto_sub(args[0], args[1], args[2])
                else:
                    raise ProtocolError(None, f"processSub Parse Error: {_snippet(data, pos + 4, 64)}")
                pos = nl + 1
                if one:
                    return pos
                continue
            if c == 85 or c == 117:  # U u: UNSUB
                if data[pos:pos + 5].upper() != b"UNSUB" or data[pos + 5] not in (32, 9):
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
                self._check_mcl(data, pos + 6, end, mcl)
                args = data[pos + 6:end].split()
                na = len(args)
                if na == 1:
                    handler.proto_unsub(args[0], 0)
                elif na == 2:
                    mx = _parse_size(args[1])
                    if mx < 0:
                        raise ProtocolError(None, f"processUnsub Bad or Missing Max: {_snippet(data, pos + 6)}")
                    handler.proto_unsub(args[0], mx)
                else:
                    raise ProtocolError(None, f"processUnsub Parse Error: {_snippet(data, pos + 6, 64)}")
                pos = nl + 1
                if one:
                    return pos
                continue
            if c == 67 or c == 99:  # C c: CONNECT
                if data[pos:pos + 7].upper() != b"CONNECT" or data[pos + 7] not in (32, 9):
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
                self._check_mcl(data, pos + 8, end, mcl)
                handler.proto_connect(data[pos + 8:end].strip())
                pos = nl + 1
                # The handler may have changed limits (e.g. a per-user max_payload).
                mcl = self.max_control_line
                max_payload = self.max_payload
                awaiting = self.awaiting_connect
                if one:
                    return pos
                continue
            if c == 73 or c == 105:  # I i: INFO
                if data[pos:pos + 4].upper() != b"INFO" or data[pos + 4] not in (32, 9):
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
                self._check_mcl(data, pos + 5, end, mcl)
                handler.proto_info(data[pos + 5:end].strip())
                pos = nl + 1
                if one:
                    return pos
                continue
            if c == 43:  # +OK
                if data[pos:end].upper() != b"+OK":
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
                handler.proto_ok()
                pos = nl + 1
                if one:
                    return pos
                continue
            if c == 45:  # -ERR
                if data[pos:pos + 4].upper() != b"-ERR":
                    raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
                handler.proto_err(data[pos + 4:end].strip())
                pos = nl + 1
                if one:
                    return pos
                continue
            raise ProtocolError(UNKNOWN_OP, f"parser ERROR at {_snippet(data, pos)}")
        return pos

    @staticmethod
    def _check_mcl(data: bytes, start: int, end: int, mcl: int) -> None:
        if end - start > mcl:
            raise ProtocolError(MAX_CONTROL_LINE, f"max_control_line {mcl}, line length {end - start}",
                                "Maximum Control Line Exceeded")


_OP_START_BYTES = frozenset(b"PpHhSsUuCcIi+-")
