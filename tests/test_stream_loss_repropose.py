"""A stream leader that finds a wider loss while its LOST entry is in flight proposes it once that entry has
applied (issue 24), and the stream takes publishes (``feed``) only after the last of them."""
from types import SimpleNamespace

from rillet.jetstream.cluster.stream_loss import StreamLossMixin


class _Log:
    is_leader = True

    def __init__(self) -> None:
        self.proposed: list = []

    def propose(self, entry, done) -> None:
        self.proposed.append((entry, done))


class _Replica(StreamLossMixin):
    def __init__(self) -> None:
        self.log = _Log()
        self._lost_proposing = self._lost_again = self._lost_feed = False
        self.data_lost = {"raft_first": 5, "raft_last": 9, "seq_mark": 20}
        self._floor = 20
        self.closed = False
        self.leader = True
        self.fed = 0
        self.name = "S"
        self.jsa = SimpleNamespace(account=SimpleNamespace(name="$G"))
        self.cs = SimpleNamespace(js=SimpleNamespace(log=SimpleNamespace(error=lambda m: None)))

    def _feed(self) -> None:
        self.fed += 1


def test_a_loss_found_while_one_is_in_flight_is_proposed_after_it():
    r = _Replica()
    r._propose_lost(feed=True)
    assert len(r.log.proposed) == 1
    r.data_lost = {"raft_first": 3, "raft_last": 12, "seq_mark": 30}
    r._propose_lost(feed=False)  # (found meanwhile)
    assert len(r.log.proposed) == 1
    r.log.proposed[0][1](None, None, None)  # the first applies: the wider one goes out, no feed yet
    assert len(r.log.proposed) == 2 and r.fed == 0
    r.log.proposed[1][1](None, None, None)
    assert r.fed == 1 and len(r.log.proposed) == 2


def test_one_loss_proposes_once_and_feeds():
    r = _Replica()
    r._propose_lost(feed=True)
    r.log.proposed[0][1](None, None, None)
    assert len(r.log.proposed) == 1 and r.fed == 1
