"""The Spark data pipeline through faults (issue 24), quick: scripts/spark_faults.py --quick on a 3-server
Rillet cluster (stream leader stepdowns, SIGKILLs, partitions when network namespaces are permitted; then a
batch write across a leader kill). Fails when any acknowledged value is missing or duplicated in the Parquet
output or the sink stream, the KV bucket is not at the last value of each key, or the batch write stored a row
twice or none of its tasks had to be tried again. About 2-3 minutes."""
from __future__ import annotations

import subprocess
import sys

from spark_support import ROOT


def test_spark_pipeline_through_faults_quick():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "spark_faults.py"), "--quick", "--seed", "6"],
                       capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    out = p.stdout + p.stderr
    print(out[-6000:])
    assert "RESULT: OK" in p.stdout, out[-4000:]
    assert p.returncode == 0
    for line in ("Parquet output:", "sink stream:", "kv: 5 keys, 5 with the last value", "batch write:"):
        assert line in p.stdout
