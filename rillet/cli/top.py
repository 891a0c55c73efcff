"""``rillet top``: what ``nats-top`` is, a live terminal view of one server's connections.

It polls the monitoring port (``/varz`` and ``/connz?limit=N&sort=KEY[&subs=1]``) every ``-d`` seconds and
shows the server's load and traffic (totals and rates per second) and one line per connection. Works with
Rillet and with the Go nats-server: only the monitoring endpoints' JSON is read.

Flags are nats-top's (Go style): ``-s HOST`` ``-m PORT`` ``-ms HTTPS_PORT`` ``-n CONNS`` ``-d SECONDS``
``-sort KEY`` ``-lookup`` ``-o FILE`` (one snapshot to FILE, ``-`` for stdout, then exit) ``-l DELIM`` (the
snapshot as delimited text) ``-b`` (raw byte counts) ``-r N`` (exit after N refreshes) ``-cert``/``-key``/
``-cacert``/``-k`` (TLS to the HTTPS port) ``-u`` (subscriptions column) ``-v``. Keys, as nats-top's:
``o`` sort key, ``n`` connection limit, ``s`` subscriptions, ``d`` DNS lookup, ``b`` raw bytes,
space: per-connection rates, ``?``/``h`` help, ``q``/Ctrl-C quit.
"""
from __future__ import annotations

import json
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from rillet.cli.goflags import FlagError, FlagSet, HelpRequested, tool_version, usage_error

HELP = "Live view of a server's connections from its monitoring port (the nats-top tool: -s, -m, -n, -d, -sort)."
EXAMPLE = "rillet top -s 127.0.0.1 -m 8222 -n 10 -sort bytes_to"  # (the `rillet` help lists the command with it)

USAGE = """
usage: rillet top [-s server] [-m http_port] [-ms https_port] [-n num_connections] [-d delay_secs] [-r max]
                  [-o FILE] [-l DELIMITER] [-sort by] [-cert FILE] [-key FILE] [-cacert FILE] [-k] [-b]
                  [-lookup] [-v|--version] [-u|--display-subscriptions-column]

"""

# the sort keys /connz takes (nats-server's SortOpt)
SORT_KEYS = ("cid", "start", "subs", "pending", "msgs_to", "msgs_from", "bytes_to", "bytes_from", "last",
             "idle", "uptime", "stop", "reason", "rtt")

STANDARD_HEADERS = ["SUBS", "PENDING", "MSGS_TO", "MSGS_FROM", "BYTES_TO", "BYTES_FROM", "LANG", "VERSION",
                    "UPTIME", "LAST_ACTIVITY"]
COLUMN_WIDTHS = [6, 10, 10, 10, 10, 10, 7, 7, 7, 40]
HOST_WIDTH = 15
PROMPT_ROW = 6  # the blank line under the server block (0-based), where nats-top asks for a sort key or limit

HELP_TEXT = """
Command          Description

o<option>        Set primary sort key to <option>.

                 Option can be one of: {cid|subs|pending|msgs_to|msgs_from|
                 bytes_to|bytes_from|idle|last}

                 This can be set in the command line too with -sort flag.

n<limit>         Set sample size of connections to request from the server.

                 This can be set in the command line as well via -n flag.
                 Note that if used in conjunction with sort, the server
                 would respect both options allowing queries like 'connection
                 with largest number of subscriptions': -n 1 -sort subs

s                Toggle displaying connection subscriptions.

d                Toggle activating DNS address lookup for clients.

b                Toggle displaying raw bytes.

space            Toggle displaying rates per second in connections.

q                Quit.

Press any key to continue...
"""


class TopError(Exception):
    pass


# ---- sizes, as nats-top prints them -------------------------------------------------------------------------

def psize(raw: bool, n: float) -> str:
    """Bytes: 1024-based K/M/G with one decimal (or the raw number)."""
    if raw or n < 1024:
        return f"{n:.0f}"
    if n < 1024 ** 2:
        return f"{n / 1024:.1f}K"
    if n < 1024 ** 3:
        return f"{n / 1024 ** 2:.1f}M"
    return f"{n / 1024 ** 3:.1f}G"


