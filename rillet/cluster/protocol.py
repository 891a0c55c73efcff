"""Sans-IO parser and encoders for nats-server's server-to-server protocols: routes, gateways, leaf nodes.

One ``ServerParser`` per connection, created with the connection's kind (``ROUTE``, ``GATEWAY`` or
``LEAF``). Bytes go in through ``feed``; each complete operation becomes one call on a handler object.
Arguments are ``bytes`` (slices of the input), ``reply`` is None when absent, ``queues`` is a tuple of
queue names (``NO_QUEUES`` when the message carries none).

Every kind::

    proto_info(arg), proto_connect(arg), proto_ping(), proto_pong(), proto_ok(), proto_err(arg)
    proto_before_connect() -> bool      # an op other than CONNECT arrived while awaiting CONNECT

ROUTE and GATEWAY::

    proto_rs_sub(account, subject, queue, weight)        # RS+ (weight: 0 for a plain sub; a bad one is -1)
    proto_rs_unsub(account, subject, queue)              # RS-
    proto_rmsg(account, subject, reply, queues, payload)                 # RMSG
    proto_hmsg(account, subject, reply, queues, hdr_len, msg)            # HMSG (msg = headers + payload)

ROUTE only (interest and messages that a leaf node of the peer's cluster originated)::

    proto_ls_sub(origin, account, subject, queue, weight)                # LS+ <origin> <account> ...
    proto_ls_unsub(origin, account, subject, queue)      # LS-; origin is None unless ``lnocu``
    proto_lmsg(origin, account, subject, reply, queues, hdr_len, msg)    # LMSG <origin> ... (always hdr)

GATEWAY only::

    proto_account_sub(account), proto_account_unsub(account)             # A+ / A-

LEAF::

    proto_leaf_sub(subject, queue, weight)               # LS+ <subject> [<queue> <weight>]
    proto_leaf_unsub(subject, queue)                     # LS- <subject> [<queue>]
    proto_leaf_msg(subject, reply, queues, payload)      # LMSG
    proto_leaf_hmsg(subject, reply, queues, hdr_len, msg)                # HMSG

On a route pinned to one account (``route_account`` in INFO, or a pooled route of a pinned account) the
account is not on the wire; the parser is created with ``account=`` and hands that name to the handler,
so handlers always see an account.

What nats-server treats as the same operation is parsed the same way here: on a route ``UNSUB`` is RS-
and ``SUB`` is read and ignored; on a gateway ``SUB``/``UNSUB`` are RS+/RS-; on a leaf connection ``RS+``,
``RS-``, ``SUB``, ``UNSUB`` are LS+/LS- and ``RMSG`` is LMSG; ``A+``/``A-`` are read and ignored on routes
and leaf connections. A gateway connection refuses ops starting with L as nats-server does. ``PUB`` and
``HPUB`` are refused on server connections (nats-server parses them; no server sends them).

Errors raise ``rillet.protocol.parser.ProtocolError`` (the client parser's), with nats-server's words:
a bad op name or bytes after a payload other than CRLF get ``-ERR 'Unknown Protocol Operation'``; bad
arguments close the connection without an -ERR (nats-server logs ``processRoutedMsgArgs Parse Error:
'[...]'`` and the like, which is ``detail`` here); a control line longer than 16 x max_control_line
(nats-server's allowance for server connections) gets ``-ERR 'maximum control line exceeded'``; a leaf
message over ``max_payload`` gets ``-ERR 'Maximum Payload Violation'``. nats-server does not limit the
size of routed and gateway messages, and neither does this parser unless given ``max_payload``.
"""
from __future__ import annotations

from rillet.protocol.parser import (AUTH_VIOLATION, MAX_CONTROL_LINE, MAX_PAYLOAD_VIOLATION, UNKNOWN_OP,
                                    BufferedParser, ProtocolError)

