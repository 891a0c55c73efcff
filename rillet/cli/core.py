"""Core NATS: ``pub``, ``sub``, ``req``, ``reply``."""
from __future__ import annotations

import asyncio
import json
import os
import random
import re
import string
import sys
import time
from typing import Any, List, Optional

import typer

from rillet.cli.common import (CliError, connect, format_duration, log, next_msg, parse_duration,
                               parse_headers, run)

# ---------------------------------------------------------------------------------------------------
# Templates: {{Count}} {{ID}} {{Time}} {{TimeStamp}} {{Unix}} {{UnixNano}} {{Random min max}}

_TEMPLATE_RE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def render(text: str, count: int) -> str:
    if "{{" not in text:
        return text

    def one(m: re.Match) -> str:
        parts = m.group(1).split()
        if not parts:
            raise CliError(f"could not parse template {m.group(0)!r}")
        fn, args = parts[0].lstrip("."), parts[1:]
        if fn == "Count" and not args:
            return str(count)
        if fn == "ID" and not args:
            return "".join(random.choices(string.ascii_letters + string.digits, k=22))
        if fn == "Time" and not args:
            return time.strftime("%H:%M:%S")
        if fn == "TimeStamp" and not args:
            return time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if fn == "Unix" and not args:
            return str(int(time.time()))
        if fn == "UnixNano" and not args:
            return str(time.time_ns())
        if fn == "Random" and len(args) == 2 and all(a.isdigit() for a in args):
            lo, hi = int(args[0]), int(args[1])
            if lo > hi:
                lo, hi = hi, lo
            return "".join(random.choices(string.ascii_letters + string.digits, k=random.randint(lo, hi)))
        raise CliError(f"could not parse template {m.group(0)!r}: unknown function or wrong arguments")

    return _TEMPLATE_RE.sub(one, text)


def _read_body(body: Optional[str], force_stdin: bool) -> bytes:
    if body is not None and not force_stdin:
        return body.encode()
    if force_stdin or not sys.stdin.isatty():
        return sys.stdin.buffer.read()
    return b""


def _show_headers(headers: dict[str, str] | None, prefix: str = "") -> None:
    for k, v in (headers or {}).items():
        for val in (v if isinstance(v, list) else [v]):
            print(f"{prefix}{k}: {val}")


PUB_HELP = """Publish a message.

\b
The body comes from the BODY argument or, when it is missing and stdin is
not a terminal, from stdin. Subject and body may hold templates:
{{Count}} {{ID}} {{Time}} {{TimeStamp}} {{Unix}} {{UnixNano}} {{Random 5 10}}.

\b
Examples:
  rillet pub orders.new 'hello'
  rillet pub orders.new '{"n": {{Count}}}' --count 100 --sleep 10ms
  rillet pub orders.new -H Priority:high 'urgent'
  echo payload | rillet pub orders.new
  rillet pub --jetstream orders.new 'stored'
"""


def pub(subject: str = typer.Argument(..., help="Subject to publish to"),
        body: Optional[str] = typer.Argument(None, help="Message body (default: stdin)"),
        header: Optional[List[str]] = typer.Option(None, "--header", "-H", help="Header as KEY:VALUE (repeatable)"),
        reply: Optional[str] = typer.Option(None, "--reply", help="Reply subject to set"),
        count: int = typer.Option(1, "--count", help="Publish this many messages"),
        sleep: Optional[str] = typer.Option(None, "--sleep", help="Sleep between messages, e.g. 100ms"),
        jetstream: bool = typer.Option(False, "--jetstream", "-J", help="Publish to JetStream and wait for the ack"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="Show nothing but errors"),
        force_stdin: bool = typer.Option(False, "--force-stdin", help="Read the body from stdin"),
        templates: bool = typer.Option(True, "--templates/--no-templates", help="Expand {{...}} templates"),
        ) -> None:
    hdrs = parse_headers(header)
    pause = parse_duration(sleep) if sleep else 0.0
    raw = _read_body(body, force_stdin)
    if count < 1:
        raise CliError("--count must be at least 1")
    run(_pub, subject, raw, hdrs, reply, count, pause, jetstream, quiet, templates)