def nsize(raw: bool, n: float) -> str:
    """Counts: 1000-based K/M/B/T with one decimal (or the raw number)."""
    if raw or n < 1e3:
        return f"{n:.0f}"
    for limit, unit in ((1e6, "K"), (1e9, "M"), (1e12, "B")):
        if n < limit:
            return f"{n / (limit / 1e3):.1f}{unit}"
    return f"{n / 1e12:.1f}T"


def go_time_text(rfc3339: str) -> str:
    """A time as Go prints a time.Time (``2006-01-02 15:04:05.999999999 -0700 MST``), nats-top's
    LAST_ACTIVITY column."""
    from rillet.gocompat.gotime import parse_time
    if not rfc3339:
        return ""
    try:
        ns, off = parse_time(rfc3339)
    except ValueError:
        return rfc3339
    local = ns + off * 1_000_000_000
    secs, frac = divmod(local, 1_000_000_000)
    tm = time.gmtime(secs)
    text = time.strftime("%Y-%m-%d %H:%M:%S", tm)
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    sign = "-" if off < 0 else "+"
    hh, mm = divmod(abs(off) // 60, 60)
    zone = f"{sign}{hh:02d}{mm:02d}"
    return f"{text} {zone} {'UTC' if off == 0 and rfc3339.endswith('Z') else zone}"


# ---- polling ----------------------------------------------------------------------------------------------

@dataclass
class Stats:
    varz: dict = field(default_factory=dict)
    connz: dict = field(default_factory=dict)
    in_msgs_rate: float = 0.0
    out_msgs_rate: float = 0.0
    in_bytes_rate: float = 0.0
    out_bytes_rate: float = 0.0
    conn_rates: dict[int, tuple[float, float, float, float]] = field(default_factory=dict)
    error: str = ""


@dataclass(eq=False)
class Engine:
    """Fetches /varz and /connz and computes the rates between two polls."""

    base: str
    conns: int
    sort: str
    delay: float
    ssl_ctx: ssl.SSLContext | None = None
    display_subs: bool = False
    # the state between polls
    show_rates: bool = field(default=False, init=False)
    last: Stats | None = field(default=None, init=False)
    last_conns: dict[int, dict] = field(default_factory=dict, init=False)
    last_poll: float = field(default=0.0, init=False)

    def request(self, path: str) -> dict:
        url = self.base + path
        if path == "/connz":
            url += f"?limit={self.conns}&sort={self.sort}"
            if self.display_subs:
                url += "&subs=1"
        try:
            with urllib.request.urlopen(url, timeout=max(2.0, self.delay * 2), context=self.ssl_ctx) as r:
                body = r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace").splitlines()
            raise TopError(f"stats request failed {e.code}: {(text[0] if text else '')[:80]!r}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise TopError(f"could not get stats from server: {reason}") from None
        try:
            d = json.loads(body)
        except ValueError as e:
            raise TopError(f"could not unmarshal statz json: {e}") from None
        if not isinstance(d, dict):
            raise TopError("could not unmarshal statz json: not an object")
        return d

    def fetch(self) -> Stats:
        st = Stats()
        try:
            st.varz = self.request("/varz")
            st.connz = self.request("/connz")
        except TopError as e:
            st.error = str(e)
            return st
        conns = {int(c.get("cid", 0)): c for c in st.connz.get("connections") or []}
        prev = self.last
        if prev is not None and prev.varz:
            from rillet.gocompat.gotime import time_ns
            try:
                dt = (time_ns(st.varz.get("now")) - time_ns(prev.varz.get("now"))) / 1e9
            except ValueError:
                dt = 0.0
            if dt > 0:
                v, p = st.varz, prev.varz
                st.in_msgs_rate = (v.get("in_msgs", 0) - p.get("in_msgs", 0)) / dt
                st.out_msgs_rate = (v.get("out_msgs", 0) - p.get("out_msgs", 0)) / dt
                st.in_bytes_rate = (v.get("in_bytes", 0) - p.get("in_bytes", 0)) / dt
                st.out_bytes_rate = (v.get("out_bytes", 0) - p.get("out_bytes", 0)) / dt
            for cid, c in conns.items():
                lc = self.last_conns.get(cid)
                if lc is not None and dt > 0:
                    st.conn_rates[cid] = tuple(  # type: ignore[assignment]
                        (c.get(k, 0) - lc.get(k, 0)) / dt for k in ("in_msgs", "out_msgs", "in_bytes", "out_bytes"))
        self.last = st
        self.last_conns = conns
        self.last_poll = time.monotonic()
        return st


# ---- the text -------------------------------------------------------------------------------------------

class Host:
    """ip:port of a connection, or its resolved name with ``lookup`` (cached per ip)."""

    def __init__(self) -> None:
        self.lookup = False
        self.cache: dict[str, str] = {}

    def of(self, c: dict) -> str:
        plain = f"{c.get('ip', '')}:{c.get('port', 0)}"
        if not self.lookup:
            return plain
        ip = c.get("ip", "")
        if ip not in self.cache:
            try:
                self.cache[ip] = socket.gethostbyaddr(ip)[0] or plain
            except OSError:
                self.cache[ip] = plain
        return self.cache[ip]


def paragraph(engine: Engine, st: Stats, raw: bool, hosts: Host, delim: str = "") -> str:
    if delim:
        return _paragraph_delimited(engine, st, raw, hosts, delim)
    v = st.varz
    server_name = v.get("server_name", "") if v.get("server_name") != v.get("server_id") else ""
    text = (f"NATS server version {v.get('version', '')} (uptime: {v.get('uptime', '')}) {st.error}\n"
            f"Server: {server_name}\n"
            f"  ID:   {v.get('server_id', '')}\n"
            f"  Load: CPU:  {float(v.get('cpu', 0)):.1f}%  Memory: {psize(False, v.get('mem', 0))}  "
            f"Slow Consumers: {v.get('slow_consumers', 0)}\n"
            f"  In:   Msgs: {nsize(raw, v.get('in_msgs', 0))}  Bytes: {psize(raw, v.get('in_bytes', 0))}  "
            f"Msgs/Sec: {st.in_msgs_rate:.1f}  Bytes/Sec: {psize(raw, int(st.in_bytes_rate))}\n"
            f"  Out:  Msgs: {nsize(raw, v.get('out_msgs', 0))}  Bytes: {psize(raw, v.get('out_bytes', 0))}  "
            f"Msgs/Sec: {st.out_msgs_rate:.1f}  Bytes/Sec: {psize(raw, int(st.out_bytes_rate))}")
    conns = st.connz.get("connections") or []
    text += f"\n\nConnections Polled: {st.connz.get('num_connections', 0)}\n"
    host_w = HOST_WIDTH
    name_w = 0
    for c in conns:
        n = len(hosts.of(c))
        if n > host_w:
            host_w = n + 2
        n = len(c.get("name", ""))
        if n > name_w:
            name_w = max(n + 2, len("NAME"))
    cols = ["HOST", "CID"] + (["NAME"] if name_w else []) + STANDARD_HEADERS
    widths = [host_w, 6] + ([name_w] if name_w else []) + COLUMN_WIDTHS
    if engine.display_subs:
        cols.append("SUBSCRIPTIONS")

    def line(values: list[str]) -> str:
        head = f"  {values[0]:<{widths[0]}}  {values[1]:<6} "
        rest_start = 2
        if name_w:
            head += f"{values[2]:<{name_w}} "
            rest_start = 3
        body = "  ".join(f"{val:<{w}}" for val, w in zip(values[rest_start:rest_start + 10], COLUMN_WIDTHS))
        tail = ""
        if engine.display_subs:
            tail = values[-1]
        return head + body + tail

    hdr = line(cols[:-1] + [f"{cols[-1]:>13}"] if engine.display_subs else cols)
    text += hdr + "\n"
    for c in conns:
        cid = int(c.get("cid", 0))
        if engine.show_rates:
            in_m, out_m, in_b, out_b = st.conn_rates.get(cid, (0.0, 0.0, 0.0, 0.0))
            traffic = [nsize(raw, int(out_m)), nsize(raw, int(in_m)), psize(raw, int(out_b)), psize(raw, int(in_b))]
        else:
            traffic = [nsize(raw, c.get("out_msgs", 0)), nsize(raw, c.get("in_msgs", 0)),
                       psize(raw, c.get("out_bytes", 0)), psize(raw, c.get("in_bytes", 0))]
        vals = [hosts.of(c), str(cid)] + ([c.get("name", "")] if name_w else [])
        vals += [str(c.get("subscriptions", 0)), nsize(raw, c.get("pending_bytes", 0))] + traffic
        vals += [c.get("lang", ""), c.get("version", ""), c.get("uptime", ""),
                 go_time_text(c.get("last_activity", ""))]
        if engine.display_subs:
            vals.append(", ".join(c.get("subscriptions_list") or []))
        text += line(vals) + "\n"
    return text


def _paragraph_delimited(engine: Engine, st: Stats, raw: bool, hosts: Host, d: str) -> str:
    v = st.varz
    text = (f"NATS server version{d}{v.get('version', '')}{d}(uptime: {v.get('uptime', '')}){d}{st.error}\n"
            f"Server:\n"
            f"Load:{d}CPU:{d}{float(v.get('cpu', 0)):.1f}%{d}Memory:{d}{psize(False, v.get('mem', 0))}{d}"
            f"Slow Consumers:{d}{v.get('slow_consumers', 0)}\n"
            f"In:{d}Msgs:{d}{nsize(raw, v.get('in_msgs', 0))}{d}Bytes:{d}{psize(raw, v.get('in_bytes', 0))}{d}"
            f"Msgs/Sec:{d}{st.in_msgs_rate:.1f}{d}Bytes/Sec:{d}{psize(raw, int(st.in_bytes_rate))}\n"
            f"Out:{d}Msgs:{d}{nsize(raw, v.get('out_msgs', 0))}{d}Bytes:{d}{psize(raw, v.get('out_bytes', 0))}{d}"
            f"Msgs/Sec:{d}{st.out_msgs_rate:.1f}{d}Bytes/Sec:{d}{psize(raw, int(st.out_bytes_rate))}")
    text += f"\n\nConnections Polled:{d}{st.connz.get('num_connections', 0)}\n"
    cols = ["HOST", "CID", "NAME"] + STANDARD_HEADERS + (["SUBSCRIPTIONS"] if engine.display_subs else [])
    text += d.join(cols) + "\n"
    for c in st.connz.get("connections") or []:
        vals = [hosts.of(c), str(c.get("cid", 0)), c.get("name", ""), str(c.get("subscriptions", 0)),
                nsize(raw, c.get("pending_bytes", 0)), nsize(raw, c.get("out_msgs", 0)),
                nsize(raw, c.get("in_msgs", 0)), psize(raw, c.get("out_bytes", 0)), psize(raw, c.get("in_bytes", 0)),
                c.get("lang", ""), c.get("version", ""), c.get("uptime", ""),
                go_time_text(c.get("last_activity", ""))]
        if engine.display_subs:
            vals.append("  ".join(c.get("subscriptions_list") or []))
        text += d.join(vals) + "\n"
    return text


# ---- the terminal ----------------------------------------------------------------------------------------

class View:
    """The curses loop: redraw on new stats, keys as nats-top's."""

    def __init__(self, engine: Engine, raw: bool, hosts: Host, max_refreshes: int) -> None:
        self.engine = engine
        self.raw = raw
        self.hosts = hosts
        self.max_refreshes = max_refreshes
        self.help = False
        self.prompt: str | None = None  # "sort" or "limit" while a value is typed
        self.buf = ""
        self.notice = ""
        self.notice_until = 0.0
        self.stats = Stats()

    def run(self, stdscr: Any) -> None:
        import curses
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        stdscr.timeout(100)
        refreshes = 0
        next_poll = 0.0
        while True:
            now = time.monotonic()
            if now >= next_poll:
                self.stats = self.engine.fetch()
                next_poll = now + self.engine.delay
                refreshes += 1
                self.draw(stdscr)
                if self.max_refreshes > 0 and refreshes >= self.max_refreshes:
                    return
            ch = stdscr.getch()
            if ch == -1:
                if self.notice and time.monotonic() > self.notice_until:
                    self.notice = ""
                    self.draw(stdscr)
                continue
            if ch == curses.KEY_RESIZE:
                self.draw(stdscr)
                continue
            if not self.key(ch):
                return
            self.draw(stdscr)

    def key(self, ch: int) -> bool:
        """Handle one key; False to quit."""
        import curses
        if ch == 3:  # Ctrl-C (the terminal is in cbreak mode)
            return False
        if self.prompt is not None:
            if ch in (curses.KEY_ENTER, 10, 13):
                self._enter()
            elif ch in (curses.KEY_BACKSPACE, 127, 8):
                self.buf = self.buf[:-1]
            elif 32 <= ch < 127:
                self.buf += chr(ch)
            return True
        if self.help:
            self.help = False
            return True
        c = chr(ch) if 0 <= ch < 256 else ""
        if c == "q":
            return False
        if c == " ":
            self.engine.show_rates = not self.engine.show_rates
        elif c == "s":
            self.engine.display_subs = not self.engine.display_subs
        elif c == "o":
            self.prompt, self.buf = "sort", ""
        elif c == "n":
            self.prompt, self.buf = "limit", ""
        elif c in ("?", "h"):
            self.help = True
        elif c == "d":
            self.hosts.lookup = not self.hosts.lookup
        elif c == "b":
            self.raw = not self.raw
        return True

    def _enter(self) -> None:
        kind, value = self.prompt, self.buf.strip()
        self.prompt, self.buf = None, ""
        if kind == "sort":
            if value in SORT_KEYS:
                self.engine.sort = value
            else:
                self._say(f"invalid order: {value}")
        elif kind == "limit":
            try:
                n = int(value)
            except ValueError:
                self._say(f"invalid limit: {value}")
                return
            if n > 0:
                self.engine.conns = n
            else:
                self._say(f"invalid limit: {value}")

    def _say(self, text: str) -> None:
        self.notice = text
        self.notice_until = time.monotonic() + 1.0

    def text_lines(self) -> list[str]:
        if self.help:
            return HELP_TEXT.split("\n")
        lines = paragraph(self.engine, self.stats, self.raw, self.hosts).split("\n")
        if self.prompt is not None or self.notice:
            while len(lines) <= PROMPT_ROW:
                lines.append("")
            if self.prompt == "sort":
                lines[PROMPT_ROW] = f"sort by [{self.engine.sort}]: {self.buf}"
            elif self.prompt == "limit":
                lines[PROMPT_ROW] = f"limit   [{self.engine.conns}]: {self.buf}"
            else:
                lines[PROMPT_ROW] = self.notice
        return lines

    def draw(self, stdscr: Any) -> None:
        import curses
        stdscr.erase()
        h, w = stdscr.getmaxyx()
        for y, line in enumerate(self.text_lines()[:h]):
            try:
                stdscr.addnstr(y, 0, line, max(w - 1, 0))
            except curses.error:
                pass
        stdscr.refresh()


# ---- command line ------------------------------------------------------------------------------------------

def _flags() -> FlagSet:
    fs = FlagSet()
    fs.add("s", str, "127.0.0.1", "The nats server host.", dest="host")
    fs.add("m", int, 8222, "The NATS server monitoring port.", dest="port")
    fs.add("ms", int, 0, "The NATS server secure monitoring port.", dest="https_port")
    fs.add("n", int, 1024, "Maximum number of connections to poll.", dest="conns")
    fs.add("d", int, 1, "Refresh interval in seconds.", dest="delay")
    fs.add("sort", str, "cid", "Value for which to sort by the connections.")
    fs.add("lookup", bool, False, "Enable client addresses DNS lookup.")
    fs.add("o", str, "", "Save the first snapshot to the given file ('-': standard output) and exit.",
           dest="output")
    fs.add("l", str, "", "Delimiter of the -o snapshot (default: a plain-text grid).", dest="delimiter")
    fs.add("b", bool, False, "Display traffic in raw bytes.", dest="raw")
    fs.add("r", int, -1, "Refresh this many times, then exit.", dest="max_refreshes")
    fs.add("cert", str, "", "Client certificate for the HTTPS port")
    fs.add("key", str, "", "Client private key for the HTTPS port")
    fs.add("cacert", str, "", "Root CA certificate")
    fs.add("k", bool, False, "Skip verifying the server certificate", dest="insecure")
    fs.add("v", bool, False, "Same as --version.", dest="version")
    fs.add("version", bool, False, "Show the version.", dest="version")
    fs.add("u", bool, False, "Same as --display-subscriptions-column.", dest="subs")
    fs.add("display-subscriptions-column", bool, False, "Display the subscriptions column upon launch.",
           dest="subs")
    return fs


def _ssl_context(o: dict) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=o["cacert"] or None)
    if o["cert"] and o["key"]:
        ctx.load_cert_chain(o["cert"], o["key"])
    if o["insecure"]:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def make_engine(o: dict) -> Engine:
    if o["sort"] not in SORT_KEYS:
        raise TopError(f"invalid option to sort by: {o['sort']} (one of {', '.join(SORT_KEYS)})")
    if o["delay"] <= 0:
        raise TopError(f"invalid refresh interval: -d {o['delay']} (seconds, at least 1)")
    if o["conns"] <= 0:
        raise TopError(f"invalid number of connections: -n {o['conns']}")
    if not o["host"]:
        raise TopError("invalid monitoring endpoint")
    host = f"[{o['host']}]" if ":" in o["host"] and not o["host"].startswith("[") else o["host"]
    if o["https_port"]:
        try:
            ctx = _ssl_context(o)
        except (OSError, ssl.SSLError) as e:
            raise TopError(f"TLS setup: {e}") from None
        return Engine(f"https://{host}:{o['https_port']}", o["conns"], o["sort"], o["delay"], ctx, o["subs"])
    if not o["port"]:
        raise TopError("invalid monitoring port")
    return Engine(f"http://{host}:{o['port']}", o["conns"], o["sort"], o["delay"], None, o["subs"])


def run(argv: list[str]) -> int:
    o, _rest = _flags().parse(argv)
    if o["version"]:
        print(f"rillet top v{tool_version()}")
        return 0
    engine = make_engine(o)
    try:
        engine.request("/varz")  # a first request: fail now, not inside the view
    except TopError as e:
        raise TopError(f"/varz smoke test failed: {e}") from None
    hosts = Host()
    hosts.lookup = o["lookup"]
    if o["output"]:
        text = paragraph(engine, engine.fetch(), o["raw"], hosts, o["delimiter"])
        if o["output"] == "-":
            sys.stdout.write(text)
            return 0
        try:
            with open(o["output"], "w") as f:
                f.write(text)
        except OSError as e:
            raise TopError(f"failed to write stats-snapshot to output file '{o['output']}': "
                           f"{e.strerror or e}") from None
        return 0
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise TopError("the live view needs a terminal (use -o FILE or -o - for one snapshot)")
    import curses
    view = View(engine, o["raw"], hosts, o["max_refreshes"])
    try:
        curses.wrapper(view.run)
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str]) -> int:
    try:
        return run(argv)
    except HelpRequested:
        sys.stdout.write(USAGE)
        return 0
    except FlagError as e:
        return usage_error("top", e, USAGE)
    except TopError as e:
        print(f"rillet: error: {e}", file=sys.stderr)
        return 1
