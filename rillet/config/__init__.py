"""The NATS configuration language and nats-server's command line, producing ``Options``."""
from .errors import ConfigError, Position
from .options_builder import build_options, load_file, load_string
from .parser import parse_file, parse_string
from rillet.gocompat.gotime import parse_go_duration

from .values import ConfigList, ConfigMap

__all__ = [
    "ConfigError", "Position", "ConfigMap", "ConfigList",
    "parse_file", "parse_string", "parse_go_duration",
    "build_options", "load_file", "load_string",
]
