"""The meta leader's rules for consumers while their stream is reconfigured (``JetStreamCluster``'s
``_consumer_target``, ``_consumer_config``, ``consumer_desired``, ``_consumers_off_target``): unit tests on
assignments alone, no servers (the live behaviour, beside nats-server's: tests/test_jscluster_desired_diff.py)."""
from rillet.jetstream.cluster import assignments as A
from rillet.jetstream.cluster.meta import JetStreamCluster


def sa(replicas=3, peers=("A", "B", "C"), retention="limits", desired=None):
    return A.StreamAssignment(config={"name": "S", "num_replicas": replicas, "retention": retention},
                              group=A.RaftGroup("S-R3F-x", list(peers), desired=desired))


def ca(peers, replicas=None, desired=None, durable=True):
    cfg = {"durable_name": "C"} if durable else {}
    if replicas is not None:
        cfg["num_replicas"] = replicas
    return A.ConsumerAssignment(name="C", stream="S", config=cfg,
                                group=A.RaftGroup("C-R3F-x", list(peers), desired=desired))


class Meta:
    """Just what these read of the cluster (its name, the static rules)."""
    name = "c1"
    consumer_desired = JetStreamCluster.consumer_desired
    _consumer_target = staticmethod(JetStreamCluster._consumer_target)
    _consumer_config = staticmethod(JetStreamCluster._consumer_config)


def test_target_follows_the_stream_and_keeps_its_peers_first():
    s = sa()
    assert JetStreamCluster._consumer_target(s, ca(["B"]), ["A", "B", "C"]) == ["B", "A", "C"]  # (no replicas)
    assert JetStreamCluster._consumer_target(s, ca(["B"], 1), ["A", "B", "C"]) == ["B"]
    assert JetStreamCluster._consumer_target(s, ca(["B"], 1), ["A", "C"]) == ["A"]  # (its server dropped)


def test_interest_stream_consumers_as_replicated_as_the_stream():
    s = sa(retention="interest")
    assert JetStreamCluster._consumer_target(s, ca(["B"], 1), ["A", "B", "C"]) == ["B", "A", "C"]
    assert JetStreamCluster._consumer_config(s, ca(["B"], 1)) == {"durable_name": "C", "num_replicas": 3}
    assert JetStreamCluster._consumer_config(s, ca(["B"], 3)) is None


def test_config_brought_down_with_the_stream():
    s = sa(replicas=1, peers=("A",))
    assert JetStreamCluster._consumer_config(s, ca(["A", "B", "C"], 3)) == {"durable_name": "C", "num_replicas": 1}
    assert JetStreamCluster._consumer_config(s, ca(["A", "B", "C"])) is None  # (no count of its own)
    assert JetStreamCluster._consumer_config(sa(), ca(["A"], 1)) is None  # (limits: R1 stays)


def test_chosen_peers_are_the_target_while_they_fit():
    s = sa()
    c = ca(["A", "B", "C"], 1, desired={"peers": ["C"]})
    assert JetStreamCluster._consumer_target(s, c, ["A", "B", "C"]) == ["C"]
    assert JetStreamCluster._consumer_target(s, c, ["A", "B"]) == ["A"]  # (C no longer the stream's)
    c = ca(["A", "B", "C"], 1, desired={"peers": ["A", "B", "C"], "scale_down": True})
    assert JetStreamCluster._consumer_target(s, c, ["A", "B", "C"]) == ["A"]


def test_consumer_desired_scale_down_leaves_the_choice_to_its_leader():
    m = Meta()
    s = sa()
    d = m.consumer_desired(s, ca(["A", "B", "C"], 1), ["A"], ["A", "B", "C"])
    assert d["peers"] == ["A", "B", "C"] and d["scale_down"] and d["cluster"] == "c1"
    # only one peer left to keep: no choice, the target itself
    d = m.consumer_desired(s, ca(["A", "B", "C"], 1), ["A"], ["A"])
    assert d["peers"] == ["A"] and "scale_down" not in d
    d = m.consumer_desired(s, ca(["B"]), ["B", "A", "C"], ["A", "B", "C"])
    assert d["peers"] == ["B", "A", "C"] and "scale_down" not in d and d["id"] and d["created"]
    # the stream's desired cluster named
    d = m.consumer_desired(sa(desired={"peers": ["X"], "cluster": "c2"}), ca(["A"]), ["X"], ["X"])
    assert d["cluster"] == "c2"


def test_off_target_includes_a_desired_state_left_to_clear():
    s = sa()
    s.consumers = {"C": ca(["A", "B", "C"], desired={"peers": ["A", "B", "C"]})}
    assert [c.name for c in JetStreamCluster._consumers_off_target(Meta(), s, ["A", "B", "C"])] == ["C"]
    s.consumers = {"C": ca(["A", "B", "C"])}
    assert JetStreamCluster._consumers_off_target(Meta(), s, ["A", "B", "C"]) == []
