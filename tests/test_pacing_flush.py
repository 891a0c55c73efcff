"""ReadPacer (rillet/server/pacing.py): a client's read is written out slice by slice (its own output, PubAcks and
replies to it, at the end of the read or once OWN_FLUSH bytes wait); a route's (RouteConn,
``_flush_each_slice = False``) at the end of the read, when the budget is spent, and every STALL_READ bytes, so
that one forwarded read is one pass of the server's RAFT groups (a pull's acks and its next request together)."""
from __future__ import annotations

from rillet.cluster.route import RouteConn
from rillet.server import pacing
from rillet.server.pacing import ReadPacer


class _Opts:
    max_pending = 64 * 1024 * 1024
    no_fast_producer_stall = False


class _Srv:
    opts = _Opts()

    def __init__(self) -> None:
        self.pending_flush: list = []
        self.pending_late: list = []
        self.flushes = 0
        self.late_runs = 0
        self.holds = self.releases = 0

    def hold_flush(self) -> bool:
        self.holds += 1
        return True

    def release_flush(self) -> None:
        self.releases += 1

    def flush_clients(self, hold_late: bool = False) -> None:
        self.flushes += 1
        self.pending_flush.clear()
        if self.pending_late and not hold_late:
            self.late_runs += 1
            self.pending_late.clear()


class _Conn(ReadPacer):
    closed = False
    transport = None

    def __init__(self, each: bool) -> None:
        self.server = _Srv()
        self._flush_each_slice = each
        self._init_pacing()
        self.fed: list[bytes] = []
        self.paused: list[bytes] = []

    def _feed_slice(self, chunk: bytes, data: bytes, pos: int) -> int:
        self.fed.append(chunk)
        self.server.pending_flush.append(object())  # (each slice has output to write)
        self.server.pending_late.append(object())  # (and proposes to a RAFT group: the runner is queued)
        self._count_read(len(chunk))
        return pos

    def _pause(self, rest: bytes, delay: float) -> None:
        self.paused.append(rest)


