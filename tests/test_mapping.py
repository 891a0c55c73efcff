"""Subject transforms and account mappings (rillet.subjects.mapping).

Expected partition numbers and function outputs were taken from nats-server v2.15.1
(config ``mappings {}`` block, publishing with nats-py and reading the delivered subjects).
"""
import collections

import pytest

from rillet.config.parser import parse_string
from rillet.subjects.mapping import Mapping, SubjectTransform, fnv1a32, parse_mappings


def tr(src, dest, subject):
    t = SubjectTransform(src, dest)
    assert t.match(subject)
    return t.transform(subject)


# --- values from the real nats-server ---------------------------------------------------------

GO_PARTITIONS = [  # "p.*": "out.p.{{partition(10,1)}}"
    ("p.a", "out.p.0"), ("p.b", "out.p.7"), ("p.foo", "out.p.3"), ("p.bar", "out.p.2"),
    ("p.order-1", "out.p.9"), ("p.order-2", "out.p.2"), ("p.12345", "out.p.4"), ("p.xyz", "out.p.8"),
]


@pytest.mark.parametrize("subject,expected", GO_PARTITIONS)
def test_partition_matches_go(subject, expected):
    assert tr("p.*", "out.p.{{partition(10,1)}}", subject) == expected


def test_partition_multi_token_and_whole_subject_match_go():
    d = "out.q.{{partition(7,2,1)}}.{{wildcard(1)}}"
    assert tr("q.*.*", d, "q.x.y") == "out.q.1.x"
    assert tr("q.*.*", d, "q.alpha.beta") == "out.q.6.alpha"
    assert tr("q.*.*", d, "q.1.2") == "out.q.1.1"
    assert tr("r.>", "out.r.{{partition(5)}}.>", "r.a.b.c") == "out.r.1.a.b.c"
    assert tr("r.>", "out.r.{{partition(5)}}.>", "r.zz") == "out.r.0.zz"
    assert tr("s", "out.s.{{partition(3)}}", "s") == "out.s.1"
    assert tr("s", "out.s.{{partition(0)}}", "s") == "out.s.0"


def test_fnv1a32():
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C
    assert fnv1a32(b"foobar") == 0xBF9CF968


FN_DEST = ("out.t.{{splitFromLeft(1,3)}}.{{splitFromRight(1,3)}}.{{sliceFromLeft(1,2)}}."
           "{{sliceFromRight(1,2)}}.{{left(1,2)}}.{{right(1,2)}}.{{split(1,-)}}")


@pytest.mark.parametrize("subject,expected", [
    ("t.abcdefg", "out.t.abc.defg.abcd.efg.ab.cd.ef.g.a.bc.de.fg.ab.fg.abcdefg"),
    ("t.a-b--c-", "out.t.a-b.--c-.a-b-.-c-.a-.b-.-c.-.a.-b.--.c-.a-.c-.a.b.c"),
    ("t.-ab-", "out.t.-ab.-.-.ab-.-a.b-.-a.b-.-a.b-.ab"),
    ("t.ab", "out.t.ab.ab.ab.ab.ab.ab.ab"),
])
def test_functions_match_go(subject, expected):
    assert tr("t.*", FN_DEST, subject) == expected


# --- each function --------------------------------------------------------------------------


def test_wildcard_and_legacy_dollar():
    assert tr("a.*.*", "b.{{wildcard(2)}}.{{wildcard(1)}}", "a.x.y") == "b.y.x"
    assert tr("a.*.*", "b.$2.$1", "a.x.y") == "b.y.x"
    assert tr("a.*.*", "b.{{ Wildcard( 1 ) }}", "a.x.y") == "b.x"
    assert tr("a.*.>", "b.$1.>", "a.x.y.z") == "b.x.y.z"
    assert tr("a.>", "b.>", "a.x") == "b.x"
    # a $ token that is not a number stays as it is
    assert tr("a.*", "$foo.$1", "a.x") == "$foo.x"
    # literal source, literal destination
    assert tr("a", "b.c", "a") == "b.c"


