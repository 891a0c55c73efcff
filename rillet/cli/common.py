"""What every command shares: connection options and contexts, errors, durations/sizes, output."""
from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Coroutine


class CliError(Exception):
    """A user-facing failure: printed as one line on stderr, exit status 1."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------------------------------------------
# Connection options: given on the root or on any command, then environment, then the context.

def _conn_option(default: Any, flags: list[str], env: str | None, help_text: str) -> Any:
    """A connection setting: its default, its command-line flags, its environment variable and its help."""
    return field(default=default, metadata={"flags": flags, "env": env, "help": help_text})


@dataclass
class Settings:
    """The effective connection settings (``settings()``); each option's flags, environment variable and help
    are declared with it (``CONN_OPTIONS``)."""
    url: str = _conn_option("nats://127.0.0.1:4222", ["--server", "-s"], "NATS_URL",
                            "NATS server URLs, comma separated [env NATS_URL]")
    context: str = _conn_option("", ["--context"], "NATS_CONTEXT", "Saved context to use [env NATS_CONTEXT]")
    user: str = _conn_option("", ["--user"], "NATS_USER", "Username or token [env NATS_USER]")
    password: str = _conn_option("", ["--password"], "NATS_PASSWORD", "Password [env NATS_PASSWORD]")
    token: str = _conn_option("", ["--token"], "NATS_TOKEN", "Authentication token [env NATS_TOKEN]")
    creds: str = _conn_option("", ["--creds"], "NATS_CREDS", "User credentials file (JWT and seed) [env NATS_CREDS]")
    nkey: str = _conn_option("", ["--nkey"], "NATS_NKEY", "User NKEY seed file [env NATS_NKEY]")
    cert: str = _conn_option("", ["--tlscert"], "NATS_CERT", "TLS client certificate file [env NATS_CERT]")
    key: str = _conn_option("", ["--tlskey"], "NATS_KEY", "TLS client private key file [env NATS_KEY]")
    ca: str = _conn_option("", ["--tlsca"], "NATS_CA", "TLS CA certificate file to verify the server [env NATS_CA]")
    timeout: float = _conn_option(5.0, ["--timeout"], "NATS_TIMEOUT",
                                  "Time to wait on responses from NATS, e.g. 5s [env NATS_TIMEOUT]")
    js_domain: str = _conn_option("", ["--js-domain"], None, "JetStream domain to talk to")
    js_api_prefix: str = _conn_option("", ["--js-api-prefix"], None, "JetStream API subject prefix (imported JetStream)")
    inbox_prefix: str = ""  # (from the context only)
    sources: dict[str, str] = field(default_factory=dict)  # where each setting came from: flag, env or context

    @property
    def js_prefix(self) -> str:
        if self.js_api_prefix:
            return self.js_api_prefix
        if self.js_domain:
            return f"$JS.{self.js_domain}.API"
        return "$JS.API"


# (flag names, settings key, environment variable, help) of each connection option
CONN_OPTIONS: list[tuple[list[str], str, str | None, str]] = [
    (f.metadata["flags"], f.name, f.metadata["env"], f.metadata["help"]) for f in fields(Settings) if f.metadata]

FLAGS: dict[str, Any] = {}  # settings given on the command line (root or command level)


def _store_flag(ctx: Any, param: Any, value: Any) -> Any:
    if value is not None:
        FLAGS[param.name] = value
    return value


_PARAMS: list[Any] = []


def _connection_params() -> list[Any]:
    """The connection options as typer/click parameter objects (built once, shared by all commands)."""
    if _PARAMS:
        return _PARAMS
    import inspect
    from typing import Optional

    import typer
    import typer.main

    def store(ctx, param, value):  # type: ignore[no-untyped-def]
        return _store_flag(ctx, param, value)

    store.__annotations__ = {"ctx": typer.Context, "param": typer.CallbackParam, "value": Optional[str]}

    params = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                                default=typer.Option(None, *flags, help=help_text, callback=store,
                                                     expose_value=False, metavar="TEXT"))
              for flags, key, _env, help_text in CONN_OPTIONS]

    def holder(**kw: Any) -> None:  # pragma: no cover - never run, only its signature is read
        pass

    holder.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    app = typer.Typer()
    app.command()(holder)
    keys = {key for _f, key, _e, _h in CONN_OPTIONS}
    _PARAMS.extend(p for p in typer.main.get_command(app).params if p.name in keys)
    return _PARAMS


def add_connection_options(cmd: Any) -> None:
    """Attach the connection options to a click command and, recursively, to all its sub-commands."""
    names = {n for p in cmd.params for n in getattr(p, "opts", [])}
    for p in _connection_params():
        if not any(f in names for f in p.opts):
            cmd.params.append(p)
    for sub in getattr(cmd, "commands", {}).values():
        add_connection_options(sub)


# ---------------------------------------------------------------------------------------------------
# Contexts


def config_dir() -> str:
    if os.environ.get("RILLET_CONFIG_DIR"):
        return os.environ["RILLET_CONFIG_DIR"]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "rillet")


def context_dir() -> str:
    return os.path.join(config_dir(), "context")


CONTEXT_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
CONTEXT_FIELDS = ["description", "url", "user", "password", "token", "creds", "nkey", "cert", "key", "ca",
                  "js_domain", "js_api_prefix", "inbox_prefix"]


def validate_context_name(name: str) -> None:
    if not CONTEXT_NAME_RE.match(name) or name in (".", ".."):
        raise CliError(f"invalid context name {name!r}: use letters, digits, '.', '_' and '-'")


def context_path(name: str) -> str:
    validate_context_name(name)
    return os.path.join(context_dir(), name + ".json")


def load_context(name: str) -> dict[str, Any]:
    path = context_path(name)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise CliError(f"unknown context {name!r}") from None
    except (OSError, ValueError) as e:
        raise CliError(f"could not load context {name!r}: {e}") from None
    if not isinstance(data, dict):
        raise CliError(f"could not load context {name!r}: not a JSON object")
    return data


def selected_context() -> str:
    try:
        with open(os.path.join(config_dir(), "context.txt")) as f:
            return f.read().strip()
    except OSError:
        return ""


def select_context(name: str) -> None:
    os.makedirs(config_dir(), exist_ok=True)
    with open(os.path.join(config_dir(), "context.txt"), "w") as f:
        f.write(name)


def settings() -> Settings:
    """The effective connection settings: command line, then environment, then the context."""
    s = Settings()
    env = {key: os.environ.get(envname) for _f, key, envname, _h in CONN_OPTIONS if envname}
    name = FLAGS.get("context") or env.get("context") or selected_context()
    ctx: dict[str, Any] = {}
    if name:
        ctx = load_context(name)
        s.context = name
    for _flags, key, _envname, _h in CONN_OPTIONS:
        if key == "context":
            continue
        for source, values in (("flag", FLAGS), ("env", env), ("context", ctx)):
            value = values.get(key)
            if value not in (None, ""):
                if key == "timeout":
                    value = parse_duration(str(value))
                setattr(s, key, value)
                s.sources[key] = source
                break
    if ctx.get("inbox_prefix"):
        s.inbox_prefix = ctx["inbox_prefix"]
    if "://" not in s.url.split(",")[0] and s.url:
        s.url = ",".join(u if "://" in u else f"nats://{u}" for u in s.url.split(","))
    return s


# ---------------------------------------------------------------------------------------------------
# Connecting


class Conn:
    """A nats-py connection plus the asynchronous errors the server sent (permissions, ...)."""

    def __init__(self) -> None:
        self.nc: Any = None
        self.errors: list[Exception] = []
        self.settings: Settings = Settings()

    def last_permission_error(self) -> str | None:
        for e in reversed(self.errors):
            if "permissions violation" in str(e).lower():
                return str(e).strip().strip("'").removeprefix("nats: ")
        return None


def _tls_context(s: Settings) -> Any:
    import ssl
    if not (s.cert or s.key or s.ca) and not s.url.startswith("tls://"):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=s.ca or None)
    if s.cert:
        try:
            ctx.load_cert_chain(s.cert, s.key or None)
        except (OSError, ssl.SSLError) as e:
            raise CliError(f"could not load the TLS certificate {s.cert}: {e}") from None
    return ctx


def import_nats(urls: str = "") -> Any:
    """Import nats-py; without WebSocket URLs, keep it from importing aiohttp (a third of the start time)."""
    if "nats" in sys.modules or "ws://" in urls or "wss://" in urls or "aiohttp" in sys.modules:
        import nats
        return nats
    sys.modules["aiohttp"] = None  # type: ignore[assignment]  # makes `import aiohttp` fail: no WebSocket
    try:
        import nats
    finally:
        if sys.modules.get("aiohttp", 0) is None:
            del sys.modules["aiohttp"]
    return nats


async def connect(*, reconnect: bool = False, name: str = "rillet cli", **extra: Any) -> Conn:
    s = settings()
    nats = import_nats(s.url)
    conn = Conn()
    conn.settings = s

    async def on_error(e: Exception) -> None:
        conn.errors.append(e)

    kw: dict[str, Any] = dict(servers=[u.strip() for u in s.url.split(",") if u.strip()],
                              name=name, error_cb=on_error, connect_timeout=max(1, int(s.timeout + 0.999)),
                              allow_reconnect=reconnect, max_reconnect_attempts=1, reconnect_time_wait=0.1)
    if s.user and s.password:
        kw["user"], kw["password"] = s.user, s.password
    elif s.user:
        kw["token"] = s.user
    if s.token:
        kw["token"] = s.token
    if s.creds:
        if not os.path.exists(s.creds):
            raise CliError(f"credentials file {s.creds} does not exist")
        kw["user_credentials"] = s.creds
    if s.nkey:
        if not os.path.exists(s.nkey):
            raise CliError(f"nkey seed file {s.nkey} does not exist")
        kw["nkeys_seed"] = s.nkey
    tls = _tls_context(s)
    if tls is not None:
        kw["tls"] = tls
    if s.inbox_prefix:
        kw["inbox_prefix"] = s.inbox_prefix
    kw.update(extra)
    try:
        conn.nc = await asyncio.wait_for(nats.connect(**kw), s.timeout + 1)
    except asyncio.TimeoutError:
        raise CliError(f"could not connect to {s.url}: timeout") from None
    except Exception as e:  # nats-py raises many kinds here: refused, auth, TLS, no servers
        reason = _connect_reason(e, conn)
        raise CliError(f"could not connect to {s.url}: {reason}") from None
    if reconnect:  # long-running commands keep trying once they were connected
        conn.nc.options["max_reconnect_attempts"] = -1
        conn.nc.options["reconnect_time_wait"] = 1.0
    return conn


def _connect_reason(e: Exception, conn: Conn) -> str:
    texts = [str(x).strip().strip("'") for x in conn.errors if str(x).strip()]
    text = str(e).strip().strip("'")
    if "authorization" in text.lower() or any("authorization" in t.lower() for t in texts):
        return "nats: Authorization Violation"
    if isinstance(e, ConnectionRefusedError) or "refused" in text.lower() or any("refused" in t.lower() for t in texts):
        return "connection refused"
    if text.startswith("nats: no servers available") and texts:
        return texts[-1]
    return text or type(e).__name__


# ---------------------------------------------------------------------------------------------------
# Running commands


async def next_msg(q: "asyncio.Queue[Any]", left: float) -> Any:
    """The next message of ``q`` within ``left`` seconds; None when none came (or no time is left)."""
    if left <= 0:
        return None
    try:
        return await asyncio.wait_for(q.get(), left)
    except asyncio.TimeoutError:
        return None


def run(coro_fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, **kwargs: Any) -> Any:
    """Run an async command body on uvloop (when available), turning failures into CliError."""
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    return runner(_guard(coro_fn, *args, **kwargs))


async def _guard(coro_fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, **kwargs: Any) -> Any:
    try:
        return await coro_fn(*args, **kwargs)
    except (CliError, BrokenPipeError):
        raise
    except Exception as e:
        raise CliError(describe_error(e)) from e


def describe_error(e: Exception) -> str:
    """One line for an exception raised by nats-py (or the OS)."""
    try:
        import nats.errors as ne
        import nats.js.errors as jse
    except ImportError:  # pragma: no cover
        return str(e) or type(e).__name__
    for cls, text in (("BucketNotFoundError", "bucket not found"), ("ObjectNotFoundError", "object not found"),
                      ("ObjectDeletedError", "object was deleted"), ("KeyDeletedError", "key was deleted"),
                      ("KeyNotFoundError", "key not found"), ("NoKeysError", "no keys found"),
                      ("DigestMismatchError", "object digest does not match"),
                      ("InvalidBucketNameError", "invalid bucket name"), ("InvalidKeyError", "invalid key"),
                      ("InvalidObjectNameError", "invalid object name")):
        if isinstance(e, getattr(jse, cls, ())):
            return text
    if isinstance(e, jse.KeyWrongLastSequenceError):
        return str(e).strip().removeprefix("nats: ")
    if isinstance(e, jse.APIError):
        if e.description:
            return e.description
        return f"JetStream API error {e.code}"
    if isinstance(e, ne.NoRespondersError):
        return "no responders available for request"
    if isinstance(e, (ne.TimeoutError, asyncio.TimeoutError)):
        return "timeout"
    if isinstance(e, jse.KeyNotFoundError):
        return "key not found"
    if isinstance(e, (ne.ConnectionClosedError, ne.StaleConnectionError)):
        return "connection closed"
    if isinstance(e, FileNotFoundError):
        return f"{e.filename}: no such file or directory"
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename + ': ' if e.filename else ''}{e.strerror}"
    text = str(e).strip().strip("'")
    return text or type(e).__name__


def fail(message: str) -> None:
    raise CliError(message)


# ---------------------------------------------------------------------------------------------------
# Durations and sizes (Go style, plus d/w/y like the nats CLI)

_DUR_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
              "d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0, "M": 30 * 86400.0}
_DUR_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d|w|y|M)")


def parse_duration(text: str) -> float:
    """Seconds for ``1h30m``, ``500ms``, ``2d``, ``1.5s``; a bare number is seconds."""
    t = text.strip()
    if not t:
        raise CliError("invalid duration \"\"")
    try:
        return float(t)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _DUR_RE.finditer(t):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DUR_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(t) or pos == 0:
        raise CliError(f"invalid duration {text!r}")
    return total


def to_nanos(seconds: float) -> int:
    return int(round(seconds * 1e9))


def format_duration(seconds: float | None) -> str:
    """Human duration like the nats CLI: 1d2h3m4s, 5.2ms."""
    if seconds is None:
        return ""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        if seconds < 1e-3:
            return f"{seconds * 1e6:.2f}µs"
        return f"{seconds * 1e3:.2f}ms"
    out, rest = [], int(seconds)
    frac = seconds - int(seconds)
    for unit, size in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    if rest or frac or not out:
        out.append(f"{rest + frac:.2f}".rstrip("0").rstrip(".") + "s" if frac else f"{rest}s")
    return "".join(out)


_SIZE_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([KMGTP]?)(I?B?)?\s*$", re.I)


def parse_size(text: str) -> int:
    """Bytes for ``1024``, ``10KB``, ``1.5MiB``, ``2G``; ``-1`` for unlimited."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise CliError(f"invalid size {text!r}")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def human_bytes(n: float | None) -> str:
    if n is None:
        return ""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n}"  # pragma: no cover


