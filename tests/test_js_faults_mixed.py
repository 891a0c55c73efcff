"""The Jepsen-style JetStream fault run on mixed clusters of nats-server and Rillet (issue 22), quick:
scripts/js_faults.py --quick on 1 Go + 2 Rillet (``mixed1``) and 2 Go + 1 Rillet (``mixed2``), the Rillet servers
members of the Go servers' JetStream cluster (``rillet_go_meta`` and ``rillet_go_meta_lead``): each kind of fault
once (SIGKILL of the stream leader, of a random server and of two servers; SIGSTOP; partitions when network
namespaces are permitted), then heal and check: every acknowledged value in the stream once and consumed, nothing
refused stored, the KV history linearizable, every acknowledged stream and consumer still on every server, and
every server's replica read back the same when it leads. About a minute a mix."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")
@pytest.mark.parametrize("mix,kinds", [("mixed1", "n0(go) n1(rillet) n2(rillet)"),
                                       ("mixed2", "n0(go) n1(go) n2(rillet)")])
def test_js_fault_run_on_a_mixed_cluster_quick(mix, kinds):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "js_faults.py"), "--server", mix, "--quick",
                        "--seed", "203"], capture_output=True, text=True, timeout=400, cwd=str(ROOT))
    out = p.stdout + p.stderr
    print(out[-6000:])
    assert f"==== js_faults report: server {mix} ({kinds}), seed 203" in p.stdout, out[-4000:]
    assert "RESULT: OK" in p.stdout, out[-4000:]
    assert p.returncode == 0
    m = re.search(r"queue: attempted (\d+), acked (\d+)", p.stdout)
    assert m and int(m.group(2)) > 0
    assert re.search(r"queue: lost 0, duplicated 0, unexpected 0, refused-but-stored 0", p.stdout)
    assert p.stdout.count("linearizable (") == 3 and "NOT linearizable" not in p.stdout
