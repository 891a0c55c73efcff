"""Both lanes for tests (rillet.lane): the pure-Python parsers and their compiled twins.

``LANES`` parametrizes a fixture; ``parser_class(lane, name)`` gives that lane's ``ClientParser``,
``ServerParser`` or ``wire``; ``use_lane`` runs a test module in one lane:

    @pytest.fixture(autouse=True, scope="module", params=LANES)
    def _lane_under_test(request):
        with use_lane(request.param, globals()):
            yield request.param
 The compiled lane is skipped (with the reason) where the extension was not
built; tests/test_lanes.py::test_compiled_lane_is_built fails then, unless RILLET_PURE is set.
"""
from __future__ import annotations

import contextlib
import os

import pytest

import rillet.cluster  # noqa: F401  (registers its lane twins: ServerParser, wire)
from rillet import lane as _lane

try:
    _lane.compiled("ClientParser")
    _lane.compiled("ServerParser")
    COMPILED_ERROR = ""
except ImportError as e:
    COMPILED_ERROR = str(e)

LANES = [
    pytest.param("pure", id="pure"),
    pytest.param("compiled", id="compiled",
                 marks=pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")),
]


def parser_class(lane: str, name: str):
    return _lane.compiled(name) if lane == "compiled" else _lane.pure(name)


@contextlib.contextmanager
def use_lane(lane_name: str, module_globals: dict):
    """Run a test module in one lane: its module-level ``ClientParser``, ``ServerParser`` and ``cp`` (the
    rillet.cluster.protocol module) names, what ``rillet.lane`` hands to connections created meanwhile
    (in-process servers), the delivery executor, the client's PUB handler, Account.deliver, the route's message
    handlers, a consumer's run of deliveries and the MQTT connection's twins (bulk read, session delivery)
    become that lane's, and a server started as a subprocess meanwhile runs that lane (RILLET_PURE).
    Restored afterwards."""
    from rillet.cluster import protocol as cp
    swaps: list[tuple[dict | object, str, object]] = []
    for key, kind in (("ClientParser", "ClientParser"), ("ServerParser", "ServerParser"), ("cp", "wire")):
        if key in module_globals and (key != "cp" or module_globals[key] is cp):
            swaps.append((module_globals, key, parser_class(lane_name, kind)))
    for key in ("ClientParser", "ServerParser"):
        swaps.append((_lane, key, parser_class(lane_name, key)))
    # the delivery executor (rillet.server.delivery.deliver_result: the reference, or its compiled twin), where
    # it is bound: Account, and every loaded module (and the test module) that imported it by name
    import sys

    from rillet.server import delivery
    from rillet.server.accounts import Account
    executor = delivery.reference_deliver_result
    if lane_name == "compiled":
        from rillet._speedups._cdeliver import deliver_result as executor
    executors = (delivery.deliver_result, delivery.reference_deliver_result)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("rillet.") and getattr(mod, "deliver_result", None) in executors:
            swaps.append((mod, "deliver_result", executor))
    if module_globals.get("deliver_result") in executors:
        swaps.append((module_globals, "deliver_result", executor))
    swaps.append((Account, "deliver_result", executor))
    # and the PUB handler (rillet.server.client.reference_proto_pub, or its compiled twin)
    from rillet.server import client as client_mod
    pub = client_mod.reference_proto_pub
    if lane_name == "compiled":
        from rillet._speedups._cdeliver import proto_pub as pub
    swaps.append((client_mod.Client, "proto_pub", pub))
    # and Account.deliver (rillet.server.accounts.reference_deliver, or its compiled twin)
    from rillet.server.accounts import reference_deliver as acc_deliver
    if lane_name == "compiled":
        from rillet._speedups._cdeliver import account_deliver as acc_deliver
    swaps.append((Account, "deliver", acc_deliver))
    # a message from a route (deliver_inbound where it is bound) and a route's RMSG in and out
    from rillet.cluster import route
    inbound = delivery.reference_deliver_inbound
    send, rmsg = route.reference_send_msg, route.reference_proto_rmsg
    if lane_name == "compiled":
        from rillet._speedups._cdeliver import deliver_inbound as inbound
        from rillet._speedups._cdeliver import route_proto_rmsg as rmsg
        from rillet._speedups._cdeliver import route_send_msg as send
    inbounds = (delivery.deliver_inbound, delivery.reference_deliver_inbound)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("rillet.") and getattr(mod, "deliver_inbound", None) in inbounds:
            swaps.append((mod, "deliver_inbound", inbound))
    swaps.append((route.RouteConn, "send_msg", send))
    swaps.append((route.RouteConn, "proto_rmsg", rmsg))
    # a JetStream consumer's run of deliveries (rillet.jetstream.consumer.delivery.reference_run_frames or its twin)
    from rillet.jetstream.consumer import delivery as consumer_delivery
    frames = consumer_delivery.reference_run_frames
    if lane_name == "compiled":
        from rillet._speedups._cjs import run_frames as frames
    swaps.append((consumer_delivery, "_run_frames", frames))
    # an MQTT connection's bulk read and a session consumer's delivery (rillet.mqtt.publish.reference_fast_in,
    # rillet.mqtt.subscribe.reference_on_js_msg, or their twins in rillet._speedups._cmqtt)
    from rillet.mqtt import publish as mqtt_publish
    from rillet.mqtt import subscribe as mqtt_subscribe
    fast_in, on_js_msg = mqtt_publish.reference_fast_in, mqtt_subscribe.reference_on_js_msg
    if lane_name == "compiled":
        from rillet._speedups._cmqtt import fast_in, on_js_msg
    swaps.append((mqtt_publish.PublishMixin, "_fast_in", fast_in))
    swaps.append((mqtt_subscribe.SubscribeMixin, "_on_js_msg", on_js_msg))
    # and a server run as a subprocess meanwhile (tests/helpers.ServerProcess, mqttdiff.Target: the environment
    # is theirs) decides its lane from RILLET_PURE: set for the pure lane, removed for the compiled one
    env_pure = os.environ.get("RILLET_PURE")
    if lane_name == "compiled":
        os.environ.pop("RILLET_PURE", None)
    else:
        os.environ["RILLET_PURE"] = "1"
    saved = []
    for target, key, value in swaps:
        if isinstance(target, dict):
            saved.append((target, key, target[key]))
            target[key] = value
        else:
            saved.append((target, key, getattr(target, key)))
            setattr(target, key, value)
    try:
        yield lane_name
    finally:
        for target, key, value in reversed(saved):
            if isinstance(target, dict):
                target[key] = value
            else:
                setattr(target, key, value)
        if env_pure is None:
            os.environ.pop("RILLET_PURE", None)
        else:
            os.environ["RILLET_PURE"] = env_pure