def test_split_functions():
    assert tr("a.*", "{{split(1,-)}}", "a.x-y-z") == "x.y.z"
    assert tr("a.*", "{{split(1,-)}}", "a.--b") == ".b"  # as nats-server joins the pieces
    assert tr("a.*", "{{split(1,-)}}", "a.xyz") == "xyz"
    assert tr("a.*", "{{splitFromLeft(1,2)}}", "a.abcd") == "ab.cd"
    assert tr("a.*", "{{splitFromLeft(1,9)}}", "a.abcd") == "abcd"
    assert tr("a.*", "{{splitFromRight(1,1)}}", "a.abcd") == "abc.d"


def test_slice_left_right():
    assert tr("a.*", "{{sliceFromLeft(1,3)}}", "a.abcdefgh") == "abc.def.gh"
    assert tr("a.*", "{{sliceFromRight(1,3)}}", "a.abcdefgh") == "ab.cde.fgh"
    assert tr("a.*", "{{sliceFromLeft(1,2)}}", "a.abcd") == "ab.cd"
    assert tr("a.*", "{{left(1,3)}}", "a.abcdef") == "abc"
    assert tr("a.*", "{{right(1,3)}}", "a.abcdef") == "def"
    assert tr("a.*", "{{right(1,0)}}", "a.abcdef") == "abcdef"


def test_random():
    t = SubjectTransform("a.*", "r.{{random(4)}}.$1")
    seen = {t.transform("a.x") for _ in range(400)}
    assert seen == {"r.0.x", "r.1.x", "r.2.x", "r.3.x"}


def test_match():
    t = SubjectTransform("a.*.c.>", "x.$1.>")
    assert t.match("a.b.c.d")
    assert t.match("a.b.c.d.e")
    assert not t.match("a.b.c")
    assert not t.match("a.b.x.d")
    assert t.match_transform("a.b.c.d.e") == "x.b.d.e"
    assert t.match_transform("z.b.c.d") is None
    lit = SubjectTransform("foo", "bar")
    assert lit.match("foo") and not lit.match("foo.bar")


# --- invalid transforms -----------------------------------------------------------------------

IDX = "invalid mapping destination: wildcard index out of range in "


@pytest.mark.parametrize("src,dest,err", [  # texts as nats-server -t prints them
    ("foo.*", "bar.{{wildcard(2)}}", IDX + "{{wildcard(2)}}: [2]"),
    ("foo.*", "bar.$2", IDX + "$2: [2]"),
    ("foo", "bar.{{wildcard(1)}}", IDX + "{{wildcard(1)}}"),
    ("foo.*", "bar.{{bogus(1)}}", "invalid mapping destination: unknown function in {{bogus(1)}}"),
    ("foo.*", "bar.*", "invalid subject"),
    ("foo.>", "bar", "invalid subject"),
    ("foo..x", "bar", "invalid subject"),
    ("foo.*", "bar.{{partition(a,1)}}",
     "invalid mapping destination: function argument is invalid or in the wrong format in {{partition(a,1)}}"),
    ("foo.*", "bar.{{split(1)}}",
     "invalid mapping destination: not enough arguments passed to the function in {{split(1)}}"),
    ("foo.*", "bar.{{left(1,2,3)}}",
     "invalid mapping destination: too many arguments passed to the function in {{left(1,2,3)}}"),
    ("foo.*", "bar.{{wildcard()}}",
     "invalid mapping destination: not enough arguments passed to the function in {{wildcard()}}"),
])
def test_invalid_transforms(src, dest, err):
    with pytest.raises(ValueError) as ei:
        SubjectTransform(src, dest)
    assert str(ei.value) == err


# --- weighted mappings ------------------------------------------------------------------------


def test_single_destination_is_100_percent():
    m = Mapping("foo.*", [("bar.$1", None, "")])
    assert all(m.select("foo.x", "", r / 10) == "bar.x" for r in range(10))
    m = Mapping("foo", ["bar"])
    assert m.select("foo", "", 0.99) == "bar"


