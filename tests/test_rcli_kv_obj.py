"""``rillet kv`` and ``rillet object`` against a live JetStream server."""
from __future__ import annotations

import json
import os

from tests.test_rcli_support import cli, fastcli, server  # noqa: F401  (fixtures)


def test_kv_commands(fastcli):
    cli = fastcli
    out = cli.ok("kv", "add", "CFG", "--history", "5", "--ttl", "1h", "--description", "settings")
    assert "Key-Value Store Bucket CFG" in out and "History Kept: 5" in out and "Maximum Age: 1h" in out
    assert cli.ok("kv", "put", "CFG", "color", "blue").strip() == "blue"
    assert cli.ok("kv", "put", "CFG", "color", input="red").strip() == "red"
    got = cli.ok("kv", "get", "CFG", "color")
    assert "CFG > color revision: 2" in got and "red" in got
    assert cli.ok("kv", "get", "CFG", "color", "--raw", "--revision", "1").strip() == "blue"
    entry = json.loads(cli.ok("kv", "get", "CFG", "color", "--json"))
    assert entry["value"] == "red" and entry["revision"] == 2 and entry["key"] == "color"

    assert cli.fails("kv", "create", "CFG", "color", "green") == "wrong last sequence: 2"
    cli.ok("kv", "create", "CFG", "shape", "round")
    assert cli.fails("kv", "update", "CFG", "color", "green", "1") == "wrong last sequence: 2"
    assert cli.ok("kv", "update", "CFG", "color", "green", "2").strip() == "green"
    hist = json.loads(cli.ok("kv", "history", "CFG", "color", "--json"))
    assert [(h["revision"], h["value"]) for h in hist] == [(1, "blue"), (2, "red"), (4, "green")]
    assert "History for CFG > color" in cli.ok("kv", "history", "CFG", "color")
    assert cli.ok("kv", "keys", "CFG").split() == ["color", "shape"]
    assert json.loads(cli.ok("kv", "keys", "CFG", "--json")) == ["color", "shape"]

    watch = cli.start("kv", "watch", "CFG", "--count", "3")
    try:
        watch.wait_for("Watching bucket CFG")
        cli.ok("kv", "del", "CFG", "shape", "-f")
        r = watch.finish()
    finally:
        watch.kill()
    assert r.rc == 0, r
    assert "PUT CFG > color: green" in r.out and "PUT CFG > shape: round" in r.out and "DEL CFG > shape" in r.out

    assert cli.fails("kv", "get", "CFG", "shape") == "key not found"
    assert cli.ok("kv", "keys", "CFG").split() == ["color"]
    assert "Purged key color" in cli.ok("kv", "purge", "CFG", "color", "-f")
    assert cli.ok("kv", "keys", "CFG").strip() == "No keys found in bucket"

    status = json.loads(cli.ok("kv", "status", "CFG", "--json"))
    assert status["bucket"] == "CFG" and status["history"] == 5 and status["ttl"] == 3600
    ls = cli.ok("kv", "ls")
    assert "CFG" in ls and "settings" in ls
    assert [b["bucket"] for b in json.loads(cli.ok("kv", "ls", "--json"))] == ["CFG"]
    assert cli.fails("kv", "get", "NOPE", "k") == "bucket NOPE not found"
    assert cli.fails("kv", "status", "NOPE") == "bucket NOPE not found"
    assert cli.fails("kv", "rm", "NOPE", "-f") == "bucket NOPE not found"
    assert cli.fails("kv", "rm", "CFG") == \
        "Really delete bucket CFG needs confirmation: add --force to do it without a prompt"
    assert "Deleted bucket CFG" in cli.ok("kv", "rm", "CFG", "-f")
    assert cli.ok("kv", "ls").strip() == "No Key-Value buckets found"