async def _pub(subject: str, raw: bytes, hdrs: Any, reply: str | None, count: int, pause: float,
               jetstream: bool, quiet: bool, templates: bool) -> None:
    conn = await connect()
    nc = conn.nc
    text = raw.decode("utf-8", "surrogateescape") if templates and b"{{" in raw else None
    total = 0
    for i in range(1, count + 1):
        subj = render(subject, i) if templates else subject
        data = render(text, i).encode("utf-8", "surrogateescape") if text is not None else raw
        if jetstream:
            try:
                msg = await nc.request(subj, data, timeout=conn.settings.timeout, headers=hdrs)
            except Exception as e:
                perm = conn.last_permission_error()
                if perm:
                    raise CliError(perm) from None
                if type(e).__name__ == "NoRespondersError":
                    raise CliError(f"no stream is listening on subject {subj!r}") from None
                raise
            ack = json.loads(msg.data or b"{}")
            if ack.get("error"):
                raise CliError(ack["error"].get("description", "publish failed"))
            if not quiet:
                log(f"Published {len(data)} bytes to {json.dumps(subj)}, stored in stream "
                    f"\"{ack.get('stream')}\" sequence {ack.get('seq')}"
                    + (" (duplicate)" if ack.get("duplicate") else ""))
        else:
            await nc.publish(subj, data, reply=reply or "", headers=hdrs)
            if not quiet and count <= 10:
                log(f"Published {len(data)} bytes to {json.dumps(subj)}")
        total += len(data)
        if pause:
            await nc.flush()
            await asyncio.sleep(pause)
    await nc.flush(timeout=conn.settings.timeout)
    await asyncio.sleep(0.01)
    perm = conn.last_permission_error()
    await nc.close()
    if perm:
        raise CliError(perm)
    if not quiet and count > 10 and not jetstream:
        log(f"Published {count} messages ({total} bytes) to {json.dumps(subject)}")


SUB_HELP = """Subscribe to subjects and show the messages received.

\b
Examples:
  rillet sub 'orders.>'
  rillet sub orders.new orders.cancel --count 10
  rillet sub work --queue workers --raw
  rillet sub 'logs.*' --dump ./msgs      (one JSON file per message)
"""


def sub(subjects: List[str] = typer.Argument(..., help="Subjects to subscribe to (wildcards allowed)"),
        queue: Optional[str] = typer.Option(None, "--queue", help="Queue group to join"),
        count: int = typer.Option(0, "--count", help="Quit after this many messages (0: never)"),
        raw: bool = typer.Option(False, "--raw", "-r", help="Show only the message bodies"),
        dump: Optional[str] = typer.Option(None, "--dump", help="Write each message as JSON into this directory"),
        headers_only: bool = typer.Option(False, "--headers-only", help="Show headers, not bodies"),
        subjects_only: bool = typer.Option(False, "--subjects-only", help="Show just the subjects"),
        timestamp: bool = typer.Option(False, "--timestamp", "-t", help="Show when each message arrived"),
        wait: Optional[str] = typer.Option(None, "--wait", help="Quit after this long without messages"),
        inbox: bool = typer.Option(False, "--inbox", "-i", help="Subscribe to a new inbox subject"),
        ) -> None:
    idle = parse_duration(wait) if wait else 0.0
    if dump:
        os.makedirs(dump, exist_ok=True)
    run(_sub, subjects, queue, count, raw, dump, headers_only, subjects_only, timestamp, idle, inbox)