def test_weights_over_100_rejected():
    with pytest.raises(ValueError, match="^total weight needs to be <= 100$"):
        Mapping("foo", [("a", 60, ""), ("b", 50, "")])
    with pytest.raises(ValueError, match="^individual weights need to be <= 100$"):
        Mapping("foo", [("a", 160, "")])
    with pytest.raises(ValueError, match='^duplicate entry for "a"$'):
        Mapping("foo", [("a", 10, ""), ("a", 10, "")])
    # per cluster totals are separate
    Mapping("foo", [("a", 60, ""), ("b", 60, "east")])


def test_weighted_selection_and_remainder():
    # remainder keeps the original subject (source not listed), as nats-server does
    m = Mapping("w", [("w1", 50, "")])
    assert m.select("w", "", 0.49) == "w1"
    assert m.select("w", "", 0.50) == "w"
    # source listed explicitly: the remainder is dropped (artificial loss)
    m = Mapping("l", [("l1", 50, ""), ("l", 10, "")])
    assert m.select("l", "", 0.05) == "l"
    assert m.select("l", "", 0.30) == "l1"
    assert m.select("l", "", 0.75) is None
    counts = collections.Counter(m.select("l", "", i / 10000) for i in range(10000))
    assert counts == {"l1": 5000, "l": 1000, None: 4000}
    # random draws
    m = Mapping("x.*", [("a.$1", 20, ""), ("b.$1", 80, "")])
    counts = collections.Counter(m.select("x.k") for _ in range(20000))
    assert abs(counts["a.k"] / 20000 - 0.2) < 0.02 and abs(counts["b.k"] / 20000 - 0.8) < 0.02


def test_cluster_scoped():
    m = Mapping("foo", [("main", 100, ""), ("east.foo", 100, "east"), ("west.foo", 50, "west")])
    assert m.select("foo", "east", 0.9) == "east.foo"
    assert m.select("foo", "west", 0.1) == "west.foo"
    assert m.select("foo", "west", 0.9) == "foo"
    assert m.select("foo", "other", 0.9) == "main"
    assert m.select("foo", "", 0.9) == "main"
    # only cluster entries: elsewhere the subject is unchanged
    m = Mapping("foo", [("east.foo", 100, "east")], cluster_name="east")
    assert m.select("foo") == "east.foo"
    assert m.select("foo", "west") == "foo"


# --- config ---------------------------------------------------------------------------------


def test_parse_mappings_from_config():
    raw = parse_string("""
    mappings {
      "foo.*": "bar.{{partition(10,1)}}"
      "a": [{destination: b, weight: "50%"}, {destination: c, weight: 30, cluster: x}]
      "s": {dest: t, weight: 20}
    }""")["mappings"]
    ms = parse_mappings(raw, "x")
    assert [m.src for m in ms] == ["foo.*", "a", "s"]
    assert ms[0].match("foo.a") and ms[0].select("foo.a") == "bar.0"
    assert ms[1].select("a", None, 0.1) == "c"  # cluster x from parse_mappings
    assert ms[1].select("a", "", 0.1) == "b"
    assert ms[2].select("s", "", 0.1) == "t" and ms[2].select("s", "", 0.5) == "s"


@pytest.mark.parametrize("raw,err", [
    ({"foo.*": "bar.{{wildcard(2)}}"},
     'Error adding mapping for "foo.*" to "bar.{{wildcard(2)}}" : ' + IDX + "{{wildcard(2)}}: [2]"),
    ({"foo": [{"destination": "a", "weight": 60}, {"destination": "b", "weight": 50}]},
     'Error adding mapping for "foo" : total weight needs to be <= 100'),
    ({"foo": [{"destination": "a", "weight": 160}]}, "Invalid weight 160 for mapping destination"),
    ({"foo": [{"destination": "a", "weight": "x%"}]}, 'Invalid weight "x" for mapping destination'),
    ({"foo": [{"destination": "a"}]}, 'Missing weight for mapping destination "a"'),
    ({"foo..": "a"}, 'Subject "foo.." is not a valid subject'),
])
def test_parse_mappings_errors(raw, err):
    with pytest.raises(ValueError) as ei:
        parse_mappings(raw, "")
    assert str(ei.value) == err