__all__ = [
    "ROUTE", "GATEWAY", "LEAF", "ServerParser", "ProtocolError", "NO_QUEUES", "CONTROL_LINE_FACTOR",
    "UNKNOWN_OP", "MAX_CONTROL_LINE", "MAX_PAYLOAD_VIOLATION", "AUTH_VIOLATION",
    "PING", "PONG", "OK", "err_frame", "info_frame", "connect_frame",
    "rs_sub", "rs_unsub", "ls_sub", "ls_unsub", "leaf_sub", "leaf_unsub", "account_sub", "account_unsub",
    "rmsg_head", "hmsg_head", "lmsg_head", "leaf_msg_head", "leaf_hmsg_head", "frame",
]

# Connection kinds, named as nats-server names them in logs and /connz
ROUTE = "ROUTER"
GATEWAY = "GATEWAY"
LEAF = "LEAF"

# nats-server lets server connections use 16 times the client's max_control_line (64 KB by default):
# their control lines carry origin, account, reply and queue names.
CONTROL_LINE_FACTOR = 16

NO_QUEUES: tuple = ()

_CR = 13
_LF = 10
_CRLF = b"\r\n"


def _snippet(data, start: int, size: int = 32) -> str:
    return repr(bytes(data[start:start + size]))


def _parse_size(b: bytes) -> int:
    """A non-negative decimal of at most 9 digits, or -1 (as nats-server's parseSize)."""
    if not b or len(b) > 9 or not b.isdigit():
        return -1
    return int(b)


def _golist(args) -> str:
    """A list of byte strings as Go's %s prints a [][]byte: [a b c]."""
    return "[" + " ".join(a.decode("utf-8", "replace") for a in args) + "]"