async def _sub(subjects: list[str], queue: str | None, count: int, raw: bool, dump: str | None,
               headers_only: bool, subjects_only: bool, timestamp: bool, idle: float, inbox: bool) -> None:
    conn = await connect(reconnect=True)
    nc = conn.nc
    if inbox:
        subjects = [nc.new_inbox()]
    done = asyncio.Event()
    seen = 0
    last = time.monotonic()
    out = sys.stdout

    async def on_msg(msg: Any) -> None:
        nonlocal seen, last
        if done.is_set():
            return
        seen += 1
        last = time.monotonic()
        if dump:
            rec = {"subject": msg.subject, "reply": msg.reply or "", "headers": msg.headers or {},
                   "data": msg.data.decode("utf-8", "replace"), "received": time.time()}
            with open(os.path.join(dump, f"{seen}.json"), "w") as f:
                json.dump(rec, f, indent=2)
        elif raw:
            out.buffer.write(msg.data + b"\n")
        elif subjects_only:
            out.write(msg.subject + "\n")
        else:
            ts = time.strftime(" @ %H:%M:%S") if timestamp else ""
            line = f"[#{seen}]{ts} Received on {json.dumps(msg.subject)}"
            if msg.reply:
                line += f" with reply {json.dumps(msg.reply)}"
            out.write(line + "\n")
            hdrs = dict(msg.headers or {})
            if hdrs:
                for k, v in hdrs.items():
                    out.write(f"{k}: {v}\n")
            if not headers_only:
                if hdrs:
                    out.write("\n")
                out.buffer.write(msg.data + b"\n")
            out.write("\n")
        out.flush()
        if count and seen >= count:
            done.set()

    for s in subjects:
        await nc.subscribe(s, queue=queue or "", cb=on_msg)
    await nc.flush(timeout=conn.settings.timeout)
    await asyncio.sleep(0.01)  # let nats-py hand over a -ERR that came with the PONG
    perm = conn.last_permission_error()
    if perm:
        raise CliError(perm)
    if not raw:
        log(f"Subscribing on {', '.join(subjects)}" + (f" in queue group {queue!r}" if queue else ""))
    if idle:
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), max(0.01, idle - (time.monotonic() - last)))
            except asyncio.TimeoutError:
                if time.monotonic() - last >= idle:
                    break
    else:
        await done.wait()
    await nc.close()


REQ_HELP = """Send a request and show the reply (or replies).

\b
Examples:
  rillet req service.time ''
  rillet req service.echo 'hello' -H Trace:1 --timeout 2s
  rillet req service.scatter 'who?' --replies 0 --timeout 1s   (all replies until timeout)
"""


def req(subject: str = typer.Argument(..., help="Subject to send the request to"),
        body: Optional[str] = typer.Argument(None, help="Request body (default: stdin)"),
        header: Optional[List[str]] = typer.Option(None, "--header", "-H", help="Header as KEY:VALUE (repeatable)"),
        count: int = typer.Option(1, "--count", help="Send this many requests"),
        replies: int = typer.Option(1, "--replies", help="Replies to wait for (0: until the timeout)"),
        reply_timeout: str = typer.Option("300ms", "--reply-timeout",
                                          help="Longest gap between replies when waiting for several"),
        raw: bool = typer.Option(False, "--raw", "-r", help="Show only the reply bodies"),
        force_stdin: bool = typer.Option(False, "--force-stdin", help="Read the body from stdin"),
        templates: bool = typer.Option(True, "--templates/--no-templates", help="Expand {{...}} templates"),
        ) -> None:
    hdrs = parse_headers(header)
    data = _read_body(body, force_stdin)
    run(_req, subject, data, hdrs, count, replies, parse_duration(reply_timeout), raw, templates)


async def _req(subject: str, raw_body: bytes, hdrs: Any, count: int, replies: int, gap: float, raw: bool,
               templates: bool) -> None:
    import nats.errors
    conn = await connect()
    nc = conn.nc
    timeout = conn.settings.timeout
    text = raw_body.decode("utf-8", "surrogateescape") if templates and b"{{" in raw_body else None
    for i in range(1, count + 1):
        subj = render(subject, i) if templates else subject
        data = render(text, i).encode("utf-8", "surrogateescape") if text is not None else raw_body
        if not raw:
            log(f"Sending request on {json.dumps(subj)}")
        start = time.perf_counter()
        if replies == 1:
            try:
                msg = await nc.request(subj, data, timeout=timeout, headers=hdrs)
            except nats.errors.NoRespondersError:
                raise CliError("no responders are available") from None
            except nats.errors.TimeoutError:
                raise CliError(conn.last_permission_error() or "timeout") from None
            _show_reply(msg, time.perf_counter() - start, raw)
            continue
        inbox = nc.new_inbox()
        q: asyncio.Queue = asyncio.Queue()
        sub_ = await nc.subscribe(inbox, cb=q.put)
        await nc.publish(subj, data, reply=inbox, headers=hdrs)
        got = 0
        deadline = time.monotonic() + timeout
        while replies == 0 or got < replies:
            left = deadline - time.monotonic()
            if got and replies != 0:
                left = min(left, gap)
            msg = await next_msg(q, left)
            if msg is None:
                break
            if msg.headers and msg.headers.get("Status") == "503":
                raise CliError("no responders are available")
            got += 1
            _show_reply(msg, time.perf_counter() - start, raw)
        await sub_.unsubscribe()
        if got == 0:
            raise CliError(conn.last_permission_error() or "timeout")
    await nc.close()