# --- partition distribution -------------------------------------------------------------------


def test_partition_distribution_even():
    """The issue's claim: over 1,000,000 keys each of 10 partitions gets its share within 1%."""
    n, parts = 1_000_000, 10
    tf = SubjectTransform("k.*", "p.{{partition(10,1)}}").transform
    counts = collections.Counter(tf(f"k.{i}") for i in range(n))
    assert len(counts) == parts
    for c in counts.values():
        assert abs(c - n / parts) < n / parts * 0.01


@pytest.mark.parametrize("n", [1, 3, 7, 10, 64, 5000, 100_000])
def test_partition_fast_path_is_fnv1a(n):
    """The partition op's hash (mask once at the end) equals Go's FNV-1a 32 for any key and count."""
    import random
    rnd = random.Random(n)
    tf = SubjectTransform("k.*", "{{partition(%d,1)}}" % n).transform
    keys = ["", "a", "é" * 40, "x" * 300] + [
        "".join(rnd.choice("abcXYZ019-_é") for _ in range(rnd.randint(1, 40))) for _ in range(300)]
    for k in keys:
        if k:
            assert tf(f"k.{k}") == str(fnv1a32(k.encode()) % n), k


async def test_partitions_stable_across_restart_and_same_as_go(tmp_path):
    """A sample published through a partition mapping lands in the same partitions before and after a
    server restart, and in the ones nats-server picks."""
    import asyncio

    import nats

    from tests.helpers import ServerProcess, free_port
    conf = tmp_path / "m.conf"
    keys = [f"cust-{i}" for i in range(300)]

    async def sample(command):
        port = free_port()
        conf.write_text(f'listen: "127.0.0.1:{port}"\nmappings {{ "k.*": "p.{{{{partition(16,1)}}}}.{{{{wildcard(1)}}}}" }}\n')
        proc = ServerProcess("-c", str(conf), command=command)
        try:
            await asyncio.get_running_loop().run_in_executor(None, proc.wait_ready)
            nc = await nats.connect(f"nats://127.0.0.1:{port}")
            sub = await nc.subscribe("p.>")
            await nc.flush()
            for k in keys:
                await nc.publish(f"k.{k}", b"")
            got = {}
            for _ in keys:
                m = await sub.next_msg(timeout=2)
                _, part, key = m.subject.split(".")
                got[key] = int(part)
            await nc.close()
            return got
        finally:
            proc.stop()

    import sys
    first = await sample([sys.executable, "-m", "rillet.server"])
    again = await sample([sys.executable, "-m", "rillet.server"])
    assert first == again and len(first) == len(keys)
    assert set(first.values()) == set(range(16))
    assert first == {k: fnv1a32(k.encode()) % 16 for k in keys}
    go = await sample(["nats-server"])
    assert go == first


async def test_config_mappings_applied_on_publish():
    import nats

    from rillet.server import Options
    from rillet.app.embed import run_server
    o = Options(host="127.0.0.1", port=-1, mappings={"orders.*": "eu.orders.{{wildcard(1)}}",
                                                      "drop": [{"destination": "drop", "weight": "0%"}]})
    async with run_server(o) as srv:
        nc = await nats.connect(srv.client_url)
        sub = await nc.subscribe("eu.orders.>")
        raw = await nc.subscribe("orders.*")
        await nc.publish("orders.42", b"x")
        await nc.publish("orders.43", b"y", headers={"k": "v"})
        m1 = await sub.next_msg(timeout=1)
        m2 = await sub.next_msg(timeout=1)
        assert (m1.subject, m1.data, m2.subject, m2.headers["k"]) == ("eu.orders.42", b"x", "eu.orders.43", "v")
        with pytest.raises(nats.errors.TimeoutError):
            await raw.next_msg(timeout=0.2)
        await nc.close()


def test_bad_mapping_refuses_to_start():
    from rillet.server import Options
    from rillet.app.compose import build_server
    with pytest.raises(ValueError):
        build_server(Options(mappings={"foo.*": "bar.{{wildcard(2)}}"}))