def _gostr(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _bad_args(detail: str) -> ProtocolError:
    # nats-server logs the error and closes the connection (Protocol Violation) without an -ERR
    return ProtocolError(None, detail, "Protocol Violation")


# ---- operation table ----------------------------------------------------------------------------------------

(_RS_SUB, _RS_UNSUB, _LS_SUB, _LS_UNSUB, _RMSG, _LMSG, _HMSG, _A_SUB, _A_UNSUB, _SUB, _UNSUB,
 _PING, _PONG, _CONNECT, _INFO, _OK, _ERR, _BAD) = range(18)

# name -> (code, needs a space or tab after the name)
_COMMON = {
    b"RS+": (_RS_SUB, True), b"RS-": (_RS_UNSUB, True), b"RMSG": (_RMSG, True), b"HMSG": (_HMSG, True),
    b"A+": (_A_SUB, True), b"A-": (_A_UNSUB, True), b"SUB": (_SUB, True), b"UNSUB": (_UNSUB, True),
    b"PING": (_PING, False), b"PONG": (_PONG, False), b"CONNECT": (_CONNECT, False), b"INFO": (_INFO, False),
    b"+OK": (_OK, False), b"-ERR": (_ERR, True),
}
_L_OPS = {b"LS+": (_LS_SUB, True), b"LS-": (_LS_UNSUB, True), b"LMSG": (_LMSG, True)}
_OPS_BY_KIND: dict[str, dict[bytes, tuple[int, bool]]] = {
    ROUTE: {**_COMMON, **_L_OPS},
    GATEWAY: dict(_COMMON),
    LEAF: {**_COMMON, **_L_OPS},
}


def _first_letter_index(ops: dict[bytes, tuple[int, bool]]) -> dict[int, tuple[tuple[bytes, int, bool], ...]]:
    """First byte (both cases) -> candidate op names, longest first."""
    idx: dict[int, list[tuple[bytes, int, bool]]] = {}
    for name, (code, sep) in ops.items():
        for c in {name[0], ord(chr(name[0]).lower())}:
            idx.setdefault(c, []).append((name, code, sep))
    return {c: tuple(sorted(v, key=lambda t: -len(t[0]))) for c, v in idx.items()}


_INDEX_BY_KIND = {kind: _first_letter_index(ops) for kind, ops in _OPS_BY_KIND.items()}

_ARG_FUNCS = {  # nats-server's function names, for error texts
    ROUTE: "processRoutedMsgArgs", GATEWAY: "processRoutedMsgArgs", LEAF: "processLeafMsgArgs",
}
_HARG_FUNCS = {ROUTE: "processRoutedHeaderMsgArgs", GATEWAY: "processRoutedHeaderMsgArgs",
               LEAF: "processLeafHeaderMsgArgs"}


class ServerParser(BufferedParser):
    """The protocol parser of one route, gateway or leaf node connection (see the module docstring)."""

    __slots__ = ("handler", "kind", "account", "lnocu", "max_payload", "max_control_line", "awaiting_connect",
                 "halt", "info_before_connect", "_index", "_ops", "_limit", "_fast_head", "_fast_na")

    def __init__(self, handler, kind: str, *, max_control_line: int = 4096, max_payload: int | None = None,
                 account: bytes | None = None, lnocu: bool = True) -> None:
        if kind not in _OPS_BY_KIND:
            raise ValueError(f"unknown connection kind {kind!r}")
        if account is not None and kind != ROUTE:
            raise ValueError("only a route can be pinned to an account")
        self.handler = handler
        self.kind = kind
        self.account = account or None  # a pinned route's account (not on the wire)
        self.lnocu = lnocu  # the peer sends LS- with the origin cluster (route INFO/CONNECT "lnocu")
        self.max_payload = max_payload
        self.max_control_line = max_control_line
        self.awaiting_connect = False
        # a handler sets ``halt`` in proto_info to stop parsing right after that INFO (the bytes that follow
        # are compressed: ``take_rest`` hands them back); ``info_before_connect``: an INFO is not refused
        # while awaiting CONNECT (a leafnode hub negotiating compression, as nats-server)
        self.halt = False
        self.info_before_connect = False
        self._index = _INDEX_BY_KIND[kind]
        self._ops = _OPS_BY_KIND[kind]
        self._partial: bytearray | None = None
        self._need = 0
        self._configure()

    def _configure(self) -> None:
        self._limit = self.max_control_line * CONTROL_LINE_FACTOR
        # the fast path: a message op with no reply-and-queues forms
        if self.kind == LEAF:
            self._fast_head, self._fast_na = b"LMSG ", 3
        else:
            self._fast_head, self._fast_na = b"RMSG ", 3 if self.account is not None else 4

    def take_rest(self) -> bytes:
        """After a halt: the bytes received after the INFO that halted parsing (not parsed), and parsing
        re-armed for what is fed next."""
        rest = bytes(self._partial) if self._partial is not None else b""
        self._partial = None
        self._need = 0
        self.halt = False
        return rest

    def pin(self, account: bytes | None) -> None:
        """Pin (or unpin) this route to one account: protocols then omit the account name."""
        if account is not None and self.kind != ROUTE:
            raise ValueError("only a route can be pinned to an account")
        self.account = account or None
        self._configure()

    # ---- fast path ------------------------------------------------------------------------------------------

    def _parse(self, data: bytes) -> int:
        """Parse complete operations; return the offset of the first unparsed byte.

        Fast path, as in the client parser: split at every CRLF once and walk the pieces. A plain RMSG (or
        LMSG on a leaf) whose payload holds no CRLF is a control-line piece followed by a payload piece of
        the announced size; PING and PONG are single pieces. Anything else goes through the general parser
        for one operation, and the walk resynchronises where that operation ended.
        """
        parts = data.split(b"\r\n")
        last = len(parts) - 1
        i = 0
        pos = 0
        handler = self.handler
        head = self._fast_head
        want = self._fast_na
        pinned = self.account
        leaf = self.kind == LEAF
        msg = handler.proto_leaf_msg if leaf else handler.proto_rmsg
        limit = self._limit
        max_payload = self.max_payload
        if self.awaiting_connect:
            last = 0
        while i < last:
            line = parts[i]
            if line[:5] == head:
                args = line.split(b" ")
                na = len(args)
                if (na == want or na == want + 1) and i + 1 < last and len(line) <= limit and 9 not in line \
                        and 10 not in line and 13 not in line and b"" not in args:
                    sz = args[-1]
                    payload = parts[i + 1]
                    if len(sz) < 10 and sz.isdigit() and len(payload) == int(sz) and \
                            (max_payload is None or len(payload) <= max_payload):
                        reply = args[-2] if na > want else None
                        if leaf:
                            msg(args[1], reply, NO_QUEUES, payload)
                        elif pinned is not None:
                            msg(pinned, args[1], reply, NO_QUEUES, payload)
                        else:
                            msg(args[1], args[2], reply, NO_QUEUES, payload)
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
            newpos = self._parse_general(data, pos, True)
            if newpos == pos or self.halt:
                return newpos
            # a handler may have changed settings (CONNECT, INFO pinning the account)
            head = self._fast_head
            want = self._fast_na
            pinned = self.account
            limit = self._limit
            max_payload = self.max_payload
            if self.awaiting_connect:
                return self._parse_general(data, newpos, False)
            while i < last and pos < newpos:
                pos += len(parts[i]) + 2
                i += 1
            if pos != newpos:
                return self._parse_general(data, newpos, False)
        if pos < len(data):
            return self._parse_general(data, pos, False)
        return pos

    # ---- general parser -------------------------------------------------------------------------------------

    def _parse_general(self, data: bytes, pos: int, one: bool) -> int:
        """Parse operations from ``pos`` (only one when ``one``); return the offset after the last one.

        Like nats-server: op names are case-insensitive; ops with arguments need a space or tab after the
        name, CONNECT and INFO do not; PING, PONG and +OK ignore the rest of their line; arguments are
        separated by blanks; a control line may end in LF alone, a payload must be followed by CRLF.
        """
        handler = self.handler
        n = len(data)
        kind = self.kind
        while pos < n:
            nl = data.find(b"\n", pos)
            if nl < 0:
                self._check_incomplete(data, pos, n)
                return pos
            end = nl - 1 if nl > pos and data[nl - 1] == _CR else nl
            c = data[pos]
            if self.awaiting_connect and c != 67 and c != 99 and not (  # not 'C'/'c' (nor an allowed INFO)
                    self.info_before_connect and (c == 73 or c == 105)):
                if not handler.proto_before_connect():
                    raise ProtocolError(AUTH_VIOLATION, "authorization violation: operation before CONNECT",
                                        "Authentication Failure")
            op, k = self._op_at(data, pos, end)
            if op == _RMSG or op == _HMSG or op == _LMSG:
                hdr_op = op == _HMSG
                raw = self._arg(data, pos + k, end)
                args = self._args(raw)
                if kind == LEAF:  # LMSG (or RMSG) and HMSG
                    subject, reply, queues, hdr, size = self._leaf_msg_args(args, hdr_op, raw)
                    origin = account = None
                elif op == _LMSG:
                    origin, account, subject, reply, queues, hdr, size = self._origin_msg_args(args, raw)
                else:
                    origin = None
                    account, subject, reply, queues, hdr, size = self._routed_msg_args(args, hdr_op, raw)
                start = nl + 1
                stop = start + size
                if stop + 2 > n:
                    self._need = stop + 2 - pos
                    return pos
                if data[stop] != _CR or data[stop + 1] != _LF:
                    raise ProtocolError(UNKNOWN_OP, f"{kind} parser ERROR after payload: {_snippet(data, stop)}")
                body = data[start:stop]
                if kind == LEAF:
                    if hdr_op:
                        handler.proto_leaf_hmsg(subject, reply, queues, hdr, body)
                    else:
                        handler.proto_leaf_msg(subject, reply, queues, body)
                elif op == _LMSG:
                    handler.proto_lmsg(origin, account, subject, reply, queues, hdr, body)
                elif hdr_op:
                    handler.proto_hmsg(account, subject, reply, queues, hdr, body)
                else:
                    handler.proto_rmsg(account, subject, reply, queues, body)
                pos = stop + 2
            elif op == _PING:
                handler.proto_ping()
                pos = nl + 1
            elif op == _PONG:
                handler.proto_pong()
                pos = nl + 1
            elif op == _RS_SUB or op == _LS_SUB or op == _SUB:
                self._sub(op, data, pos + k, end)
                pos = nl + 1
            elif op == _RS_UNSUB or op == _LS_UNSUB or op == _UNSUB:
                self._unsub(op, data, pos + k, end)
                pos = nl + 1
            elif op == _A_SUB or op == _A_UNSUB:
                arg = self._arg(data, pos + k, end)
                if kind == GATEWAY:  # the whole argument is the account name, as nats-server reads it
                    if op == _A_SUB:
                        handler.proto_account_sub(arg)
                    else:
                        handler.proto_account_unsub(arg)
                pos = nl + 1
            elif op == _CONNECT:
                handler.proto_connect(self._arg(data, pos + k, end).rstrip(b" \t"))
                pos = nl + 1
            elif op == _INFO:
                handler.proto_info(self._arg(data, pos + k, end).rstrip(b" \t"))
                pos = nl + 1
                if self.halt:
                    return pos
            elif op == _OK:
                handler.proto_ok()
                pos = nl + 1
            elif op == _ERR:
                handler.proto_err(self._arg(data, pos + k, end))
                pos = nl + 1
            else:
                raise ProtocolError(UNKNOWN_OP, f"{kind} parser ERROR at {_snippet(data, pos)}")
            if one:
                return pos
        return pos

    def _op_at(self, data: bytes, pos: int, end: int) -> tuple[int, int]:
        """The operation on the control line data[pos:end] and the length of its name (_BAD, 0 if none)."""
        cands = self._index.get(data[pos])
        if cands is not None:
            for name, code, needs_sep in cands:
                k = len(name)
                if data[pos:pos + k].upper() == name:
                    if needs_sep and (pos + k >= end or data[pos + k] not in (32, 9)):
                        return _BAD, 0
                    return code, k
        return _BAD, 0

    def _arg(self, data: bytes, start: int, end: int) -> bytes:
        while start < end and (data[start] == 32 or data[start] == 9):
            start += 1
        if end - start > self._limit:
            raise ProtocolError(MAX_CONTROL_LINE, f"max_control_line {self.max_control_line}, "
                                                  f"argument length {end - start}", "Maximum Control Line Exceeded")
        return data[start:end]

    @staticmethod
    def _args(arg: bytes) -> list[bytes]:
        """Arguments separated by spaces, tabs and stray CRs (nats-server's splitArg)."""
        if 9 in arg:
            arg = arg.replace(b"\t", b" ")
        if 13 in arg:
            arg = arg.replace(b"\r", b" ")
        return [a for a in arg.split(b" ") if a]

    # ---- message arguments ------------------------------------------------------------------------------------

    def _reply_and_queues(self, args: list[bytes], at: int, tail: int, fn: str):
        """The reply indicator form: args[at] is '+' (reply then queues) or '|' (queues only)."""
        ind = args[at]
        if len(ind) != 1 or ind not in (b"+", b"|"):
            raise _bad_args(f"{fn} Bad or Missing Reply Indicator: '{_gostr(ind)}'")
        if ind == b"+":
            return args[at + 1], tuple(args[at + 2:len(args) - tail])
        return None, tuple(args[at + 1:len(args) - tail])

    def _msg_tail(self, args: list[bytes], base: int, hdr_op: bool, raw: bytes, fn: str):
        """The part every message protocol shares after its ``base`` leading fields (origin, account,
        subject): [reply | + reply q... | '|' q...] [hdr] size, checked in nats-server's order and words."""
        na = len(args)
        t = 2 if hdr_op else 1  # trailing size fields
        if na < base + t:
            raise _bad_args(f"{fn} Parse Error: '{_golist(args)}'")
        if na == base + t:
            reply, queues = None, NO_QUEUES
        elif na == base + 1 + t:
            reply, queues = args[base], NO_QUEUES
        else:
            reply, queues = self._reply_and_queues(args, base, t, fn)
        size = _parse_size(args[-1])
        if hdr_op:
            hdr = _parse_size(args[-2])
            if hdr < 0:
                raise _bad_args(f"{fn} Bad or Missing Header Size: '{_gostr(raw)}'")
        else:
            hdr = -1
        if size < 0:
            raise _bad_args(f"{fn} Bad or Missing Size: '{_golist(args)}'")
        if hdr > size:
            raise _bad_args(f"{fn} Header Size larger then TotalSize: '{_gostr(raw)}'")
        self._check_payload(size)
        return reply, queues, hdr, size

    def _routed_msg_args(self, args: list[bytes], hdr_op: bool, raw: bytes):
        """RMSG/HMSG on a route or gateway: account subject [reply | + reply q... | '|' q...] [hdr] size."""
        if self.account is not None:
            args.insert(0, self.account)
        fn = _HARG_FUNCS[self.kind] if hdr_op else _ARG_FUNCS[self.kind]
        reply, queues, hdr, size = self._msg_tail(args, 2, hdr_op, raw, fn)
        return args[0], args[1], reply, queues, hdr, size

    def _origin_msg_args(self, args: list[bytes], raw: bytes):
        """LMSG on a route: origin account subject [reply forms] hdr size (header sizes always present)."""
        if self.account is not None and len(args) > 2:
            args.insert(1, self.account)
        reply, queues, hdr, size = self._msg_tail(args, 3, True, raw, "processRoutedOriginClusterMsgArgs")
        return args[0], args[1], args[2], reply, queues, hdr, size

    def _leaf_msg_args(self, args: list[bytes], hdr_op: bool, raw: bytes):
        """LMSG/HMSG on a leaf connection: subject [reply forms] [hdr] size."""
        fn = "processLeafHeaderMsgArgs" if hdr_op else "processLeafMsgArgs"
        reply, queues, hdr, size = self._msg_tail(args, 1, hdr_op, raw, fn)
        return args[0], reply, queues, hdr, size

    def _check_payload(self, size: int) -> None:
        mp = self.max_payload
        if mp is not None and size > mp:
            raise ProtocolError(MAX_PAYLOAD_VIOLATION, f"maximum payload exceeded: {size} vs {mp}",
                                "Maximum Message Payload Exceeded")

    # ---- interest ---------------------------------------------------------------------------------------------

    def _sub(self, op: int, data: bytes, start: int, end: int) -> None:
        kind = self.kind
        raw = self._arg(data, start, end)
        args = self._args(raw)
        na = len(args)
        if kind == LEAF:  # LS+ / RS+ / SUB: subject [queue weight]
            if na == 1:
                self.handler.proto_leaf_sub(args[0], None, 0)
            elif na == 3:
                self.handler.proto_leaf_sub(args[0], args[1], _parse_size(args[2]))
            else:
                raise _bad_args(f"processLeafSub Parse Error: '{_gostr(raw)}'")
            return
        if kind == GATEWAY:  # RS+ / SUB: account subject [queue weight]
            if na == 2:
                self.handler.proto_rs_sub(args[0], args[1], None, 0)
            elif na == 4:
                self.handler.proto_rs_sub(args[0], args[1], args[2], _parse_size(args[3]))
            else:
                raise _bad_args(f"processGatewaySubjectSub Parse Error: '{_gostr(raw)}'")
            return
        if op == _SUB:
            return  # nats-server reads SUB on a route and does nothing with it
        has_origin = op == _LS_SUB
        pinned = self.account
        s = (1 if has_origin else 0) + (0 if pinned is not None else 1)  # index of the subject
        if na == s + 1:
            queue, weight = None, 0
        elif na == s + 3:
            queue, weight = args[s + 1], _parse_size(args[s + 2])
        else:
            raise _bad_args(f"processRemoteSub Parse Error: '{'L' if has_origin else 'R'} {_gostr(raw)}'")
        account = pinned if pinned is not None else args[s - 1]
        if has_origin:
            self.handler.proto_ls_sub(args[0], account, args[s], queue, weight)
        else:
            self.handler.proto_rs_sub(account, args[s], queue, weight)

    def _unsub(self, op: int, data: bytes, start: int, end: int) -> None:
        kind = self.kind
        raw = self._arg(data, start, end)
        args = self._args(raw)
        na = len(args)
        if kind == LEAF:
            # nats-server looks the argument up as a key and ignores one it does not know: no parse error
            if na == 1:
                self.handler.proto_leaf_unsub(args[0], None)
            elif na == 2:
                self.handler.proto_leaf_unsub(args[0], args[1])
            return
        if kind == GATEWAY:
            if na == 2:
                self.handler.proto_rs_unsub(args[0], args[1], None)
            elif na == 3:
                self.handler.proto_rs_unsub(args[0], args[1], args[2])
            else:
                raise _bad_args(f"processGatewaySubjectUnsub parse error: '{_gostr(raw)}'")
            return
        has_origin = op == _LS_UNSUB and self.lnocu
        pinned = self.account
        s = (1 if has_origin else 0) + (0 if pinned is not None else 1)
        if na == s + 1:
            queue = None
        elif na == s + 2:
            queue = args[s + 1]
        else:
            raise _bad_args(f"processRemoteUnsub parse error: '{_gostr(raw)}'")
        account = pinned if pinned is not None else args[s - 1]
        if op == _LS_UNSUB:
            self.handler.proto_ls_unsub(args[0] if has_origin else None, account, args[s], queue)
        else:
            self.handler.proto_rs_unsub(account, args[s], queue)

    # ---- incomplete input -------------------------------------------------------------------------------------

    def _check_incomplete(self, data, pos: int, n: int) -> None:
        """A control line without its end yet: a wrong op name fails now, an endless line at the limit."""
        if not self._prefix_ok(bytes(data[pos:pos + 9])):
            self._partial = None
            raise ProtocolError(UNKNOWN_OP, f"{self.kind} parser ERROR at {_snippet(data, pos)}")
        if n - pos > self._limit + 16:
            self._partial = None
            raise ProtocolError(MAX_CONTROL_LINE, f"control line of {n - pos} bytes without end",
                                "Maximum Control Line Exceeded")

    def _prefix_ok(self, seg: bytes) -> bool:
        """Could ``seg`` (the first bytes of an unfinished control line) still become a valid operation?"""
        u = seg.upper()
        for name, (_, needs_sep) in self._ops.items():
            k = len(name)
            if len(u) <= k:
                if name.startswith(u):
                    return True
            elif u.startswith(name) and (not needs_sep or u[k] in (32, 9)):
                return True
        return False


# ==== encoders ================================================================================================
# Each returns one complete frame (bytes), built with a single join. Names and subjects are bytes.

PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"


def err_frame(text: str) -> bytes:
    return b"".join((b"-ERR '", text.encode(), b"'\r\n"))


def info_frame(info_json: bytes, blank: bool = True) -> bytes:
    """INFO as nats-server writes it: with a blank before the CRLF on routes and leaf connections, without
    one on gateways (``blank=False``). The JSON comes from rillet.cluster.info."""
    return b"".join((b"INFO ", info_json, b" \r\n" if blank else b"\r\n"))


def connect_frame(connect_json: bytes) -> bytes:
    return b"".join((b"CONNECT ", connect_json, b"\r\n"))


def _weight(w: int) -> bytes:
    if w < 1:
        raise ValueError(f"queue weight must be at least 1, not {w}")
    return str(w).encode()


def rs_sub(account: bytes | None, subject: bytes, queue: bytes | None = None, weight: int = 1) -> bytes:
    """``RS+ [<account>] <subject>[ <queue> <weight>]`` (account None on a pinned route)."""
    acc = (account, b" ") if account is not None else ()
    if queue:
        return b"".join((b"RS+ ", *acc, subject, b" ", queue, b" ", _weight(weight), _CRLF))
    return b"".join((b"RS+ ", *acc, subject, _CRLF))


def rs_unsub(account: bytes | None, subject: bytes, queue: bytes | None = None) -> bytes:
    acc = (account, b" ") if account is not None else ()
    if queue:
        return b"".join((b"RS- ", *acc, subject, b" ", queue, _CRLF))
    return b"".join((b"RS- ", *acc, subject, _CRLF))


def ls_sub(origin: bytes, account: bytes | None, subject: bytes, queue: bytes | None = None,
           weight: int = 1) -> bytes:
    """Route ``LS+ <origin> [<account>] <subject>[ <queue> <weight>]``: interest of a leaf of cluster origin."""
    acc = (account, b" ") if account is not None else ()
    if queue:
        return b"".join((b"LS+ ", origin, b" ", *acc, subject, b" ", queue, b" ", _weight(weight), _CRLF))
    return b"".join((b"LS+ ", origin, b" ", *acc, subject, _CRLF))


def ls_unsub(origin: bytes | None, account: bytes | None, subject: bytes, queue: bytes | None = None) -> bytes:
    """Route ``LS- [<origin>] [<account>] <subject>[ <queue>]`` (origin only to a peer with lnocu)."""
    org = (origin, b" ") if origin is not None else ()
    acc = (account, b" ") if account is not None else ()
    if queue:
        return b"".join((b"LS- ", *org, *acc, subject, b" ", queue, _CRLF))
    return b"".join((b"LS- ", *org, *acc, subject, _CRLF))


def leaf_sub(subject: bytes, queue: bytes | None = None, weight: int = 1) -> bytes:
    """Leaf ``LS+ <subject>[ <queue> <weight>]``."""
    if queue:
        return b"".join((b"LS+ ", subject, b" ", queue, b" ", _weight(weight), _CRLF))
    return b"".join((b"LS+ ", subject, _CRLF))


def leaf_unsub(subject: bytes, queue: bytes | None = None) -> bytes:
    if queue:
        return b"".join((b"LS- ", subject, b" ", queue, _CRLF))
    return b"".join((b"LS- ", subject, _CRLF))


def account_sub(account: bytes) -> bytes:
    """Gateway ``A+ <account>``: interest in the account again after an A-."""
    return b"".join((b"A+ ", account, _CRLF))


def account_unsub(account: bytes) -> bytes:
    """Gateway ``A- <account>``: no interest at all in the account."""
    return b"".join((b"A- ", account, _CRLF))


def _reply_queues(reply: bytes | None, queues) -> tuple:
    if queues:
        if reply:
            return (b"+ ", reply, b" ", b" ".join(queues), b" ")
        return (b"| ", b" ".join(queues), b" ")
    if reply:
        return (reply, b" ")
    return ()


def rmsg_head(account: bytes | None, subject: bytes, reply: bytes | None, queues, size: int) -> bytes:
    """The control line of ``RMSG [<account>] <subject> [+ <reply> <q>... | '|' <q>... | <reply>] <size>``."""
    if not queues and account is not None:  # (the common forms in one formatting operation: per message)
        if reply:
            return b"RMSG %b %b %b %d\r\n" % (account, subject, reply, size)
        return b"RMSG %b %b %d\r\n" % (account, subject, size)
    acc = (account, b" ") if account is not None else ()
    return b"".join((b"RMSG ", *acc, subject, b" ", *_reply_queues(reply, queues), b"%d\r\n" % size))


def hmsg_head(account: bytes | None, subject: bytes, reply: bytes | None, queues, hdr_len: int,
              size: int) -> bytes:
    """``HMSG [<account>] <subject> [reply forms] <hdr_len> <total_size>`` (route or gateway)."""
    acc = (account, b" ") if account is not None else ()
    return b"".join((b"HMSG ", *acc, subject, b" ", *_reply_queues(reply, queues), b"%d %d\r\n" % (hdr_len, size)))


def lmsg_head(origin: bytes, account: bytes | None, subject: bytes, reply: bytes | None, queues, hdr_len: int,
              size: int) -> bytes:
    """Route ``LMSG <origin> [<account>] <subject> [reply forms] <hdr_len> <size>`` (hdr_len 0 if none)."""
    acc = (account, b" ") if account is not None else ()
    return b"".join((b"LMSG ", origin, b" ", *acc, subject, b" ", *_reply_queues(reply, queues),
                     b"%d %d\r\n" % (max(hdr_len, 0), size)))


def leaf_msg_head(subject: bytes, reply: bytes | None, queues, size: int) -> bytes:
    """Leaf ``LMSG <subject> [reply forms] <size>``."""
    return b"".join((b"LMSG ", subject, b" ", *_reply_queues(reply, queues), b"%d\r\n" % size))


def leaf_hmsg_head(subject: bytes, reply: bytes | None, queues, hdr_len: int, size: int) -> bytes:
    """Leaf ``HMSG <subject> [reply forms] <hdr_len> <size>``."""
    return b"".join((b"HMSG ", subject, b" ", *_reply_queues(reply, queues), b"%d %d\r\n" % (hdr_len, size)))


def frame(head: bytes, body: bytes) -> bytes:
    """A whole message frame: control line, payload (headers included), CRLF."""
    return b"".join((head, body, _CRLF))