def human_count(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def limit(v: Any, fmt: Callable[[Any], str] = human_count) -> str:
    return "unlimited" if v in (None, -1, 0) else fmt(v)


# ---------------------------------------------------------------------------------------------------
# Output


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def console() -> Any:
    from rich.console import Console
    # not a terminal (pipes, tests): wide enough that tables are not squeezed
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS") or 200)
    return Console(highlight=False, soft_wrap=True, width=width)


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    """A boxed table on stdout (rich)."""
    from rich import box
    from rich.table import Table
    t = Table(title=title, box=box.ROUNDED, title_justify="left")
    for c in columns:
        t.add_column(c, no_wrap=False)
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    console().print(t)


class ProgressBar:
    """A rich transfer progress bar on stderr, only on a terminal and only when ``enabled``
    (``total`` None: not known)."""

    def __init__(self, label: str, total: int | None, enabled: bool) -> None:
        self.p = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)
            self.p = Progress(TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                              TimeRemainingColumn(), console=Console(stderr=True), transient=False)
            self.task = self.p.add_task(label, total=total)
            self.p.start()

    def advance(self, n: int) -> None:
        if self.p is not None:
            self.p.update(self.task, advance=n)

    def close(self) -> None:
        if self.p is not None:
            self.p.stop()


def print_fields(sections: list[tuple[str | None, list[tuple[str, Any]]]]) -> None:
    """Right-aligned ``label: value`` blocks, the way the nats CLI shows info pages."""
    rows = [(k, v) for _t, items in sections for k, v in items if v is not None]
    width = max((len(k) for k, _v in rows), default=10) + 2
    out: list[str] = []
    for title, items in sections:
        items = [(k, v) for k, v in items if v is not None]
        if not items:
            continue
        if title:
            out.append(f"{title}:")
            out.append("")
        for k, v in items:
            if isinstance(v, bool):
                v = "true" if v else "false"
            out.append(f"{k:>{width}}: {v}")
        out.append("")
    sys.stdout.write("\n".join(out) + "\n")


