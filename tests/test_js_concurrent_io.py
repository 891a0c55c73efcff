"""``jetstream { max_concurrent_io }`` (rillet/jetstream/diskio.py): parsed and bounded as nats-server 2.15.1 does
(4 to 8192; side by side with ``nats-server -t``), a JetStream server's blocking disk calls handed to threads never
more than the setting at once (the loop's thread and a pool of one less), a reload changing it refused as nats-server
refuses it; ``extension_hint`` refused with its reason (Rillet never extends a JetStream domain over leaf nodes)."""
from __future__ import annotations

import asyncio
import io
import re
import subprocess
import sys
import threading
import time

import nats
import pytest

from rillet.app.embed import run_server
from rillet.config.options_builder import load_string
from rillet.jetstream import diskio
from rillet.server.logging import Logger

GO = "nats-server"


def _run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


def _last(out):
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return re.sub(r"^nats-server: (\S+:\d+:\d+: )?", "", lines[-1]) if lines else ""


@pytest.mark.parametrize("extra", ["max_concurrent_io: 4", "max_concurrent_io: 8192", "max_concurrent_io: 2",
                                   "max_concurrent_io: 9000", 'max_concurrent_io: "x"', "max_concurrent_io: 1.5"])
def test_parse_like_nats_server(tmp_path, extra):
    conf = tmp_path / "c.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "js"}"\n {extra} }}\n')
    grc, gout = _run([GO, "-t", "-c", str(conf)])
    rrc, rout = _run([sys.executable, "-m", "rillet.server", "-t", "-c", str(conf)])
    assert (grc == 0) == (rrc == 0), (gout, rout)
    if grc:
        assert _last(rout) == _last(gout), (gout, rout)


def test_extension_hint_refused_with_its_reason(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "js"}"\n extension_hint: will_extend }}\n')
    rc, out = _run([sys.executable, "-m", "rillet.server", "-t", "-c", str(conf)])
    assert rc != 0 and "extends another domain over leaf node connections, which Rillet never does" in out


def test_pool_size():
    assert diskio.io_workers(4) == 3
    assert diskio.io_workers(8192) == diskio.python_pool_size()


async def test_blocking_calls_in_flight_bounded(tmp_path):
    text = f'listen: "127.0.0.1:-1"\njetstream {{ store_dir: "{tmp_path / "js"}", max_concurrent_io: 4 }}\n'
    async with run_server(load_string(text), log=Logger(out=io.StringIO())) as srv:
        loop = asyncio.get_running_loop()
        lock = threading.Lock()
        now = [0, 0]  # in flight, most at once

        def blocking() -> None:
            with lock:
                now[0] += 1
                now[1] = max(now[1], now[0])
            time.sleep(0.15)
            with lock:
                now[0] -= 1
        await asyncio.gather(*(loop.run_in_executor(None, blocking) for _ in range(12)))
        assert now[1] == 3  # (with the loop's own thread: 4)
        # the server's own disk work goes through that pool and still works
        nc = await nats.connect(srv.client_url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="S", subjects=["s"])
            for i in range(20):
                await js.publish("s", b"x%d" % i)
            assert (await js.stream_info("S")).state.messages == 20
        finally:
            await nc.close()
        with pytest.raises(ValueError, match=r"^config reload not supported for JetStreamConcurrentIOs: old=4, "
                                             r"new=4096$"):
            srv.reload(load_string(f'listen: "127.0.0.1:-1"\njetstream {{ store_dir: "{tmp_path / "js"}" }}\n'))
