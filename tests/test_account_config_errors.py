"""Bad exports, imports and mappings fail the configuration load with file:line:col and nats-server's words.

The messages were taken from ``nats-server -t`` (v2.15.1) on the same files; with
``RILLET_TEST_TARGET=nats-server`` this file runs ``nats-server -t`` and checks its messages too
(nats-server reports the errors it finds while wiring accounts together at 1:0, the position of the
accounts block; Rillet at the export or import entry, so positions are only checked for Rillet).
"""
from __future__ import annotations

import subprocess

import pytest

from tests.helpers import GO

ONE_ACC = """accounts {
  A { exports [ %s ] }
}
"""
IMPORT = """accounts {
  A { exports [ {stream: "foo.>"}, {service: "svc.*"}, {stream: "only.c", accounts: [C]} ] }
  B {
    imports [ %s ]
  }
  C {}
}
"""

CASES = [
    # (id, config text, position (line, col) in Rillet, message)
    ("unknown_export_account", ONE_ACC % '{stream: "foo", accounts: [ZZ]}', (2, 17),
     '"ZZ" account not defined for stream export'),
    ("bad_response_type", ONE_ACC % '{service: "foo", response: "sometimes"}', (2, 34),
     'Unknown response type: "sometimes"'),
    ("response_on_stream", ONE_ACC % '{stream: "foo", response: "stream"}', (2, 33),
     "Detected response directive on non-service"),
    ("bad_threshold", ONE_ACC % '{service: "foo", threshold: "abc"}', (2, 34),
     'Expected response threshold to be a parseable time duration, got "abc"'),
    ("exports_not_array", 'accounts {\n  A { exports { stream: "foo" } }\n}\n', (2, 7),
     "Exports should be an array, got map[string]interface {}"),
    ("unknown_import_account", IMPORT % '{stream: {account: NOPE, subject: "foo"}}', (4, 15),
     '"NOPE" account not defined for stream import'),
    ("unknown_service_account", IMPORT % '{service: {account: X, subject: "foo"}}', (4, 15),
     '"X" account not defined for service import'),
    ("missing_subject", IMPORT % '{stream: {account: A}}', (4, 16), "Expect an account name and a subject"),
    ("stream_entry_not_map", IMPORT % '{stream: "foo"}', (4, 16), "Stream entry should be an account map, got string"),
    ("not_exported", IMPORT % '{stream: {account: A, subject: "bar"}}', (4, 15),
     'Error adding stream import "bar": stream import not authorized'),
    ("service_not_exported", IMPORT % '{service: {account: A, subject: "foo.x"}}', (4, 15),
     'Error adding service import "foo.x": service import not authorized'),
    ("restricted_export", IMPORT % '{stream: {account: A, subject: "only.c"}}', (4, 15),
     'Error adding stream import "only.c": stream import not authorized'),
    ("invalid_import_subject", IMPORT % '{stream: {account: A, subject: "foo..b"}}', (4, 15),
     'Error adding stream import "foo..b": stream import not authorized'),
    ("prefix_and_to", IMPORT % '{stream: {account: A, subject: "foo.>"}, prefix: "p", to: "x"}', (4, 69),
     "Stream import can not have a 'prefix' and a 'to' property"),
    ("wildcard_prefix", IMPORT % '{stream: {account: A, subject: "foo.>"}, prefix: "bad.*"}', (4, 15),
     'Error adding stream import "foo.>": stream import prefix can not contain wildcard tokens'),
    ("bad_stream_to", IMPORT % '{stream: {account: A, subject: "foo.*"}, to: "bar.$3"}', (4, 15),
     'Error adding stream import "foo.*": failed to create mapping transform for stream import subject from '
     '"foo.*" to "bar.$3": invalid mapping destination: wildcard index out of range in $3: [3]'),
    ("bad_service_to", IMPORT % '{service: {account: A, subject: "svc.*"}, to: "bar.$2"}', (4, 15),
     'Error adding service import "svc.*": failed to create mapping transform for service import subject from '
     '"bar.$2" to "svc.*": invalid mapping destination: wildcard index out of range in $2: [2]'),
    ("bad_account_mapping", 'accounts {\n  A { mappings { "foo.*": "bar.{{wildcard(2)}}" } }\n}\n', (2, 18),
     'Error adding mapping for "foo.*" to "bar.{{wildcard(2)}}" : invalid mapping destination: wildcard index '
     "out of range in {{wildcard(2)}}: [2]"),
    ("account_weights_over_100", 'accounts {\n  A { mappings { foo: [ {destination: "a", weight: "60%"}, '
     '{destination: "b", weight: "50%"} ] } }\n}\n', (2, 18),
     'Error adding mapping for "foo" : total weight needs to be <= 100'),
    ("global_weights_over_100", 'mappings { "foo": [ {destination: "a", weight: "60%"}, '
     '{destination: "b", weight: "50%"} ] }\n', (1, 12),
     'Error adding mapping for "foo" : total weight needs to be <= 100'),
    ("global_bad_function", 'mappings { foo.*: "x.{{nope(1)}}" }\n', (1, 12),
     'Error adding mapping for "foo.*" to "x.{{nope(1)}}" : invalid mapping destination: unknown function in '
     "{{nope(1)}}"),
]


@pytest.mark.parametrize("text,pos,msg", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_account_config_error(tmp_path, text, pos, msg):
    path = tmp_path / "bad.conf"
    path.write_text(text)
    if GO:
        out = subprocess.run(["nats-server", "-t", "-c", str(path)], capture_output=True, text=True, timeout=10)
        assert out.returncode != 0 and f": {msg}" in out.stderr + out.stdout
        return
    from rillet.config.errors import ConfigError
    from rillet.config.options_builder import load_file
    with pytest.raises(ConfigError) as ei:
        load_file(str(path))
    assert str(ei.value) == f"{path}:{pos[0]}:{pos[1]}: {msg}"


def test_good_imports_load(tmp_path):
    path = tmp_path / "good.conf"
    path.write_text(IMPORT % '{stream: {account: A, subject: "foo.x"}, prefix: "p"}, '
                             '{service: {account: A, subject: "svc.*"}, to: "local.*"}')
    if GO:
        assert subprocess.run(["nats-server", "-t", "-c", str(path)], capture_output=True).returncode == 0
        return
    from rillet.config.options_builder import load_file
    assert set(load_file(str(path)).accounts) == {"A", "B", "C"}