def _show_reply(msg: Any, rtt: float, raw: bool) -> None:
    if raw:
        sys.stdout.buffer.write(msg.data + b"\n")
        sys.stdout.flush()
        return
    log(f"Received with rtt {format_duration(rtt)}")
    hdrs = dict(msg.headers or {})
    for k, v in hdrs.items():
        log(f"{k}: {v}")
    if hdrs:
        print()
    sys.stdout.buffer.write(msg.data + b"\n\n")
    sys.stdout.flush()


REPLY_HELP = """Answer requests: with a fixed body, an echo, or the output of a command.

\b
The command runs through the shell with the request body on stdin; its
stdout is the reply. The body may hold templates like pub's ({{Count}}...).

\b
Examples:
  rillet reply service.time 'it is {{Time}}'
  rillet reply service.echo --echo
  rillet reply service.upper --command 'tr a-z A-Z'
  rillet reply service.work --queue workers --count 1 'done'
"""


def reply(subject: str = typer.Argument(..., help="Subject to answer on"),
          body: Optional[str] = typer.Argument(None, help="Reply body"),
          echo: bool = typer.Option(False, "--echo", help="Echo back what is received"),
          command: Optional[str] = typer.Option(None, "--command", help="Reply with this command's output"),
          queue: str = typer.Option("NATS-RPLY-22", "--queue", "-q", help="Queue group name"),
          header: Optional[List[str]] = typer.Option(None, "--header", "-H", help="Header on replies, KEY:VALUE"),
          count: int = typer.Option(0, "--count", help="Quit after this many requests (0: never)"),
          sleep: Optional[str] = typer.Option(None, "--sleep", help="Random delay up to this long before replying"),
          ) -> None:
    if sum(x is not None and x is not False for x in (body, command, echo or None)) > 1:
        raise CliError("give only one of BODY, --echo and --command")
    hdrs = parse_headers(header)
    run(_reply, subject, body, echo, command, queue, hdrs, count, parse_duration(sleep) if sleep else 0.0)


async def _reply(subject: str, body: str | None, echo: bool, command: str | None, queue: str, hdrs: Any,
                 count: int, sleep: float) -> None:
    conn = await connect(reconnect=True)
    nc = conn.nc
    done = asyncio.Event()
    n = 0

    async def on_msg(msg: Any) -> None:
        nonlocal n
        if done.is_set():
            return
        n += 1
        i = n
        log(f"[#{i}] Received on subject {json.dumps(msg.subject)}:")
        for k, v in (msg.headers or {}).items():
            log(f"{k}: {v}")
        print()
        sys.stdout.buffer.write(msg.data + b"\n\n")
        sys.stdout.flush()
        if sleep:
            await asyncio.sleep(random.uniform(0, sleep))
        if echo:
            data = msg.data
            out_hdrs = dict(msg.headers or {})
            out_hdrs.update(hdrs or {})
        elif command:
            proc = await asyncio.create_subprocess_shell(
                command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env={**os.environ, "NATS_REQUEST_SUBJECT": msg.subject})
            data, err = await proc.communicate(msg.data)
            if proc.returncode != 0:
                log(f"Command {command!r} failed with status {proc.returncode}: "
                    + err.decode(errors="replace").strip())
                data = f"error: command failed with status {proc.returncode}".encode()
            out_hdrs = hdrs
        else:
            data = render(body or "", i).encode()
            out_hdrs = hdrs
        if msg.reply:
            await nc.publish(msg.reply, data, headers=out_hdrs or None)
            await nc.flush()
        if count and n >= count:
            done.set()

    await nc.subscribe(subject, queue=queue, cb=on_msg)
    await nc.flush(timeout=conn.settings.timeout)
    await asyncio.sleep(0.01)
    perm = conn.last_permission_error()
    if perm:
        raise CliError(perm)
    log(f"Listening on {json.dumps(subject)} in group {json.dumps(queue)}")
    await done.wait()
    await nc.drain()


def register(app: typer.Typer) -> None:
    app.command("pub", help=PUB_HELP)(pub)
    app.command("sub", help=SUB_HELP)(sub)
    app.command("req", help=REQ_HELP)(req)
    app.command("reply", help=REPLY_HELP)(reply)