def log(message: str) -> None:
    """A timestamped progress line like the nats CLI's (``15:04:05 Published 5 bytes to "x"``)."""
    import time
    sys.stdout.write(time.strftime("%H:%M:%S ") + message + "\n")
    sys.stdout.flush()


def confirm(question: str, force: bool) -> None:
    """Ask before destroying something; without a terminal, --force is required."""
    if force:
        return
    if not sys.stdin.isatty():
        raise CliError(f"{question.rstrip('?')} needs confirmation: add --force to do it without a prompt")
    sys.stdout.write(f"{question} [y/N] ")
    sys.stdout.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise CliError("aborted", status=1)


def load_json_file(path: str) -> Any:
    try:
        with (sys.stdin if path == "-" else open(path)) as f:
            text = f.read()
    except OSError as e:
        raise CliError(f"could not read {path}: {e.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise CliError(f"invalid JSON in {path}: {e}") from None


def parse_headers(items: list[str] | None) -> dict[str, str] | None:
    if not items:
        return None
    out: dict[str, str] = {}
    for h in items:
        if ":" not in h:
            raise CliError(f"invalid header {h!r}: use KEY:VALUE")
        k, v = h.split(":", 1)
        if not k.strip():
            raise CliError(f"invalid header {h!r}: empty name")
        out[k.strip()] = v.strip()
    return out
