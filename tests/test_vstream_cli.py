"""``rillet vstream``: mappings, create, status and rm against a live server (one server standing in for
region ``west``: its mappings are the region's, not cluster scoped)."""
from __future__ import annotations

import json
import time

import pytest

from rillet.subjects.mapping import parse_mappings
from tests.helpers import ServerProcess, free_port
from tests.test_rcli_support import Cli

REGIONS = "west,central,east"


@pytest.fixture(scope="module")
def vserver(tmp_path_factory):
    d = tmp_path_factory.mktemp("vstream")
    # the command writes the file the server's configuration includes
    cli = Cli("nats://127.0.0.1:1", str(d / "config"), inprocess=True)
    out = cli.ok("vstream", "mappings", "foo", "--regions", REGIONS, "--local", "west",
                 "--out", str(d / "foo.mappings.conf"))
    assert "Wrote the mappings of virtual stream foo" in out
    conf = d / "server.conf"
    conf.write_text(f"""
listen: "127.0.0.1:{free_port()}"
jetstream {{ store_dir: "{d / 'js'}" }}
mappings {{ include "foo.mappings.conf" }}
""")
    proc = ServerProcess("-c", str(conf))
    try:
        proc.wait_ready()
        yield proc, d
    finally:
        proc.stop()


def _status(cli, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        st = json.loads(cli.ok("vstream", "status", "foo", "--json"))
        reads = [s for s in st["streams"] if s["role"] == "read"]
        if all(s.get("messages") == 2 for s in reads) or time.monotonic() > deadline:
            return st
        time.sleep(0.1)


def test_vstream_create_status_rm(vserver, tmp_path):
    proc, d = vserver
    cli = Cli(proc.client_url, str(tmp_path / "config"), inprocess=True)
    scoped = tmp_path / "scoped.conf"
    out = cli.ok("vstream", "create", "foo", "--regions", REGIONS, "--replicas", "1", "--placement", "none",
                 "--max-age", "1h", "--mappings-out", str(scoped))
    for r in REGIONS.split(","):
        assert f"Stream foo-write-{r} is ready" in out and f"Stream foo-read-{r} is ready" in out
    assert f'mappings {{ include "{scoped}" }}' in out
    # the written file is cluster scoped: each region's cluster maps to its own streams
    ms = parse_mappings(_parse_entries(scoped.read_text()))
    m = next(m for m in ms if m.match("foo.x"))
    assert {c: m.select("foo.x", c) for c in ("west", "east")} == {"west": "foo.west.x", "east": "foo.east.x"}
    # again: the same streams exist, nothing changes
    assert "Stream foo-read-east is ready" in cli.ok("vstream", "create", "foo", "--regions", REGIONS,
                                                     "--replicas", "1", "--placement", "none", "--max-age", "1h",
                                                     "--mappings-out", str(scoped))
    info = json.loads(cli.ok("stream", "info", "foo-write-central", "--json"))
    assert info["config"]["max_age"] == 3_600_000_000_000 and info["config"]["subjects"] == ["foo.central.>"]

    # this server is region west: publishes on foo.x land in foo-write-west, every read stream gets them
    for i in range(2):
        assert 'stored in stream "foo-write-west"' in cli.ok("pub", "-J", f"foo.k{i}", f"v{i}")
    st = _status(cli)
    by = {s["stream"]: s for s in st["streams"]}
    assert by["foo-write-west"]["messages"] == 2 and by["foo-write-east"]["messages"] == 0
    assert all(by[f"foo-read-{r}"]["messages"] == 2 for r in REGIONS.split(","))
    assert by["foo-read-east"]["replicas"] == 1 and by["foo-read-east"]["replicas_current"] == 1
    assert len(st["lag"]) == 9 and all(lg["lag"] == 0 for lg in st["lag"])
    assert {(lg["stream"], lg["origin"]) for lg in st["lag"]} == {
        (f"foo-read-{a}", f"foo-write-{b}") for a in REGIONS.split(",") for b in REGIONS.split(",")}
    # the virtual name through the ordinary commands
    assert json.loads(cli.ok("stream", "info", "foo", "--json"))["config"]["name"] == "foo-read-west"
    text = cli.ok("vstream", "status", "foo")
    assert "Virtual stream foo: streams" in text and "lag behind the write streams" in text
    assert "foo-read-central" in text and "1/1" in text

    # a region's stream that does not answer is shown with the error
    cli.ok("stream", "rm", "foo-read-east", "-f")
    st = json.loads(cli.ok("vstream", "status", "foo", "--regions", REGIONS, "--json"))
    gone = next(s for s in st["streams"] if s["stream"] == "foo-read-east")
    assert gone["error"] == "stream not found"

    assert cli.fails("vstream", "create", "foo", "--regions", REGIONS, "--replicas", "1", "--placement", "none",
                     "--max-age", "2h", "--mappings-out", str(scoped)).startswith(
        "could not create stream foo-write-west: stream name already in use with a different configuration")
    out = cli.ok("vstream", "rm", "foo", "-f")
    assert out.count("Deleted stream") == 5
    assert cli.fails("vstream", "status", "foo").startswith("no streams of virtual stream foo")


def _parse_entries(text):
    from rillet.config.parser import parse_string
    return parse_string("mappings {\n" + text + "\n}")["mappings"]


def test_vstream_argument_errors(tmp_path):
    cli = Cli("nats://127.0.0.1:1", str(tmp_path / "config"), inprocess=True)
    assert "invalid region name 'we.st'" in cli.fails("vstream", "mappings", "foo", "--regions", "we.st")
    assert "given twice" in cli.fails("vstream", "mappings", "foo", "--regions", "a,b,a")
    assert "invalid virtual stream name" in cli.fails("vstream", "mappings", "fo.o", "--regions", "a")
    assert "is not one of" in cli.fails("vstream", "mappings", "foo", "--regions", "a,b", "--local", "c")
    assert "invalid placement" in cli.fails("vstream", "create", "foo", "--regions", "a", "--placement", "x")
    m = json.loads(cli.ok("vstream", "mappings", "foo", "--regions", "a,b", "--json"))
    assert m["$JS.ACK.foo.>"] == [{"destination": "$JS.ACK.foo-read-a.>", "weight": "100%", "cluster": "a"},
                                  {"destination": "$JS.ACK.foo-read-b.>", "weight": "100%", "cluster": "b"}]
    j = json.loads(cli.ok("vstream", "mappings", "foo", "--regions", "a,b", "--jwt"))
    assert j["foo.>"] == [{"subject": "foo.a.>", "weight": 100, "cluster": "a"},
                          {"subject": "foo.b.>", "weight": 100, "cluster": "b"}]
    assert "do not go together" in cli.fails("vstream", "mappings", "foo", "--regions", "a", "--jwt", "--local", "a")
