"""``default_js_domain`` (nats-server): a leaf server without JetStream maps an account's JetStream API to a
domain, so that its clients use the hub's JetStream as if it were local (the NATS docs' leaf node set-up
without JetStream on the leaf). Rillet and nats-server as hub and leaf in every combination; the start-time
errors."""
from __future__ import annotations

import asyncio
import contextlib
import tempfile

import nats
import pytest

from tests.difftarget import go_server, rillet_server
from tests.helpers import free_port

HUB = '''listen: "127.0.0.1:{port}"
server_name: hub
jetstream {{ store_dir: "{dir}", domain: hub }}
leafnodes {{ listen: "127.0.0.1:{lport}" }}
accounts {{ A: {{ users: [ {{user: a, password: a}} ], jetstream: enabled }}, SYS: {{ users: [ {{user: s, password: s}} ] }} }}
system_account: SYS
'''
LEAF = '''listen: "127.0.0.1:{port}"
server_name: leaf
accounts {{ A: {{ users: [ {{user: a, password: a}} ] }} }}
default_js_domain: {{ A: hub }}
leafnodes {{ remotes [ {{ url: "nats://a:a@127.0.0.1:{lport}", account: A }} ] }}
'''

KINDS = {"rillet": rillet_server, "go": go_server}


@pytest.mark.parametrize("hub_kind,leaf_kind", [("rillet", "rillet"), ("go", "rillet"), ("rillet", "go"),
                                                ("go", "go")])
async def test_leaf_clients_use_the_hubs_jetstream(hub_kind, leaf_kind):
    domain = "hub"
    hp, lp, leafp = free_port(), free_port(), free_port()
    hub, leaf = HUB.format(port=hp, dir="{dir}", lport=lp), LEAF.format(port=leafp, lport=lp)
    with tempfile.TemporaryDirectory() as d:
        async with contextlib.AsyncExitStack() as st:
            await st.enter_async_context(KINDS[hub_kind](hub.replace("{dir}", d)))
            await st.enter_async_context(KINDS[leaf_kind](leaf))
            nc = await nats.connect(f"nats://a:a@127.0.0.1:{leafp}", max_reconnect_attempts=0)
            st.push_async_callback(nc.close)
            js = nc.jetstream()
            info = None
            for _ in range(100):  # (the leaf connection and its interest take a moment)
                try:
                    info = await js.account_info()
                    break
                except Exception:
                    await asyncio.sleep(0.1)
            assert info is not None and (info.domain or "") == domain, info
            await js.add_stream(name="S", subjects=["s.>"])
            ack = await js.publish("s.1", b"hello")
            assert (ack.stream, ack.seq, ack.domain or "") == ("S", 1, domain)
            kv = await js.create_key_value(bucket="B")
            await kv.put("k", b"v")
            assert (await kv.get("k")).value == b"v"


@pytest.mark.parametrize("conf,msg", [
    ('default_js_domain: { X: hub }', 'in non operator mode, `default_js_domain` references non existing account "X"'),
    ('accounts { A: { jetstream: enabled } }\ndefault_js_domain: { A: hub }',
     'default_js_domain contains account name "A" with enabled JetStream'),
    ('accounts { A: {} }\ndefault_js_domain: { A: "a b" }',
     'default_js_domain contains account "A" with invalid domain name "a b"'),
    ('accounts { A: {}, SYS: {} }\nsystem_account: SYS\ndefault_js_domain: { SYS: hub }',
     'system account "SYS" can not be in default_js_domain'),
])
def test_start_errors(tmp_path, conf, msg):
    """(and an empty domain adds no mapping: tests/test_default_js_domain.py::test_empty_domain_maps_nothing)"""
    from rillet.app.compose import build_server
    from rillet.config.flags import parse_command_line
    p = tmp_path / "s.conf"
    p.write_text(f"listen: 127.0.0.1:-1\n{conf}\n")
    with pytest.raises(ValueError) as ei:
        build_server(parse_command_line(["-c", str(p)]).options)
    assert msg in str(ei.value)


async def test_empty_domain_maps_nothing():
    async with rillet_server('listen: "127.0.0.1:-1"\naccounts { A: {}, B: {} }\n'
                             'default_js_domain: { A: "", B: hub }\n') as srv:
        assert srv.accounts["A"].mappings == []
        assert {m.src for m in srv.accounts["B"].mappings} >= {"$JS.API.INFO", "$JS.API.STREAM.>", "$KV.>"}