def test_object_store_commands(fastcli, tmp_path):
    cli = fastcli
    data = os.urandom(300_000)
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    assert "Object Store Bucket FILES" in cli.ok("object", "add", "FILES", "--description", "files")
    out = cli.ok("object", "put", "FILES", str(src))
    assert "Object information for FILES > blob.bin" in out and "Size: 293.0 KiB" in out and "Chunks: 3" in out
    cli.ok("object", "put", "FILES", "-", "--name", "note.txt", input="a note")
    assert cli.fails("object", "put", "FILES", str(src)) == \
        "Replace existing object FILES > blob.bin needs confirmation: add --force to do it without a prompt"
    objs = json.loads(cli.ok("object", "ls", "FILES", "--json"))
    assert [(o["name"], o["size"]) for o in objs] == [("blob.bin", 300_000), ("note.txt", 6)]
    assert "blob.bin" in cli.ok("object", "ls", "FILES")
    assert "FILES" in cli.ok("object", "ls")

    dst = tmp_path / "out"
    dst.mkdir()
    assert "Wrote: 293.0 KiB to blob.bin" in cli.ok("object", "get", "FILES", "blob.bin", cwd=str(dst))
    assert (dst / "blob.bin").read_bytes() == data
    r = cli("object", "get", "FILES", "note.txt", "-O", "-")
    assert r.rc == 0 and r.out == "a note"
    info = json.loads(cli.ok("object", "info", "FILES", "blob.bin", "--json"))
    assert info["size"] == 300_000 and info["digest"].startswith("SHA-256=")
    assert json.loads(cli.ok("object", "info", "FILES", "--json"))["description"] == "files"

    watch = cli.start("object", "watch", "FILES", "--count", "1")
    try:
        watch.wait_for("Watching bucket FILES")
        assert "Deleted object FILES > note.txt" in cli.ok("object", "rm", "FILES", "note.txt", "-f")
        r = watch.finish()
    finally:
        watch.kill()
    assert "DEL FILES > note.txt" in r.out, r
    assert cli.fails("object", "get", "FILES", "note.txt", "-O", str(tmp_path / "x")) == "object not found"
    assert cli.fails("object", "info", "FILES", "missing") == "object not found"

    assert "FILES has been sealed" in cli.ok("object", "seal", "FILES", "-f")
    assert json.loads(cli.ok("object", "info", "FILES", "--json"))["sealed"] is True
    assert "sealed" in cli.fails("object", "put", "FILES", str(src), "--name", "new.bin")
    assert cli.fails("object", "ls", "NOPE") == "bucket NOPE not found"
    assert cli.fails("object", "put", "FILES", str(tmp_path / "none")) == f"{tmp_path / 'none'}: no such file"
    assert "Deleted bucket FILES" in cli.ok("object", "rm", "FILES", "-f")


def test_progress_bar_wrappers_count_bytes(tmp_path):
    """The wrappers that feed the progress bars pass the data through and count it."""
    import io

    from rillet.cli.common import ProgressBar
    from rillet.cli.obj import _CountingReader, _CountingWriter

    class Recorder(ProgressBar):
        def __init__(self) -> None:
            self.p = None
            self.seen = 0

        def advance(self, n: int) -> None:
            self.seen += n

    bar = Recorder()
    reader = _CountingReader(io.BytesIO(b"x" * 1000), bar)
    buf = bytearray(300)
    sizes = []
    while n := reader.readinto(buf):
        sizes.append(n)
    assert sizes == [300, 300, 300, 100] and bar.seen == 1000
    out = io.BytesIO()
    w = _CountingWriter(out, bar)
    w.write(b"abc")
    assert out.getvalue() == b"abc" and bar.seen == 1003


def test_object_progress_bar_on_a_terminal(cli, tmp_path):
    """With stderr on a terminal, large transfers draw a rich progress bar there; stdout stays clean."""
    import pty
    import subprocess
    src = tmp_path / "large.bin"
    src.write_bytes(os.urandom(3 << 20))
    cli.ok("object", "add", "BARS")
    try:
        for args in (["object", "put", "BARS", str(src)],
                     ["object", "get", "BARS", "large.bin", "-O", str(tmp_path / "copy.bin")]):
            master, slave = pty.openpty()
            p = subprocess.run(cli.cmd(*args), stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                               env=cli.env, timeout=60)
            os.close(slave)
            drawn = b""
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                drawn += chunk
            os.close(master)
            assert p.returncode == 0, (p.stdout, drawn)
            assert b"3.1/3.1 MB" in drawn or b"3.1 MB" in drawn, drawn[-500:]
            assert b"\x1b[" not in p.stdout
        assert (tmp_path / "copy.bin").read_bytes() == src.read_bytes()
    finally:
        cli.ok("object", "rm", "BARS", "-f")
