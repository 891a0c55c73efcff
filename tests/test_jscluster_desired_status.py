"""monitor.desired_status: the ``cluster.desired.status`` a group leader reports while its group is in a
desired state (ADR-62's types), and the ``pending`` replicas beside it (unit tests of the pure builder)."""
from rillet.jetstream.cluster import monitor


def names(p: str) -> str:
    return {"A": "s-a", "B": "s-b", "C": "s-c"}.get(p, "")


def status(desired, assigned, members, current, blocking=""):
    return monitor.desired_status(desired, assigned, members, current, names, blocking)


def test_scale_down_not_chosen_yet():
    assert status({"peers": ["A", "B", "C"], "scale_down": True}, "ABC", "ABC", "ABC") == {
        "description": "selecting peers to scale down to", "type": "meta"}


def test_steps_of_a_scale_up():
    d = {"peers": ["A", "B", "C"]}
    assert status(d, "A", "A", "A") == {"description": "expanding assignment with desired peers", "type": "meta"}
    assert status(d, "AB", "A", "A") == {"description": "adding peer s-b", "type": "membership"}
    assert status(d, "AB", "AB", "A") == {"description": "waiting for peers to catch up", "type": "catchup"}
    assert status(d, "ABC", "ABC", "ABC", blocking="C0") == {
        "description": "waiting for consumer 'C0' to migrate", "type": "blocked"}
    assert status(d, "ABC", "ABC", "ABC") == {"description": "waiting for peer set to settle", "type": "meta"}


def test_removal_and_unknown_names():
    d = {"peers": ["A"]}
    assert status(d, "A", "AB", "AB") == {"description": "removing peer s-b", "type": "membership"}
    assert status(d, ["A", "Z"], ["A"], ["A"]) == {"description": "adding peer Z", "type": "membership"}


def test_desired_info_carries_status_and_origin_retention():
    d = monitor.desired_info({"peers": ["A"], "cluster": "c1", "created": "t",
                              "origin": {"replicas": 3, "retention": "limits", "peers": ["A"]}}, names,
                             {"description": "x", "type": "meta"})
    assert d == {"created": "t", "name": "c1", "replicas": [{"name": "s-a", "peer": "A"}],
                 "origin": {"replicas": 3, "retention": "limits"}, "status": {"description": "x", "type": "meta"}}


def test_pending_replica():
    assert monitor.peer_info(monitor.PeerState("s-b", "B", pending=True)) == {
        "name": "s-b", "current": False, "active": 0, "peer": "B", "pending": True}