def test_a_route_read_is_written_out_once_a_client_read_per_slice():
    data = b"x" * (pacing.READ_SLICE * 3 + 10)
    c = _Conn(each=True)
    c._paced(data, 10.0)
    assert b"".join(c.fed) == data and len(c.fed) == 4 and c.server.flushes == 4
    # a route's slices, shrunk under load (the R3 pull case: acks and the next request in one small read)
    small = b"x" * (pacing.ROUTE_FLUSH // 2)
    c = _Conn(each=True)
    c._slice = pacing.SLICE_MIN
    c._paced(small, 10.0)
    r = _Conn(each=False)
    r._slice = pacing.SLICE_MIN
    r._paced(small, 10.0)
    assert b"".join(r.fed) == small and len(r.fed) == len(c.fed) > 1
    assert c.server.flushes == len(c.fed) and r.server.flushes == 1


def test_a_long_route_read_is_still_written_out_every_route_flush_bytes():
    # (so that a receiver nearing its pending limit stalls the route in time: tests/test_fairness.py's s2 case)
    data = b"x" * (pacing.ROUTE_FLUSH * 4)
    r = _Conn(each=False)
    r._slice = pacing.SLICE_MIN
    r._paced(data, 10.0)
    assert b"".join(r.fed) == data
    assert r.server.flushes == 4


def test_route_connections_flush_per_read():
    assert RouteConn._flush_each_slice is False and ReadPacer._flush_each_slice is True


def test_a_client_read_runs_the_late_writers_once_at_its_end():
    # the R3 pull case on a consumer leader whose client is local: a read of 100 acks and the next request,
    # parsed in small slices under load, is one pass of the RAFT groups (Server.pending_late), not one per slice;
    # the connections' output still goes out after each slice (the producer stall is checked per slice)
    data = b"x" * (pacing.SLICE_MIN * 5)
    c = _Conn(each=True)
    c._slice = pacing.SLICE_MIN
    c._paced(data, 10.0)
    assert b"".join(c.fed) == data and len(c.fed) > 1
    assert c.server.flushes == len(c.fed) and c.server.late_runs == 1


def test_a_client_read_stopped_by_its_budget_runs_the_late_writers_before_pausing():
    data = b"x" * (pacing.SLICE_MIN * 5)
    c = _Conn(each=True)
    c._slice = pacing.SLICE_MIN
    c._paced(data, 0.0)  # (the budget is spent after the first slice: the rest waits for a later pass)
    assert len(c.fed) == 1 and c.paused == [data[pacing.SLICE_MIN:]]
    assert c.server.late_runs == 1 and not c.server.pending_late


class _Loop:
    def __init__(self) -> None:
        self.soon: list = []

    def call_soon(self, fn, *args) -> None:
        self.soon.append(fn)


def _server():
    from rillet.server.server import Server
    srv = Server.__new__(Server)  # (only the flush bookkeeping: no sockets, no options)
    srv.pending_flush, srv.pending_late, srv._flush_scheduled, srv.loop = [], [], False, _Loop()
    return srv


def test_a_read_holds_the_scheduled_flush_and_queues_one_only_for_what_is_left():
    # inside a read, schedule_flush (an internal publish, a RAFT group's runner) queues no loop pass: the read
    # writes out its own output at its end; what is still waiting after it gets one pass
    srv = _server()
    assert srv.hold_flush() is True
    srv.pending_flush.append(object())
    srv.schedule_flush()
    assert srv.loop.soon == []
    srv.pending_flush.clear()  # (the read's own flush)
    srv.release_flush()
    assert srv.loop.soon == [] and srv._flush_scheduled is False
    assert srv.hold_flush() is True
    srv.pending_late.append(object())
    srv.release_flush()  # (left waiting: e.g. a read that stopped early)
    assert srv.loop.soon == [srv._scheduled_flush] and srv._flush_scheduled is True
    assert srv.hold_flush() is False  # (a pass is queued already: nothing to hold, nothing to give back)
    assert len(srv.loop.soon) == 1


def test_paced_takes_and_gives_back_the_hold_even_when_parsing_fails():
    c = _Conn(each=False)
    c._paced(b"x" * 10, 10.0)
    assert c.server.holds == c.server.releases == 1

    def boom(chunk, data, pos):
        raise ValueError("bad input")
    c._feed_slice = boom
    try:
        c._paced(b"y", 10.0)
    except ValueError:
        pass
    assert c.server.holds == c.server.releases == 2


class _Own(_Conn):
    """A client whose every slice has output for another receiver and for itself (a PubAck)."""

    def __init__(self) -> None:
        super().__init__(each=True)
        self.out = bytearray()
        self.flush_pending = False
        self.own_writes = 0
        self.other_writes = 0
        srv = self.server
        plain = srv.flush_clients

        def flush_clients(hold_late: bool = False) -> None:
            for x in srv.pending_flush:
                if x is self:
                    self.own_writes += 1
                    self.out.clear()
                    self.flush_pending = False
                else:
                    self.other_writes += 1
            plain(hold_late)
        srv.flush_clients = flush_clients

    def _feed_slice(self, chunk: bytes, data: bytes, pos: int) -> int:
        self.fed.append(chunk)
        self.server.pending_flush.append(object())
        self.out += b"+ACK"
        if not self.flush_pending:
            self.flush_pending = True
            self.server.pending_flush.append(self)
        self._count_read(len(chunk))
        return pos


def test_a_client_read_writes_its_own_output_once_and_the_receivers_per_slice():
    c = _Own()
    c._slice = pacing.SLICE_MIN
    c._paced(b"x" * (pacing.SLICE_MIN * 6), 10.0)
    assert len(c.fed) > 1
    assert c.other_writes == len(c.fed)  # (the receivers' output, and their stall check, slice by slice)
    assert c.own_writes == 1 and not c.out  # (its own, at the end of the read)
    # once OWN_FLUSH bytes of its own wait, they go out with that slice
    c = _Own()
    c._slice = pacing.SLICE_MIN
    c.out += b"x" * pacing.OWN_FLUSH
    c._paced(b"x" * (pacing.SLICE_MIN * 3), 10.0)
    assert c.own_writes == len(c.fed) > 1
