"""The NATS configuration language and nats-server's command line, producing ``Options``.

The names below load on first use (issue 20: a server started with command-line flags alone does not load the
configuration file's parser and builders)."""
from typing import Any

__all__ = [
    "ConfigError", "Position", "ConfigMap", "ConfigList",
    "parse_file", "parse_string", "parse_go_duration",
    "build_options", "load_file", "load_string",
]


def __getattr__(name: str) -> Any:
    module: Any
    if name in ("ConfigError", "Position"):
        from rillet.config import errors as module
    elif name in ("build_options", "load_file", "load_string"):
        from rillet.config import options_builder as module
    elif name in ("parse_file", "parse_string"):
        from rillet.config import parser as module
    elif name in ("ConfigMap", "ConfigList"):
        from rillet.config import values as module
    elif name == "parse_go_duration":
        from rillet.gocompat import gotime as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
