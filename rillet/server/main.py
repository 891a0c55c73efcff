"""The nats-server command line (``rillet-server`` / ``python -m rillet.server``, started by ``rillet.app.main``
with the composition root's ``build_server``)."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable

import rillet
from rillet import lane
from rillet.server.logging import Logger
from rillet.config.options import Options

_SIGNALS = {
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "term": signal.SIGTERM,
    "reopen": signal.SIGUSR1,
    "reload": signal.SIGHUP,
    "ldm": signal.SIGUSR2,
}


def main(argv: list[str] | None = None, build: Callable[[Options, Logger], Any] | None = None) -> int:
    """``build(opts, log)``: the server to run (``rillet.app.compose.build_server``; None: the core server alone,
    which refuses links and monitoring, see rillet/server/subsystems.py)."""
    from rillet.config.errors import ConfigError
    from rillet.config.flags import FlagError, FlagSyntaxError, parse_command_line

    argv = sys.argv[1:] if argv is None else argv
    try:
        cl = parse_command_line(argv)
    except FlagError as e:
        if not isinstance(e, FlagSyntaxError):
            print(f"nats-server: {e}", file=sys.stderr)
            return 1
        # like nats-server (Go's flag package): the error on stderr, the usage on stdout, exit status 0
        from rillet.config.flags import USAGE
        print(str(e), file=sys.stderr)
        print(USAGE)
        return 0
    except ConfigError as e:
        print(f"nats-server: {e.report()}", file=sys.stderr)
        return 1
    if cl.show_help:
        print(cl.help_text)
        return 0
    if cl.show_tls_help:
        print(cl.tls_help_text)
        return 0
    if cl.show_version:
        print(f"nats-server: v{rillet.SERVER_VERSION} (rillet {rillet.__version__}, {lane.NAME})")
        return 0
    opts = cl.options
    if not cl.signal:
        from rillet.server.server import validate_options
        try:
            validate_options(opts)
            if opts.websocket.port:  # (the websocket module loads only for a websocket {} block)
                from rillet.server.websocket import validate_websocket_options
                validate_websocket_options(opts)  # (nats-server checks these with the options, before it logs)
            _check_tls_files(opts)
        except ValueError as e:
            print(f"nats-server: {e}", file=sys.stderr)
            return 1
    if cl.signal:
        return send_signal(cl.signal, cl.signal_pid, opts.pid_file)
    if cl.test_config:
        import hashlib
        digest = ""
        if opts.config_file:
            try:
                with open(opts.config_file, "rb") as f:
                    digest = f" (sha256:{hashlib.sha256(f.read()).hexdigest()})"
            except OSError:
                pass
        print(f"nats-server: configuration file {opts.config_file} is valid{digest}", file=sys.stderr)
        return 0
    return run(opts, argv, build)


def _tls_blocks(opts: Options) -> list[Any]:
    """Every tls {} block of the options, in the file's order of sections (nats-server loads each one's
    certificate as it parses it, whether its listener is enabled or not)."""
    out: list[Any] = [opts.tls, opts.websocket.tls, opts.cluster.tls]
    if isinstance(opts.mqtt, dict):
        out.append(opts.mqtt.get("tls"))
    g = opts.gateway_opts
    if g is not None:
        out.append(getattr(g, "tls", None))
        out.extend(getattr(r, "tls", None) for r in getattr(g, "gateways", None) or ())
    ln = opts.leaf
    if ln is not None:
        out.append(getattr(ln, "tls", None))
        out.extend(getattr(r, "tls", None) for r in getattr(ln, "remotes", None) or ())
    out.append(opts.resolver_tls)
    return out


def _check_tls_files(opts: Options) -> None:
    """nats-server loads the certificate and key with the options: a missing file stops it there, in Go's
    words (``open <path>: no such file or directory``), before any log line; at the tls key of a config file."""
    from rillet.config.errors import ConfigError
    for tls in _tls_blocks(opts):
        if tls is None:
            continue
        pairs = [(tls.cert_file, tls.key_file, "")] + [(c, k, f" {i + 1}/{len(tls.certs)}")
                                                        for i, (c, k) in enumerate(tls.certs)]
        for path, which in [(p, w) for c, k, w in pairs for p in (c, k)]:
            if path and not os.path.exists(path):
                reason = f"error parsing X509 certificate/key pair{which}: open {path}: no such file or directory"
                if tls.source is not None:
                    raise ConfigError.at(tls.source, reason)
                raise ValueError(reason)


def send_signal(command: str, pid: str | None, pid_file: str) -> int:
    """``--signal ldm[=pid]``: deliver a signal to a running server (found by pid, pid file or name)."""
    sig = _SIGNALS.get(command)
    if sig is None:
        print(f"nats-server: unknown signal \"{command}\"", file=sys.stderr)
        return 1
    pids: list[int] = []
    if pid:
        target = pid
        if not target.isdigit():
            try:
                with open(target) as f:
                    target = f.read().strip()
            except OSError as e:
                print(f"nats-server: could not read pid file: {e}", file=sys.stderr)
                return 1
        try:
            pids = [int(target)]
        except ValueError:
            print(f"nats-server: invalid pid: {target}", file=sys.stderr)
            return 1
    elif pid_file:
        try:
            with open(pid_file) as f:
                pids = [int(f.read().strip())]
        except (OSError, ValueError) as e:
            print(f"nats-server: could not read pid file: {e}", file=sys.stderr)
            return 1
    else:
        out = subprocess.run(["pgrep", "-f", "rillet-server|rillet.server|rillet server"],
                             capture_output=True, text=True).stdout.split()
        pids = [int(p) for p in out if p.isdigit() and int(p) != os.getpid()]
        if not pids:
            print("nats-server: no rillet-server processes running", file=sys.stderr)
            return 1
        if len(pids) > 1:
            print("nats-server: multiple rillet-server processes running:\n" + "\n".join(map(str, pids)),
                  file=sys.stderr)
            return 1
    for p in pids:
        try:
            os.kill(p, sig)
        except OSError as e:
            print(f"nats-server: {e}", file=sys.stderr)
            return 1
    return 0


def run(opts: Options, argv: list[str], build: Callable[[Options, Logger], Any] | None = None) -> int:
    try:
        import uvloop
        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        pass
    from rillet.server.logging import SyslogError
    try:
        log = Logger.from_options(opts)
    except SyslogError as e:
        # nats-server stops through Go's log.Fatalf here: a plain timestamp, the reason, exit status 1
        print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {e}", file=sys.stderr)
        return 1
    try:
        rc = asyncio.run(_serve(opts, argv, log, build))
    except KeyboardInterrupt:
        rc = 0
    _exit_now(rc)
    return rc  # (not reached)


def _hold_sockets(srv: Any) -> list[int]:
    """Just before the server closes its connections (clients, routes, leaf nodes, gateways: the last step
    of its shutdown), a second descriptor for each connection's socket, which nothing closes but the
    process's end. The connections are closed as ever (pending output written, then the transport
    closed), but the kernel ends them only when the process is gone, after its memory is freed, which takes
    a Python process several ms: the peers see the server go when its process is gone, and all at once, as
    with nats-server (whose exit takes ~1 ms). A client test harness that stops a server and then waits
    for a client's reconnection (nats.py's test_cluster_reconnect_sequential_shutdown) depends on that."""
    conns = [*srv.clients.values(), *srv.routes.values(), *srv.leafs.values(), *srv.gateways_out.values()]
    for group in srv.gateways_in.values():
        conns.extend(group)
    fds: list[int] = []
    for c in conns:
        t = getattr(c, "transport", None)
        sock = t.get_extra_info("socket") if t is not None else None
        if sock is None:
            continue
        try:
            fds.append(os.dup(sock.fileno()))
        except (OSError, ValueError):  # (already closed)
            continue
    return fds


def _exit_now(rc: int) -> None:
    """End the process as soon as the server has stopped, as nats-server does (~2 ms after SIGTERM).

    Everything that must reach the disk is written by then: the server's shutdown stopped JetStream (stores
    synced and closed, RAFT state saved), asyncio.run waited for the executor's threads (syncs in flight),
    the log is closed. What is left is the interpreter's own teardown (freeing every object, module by
    module: 50-150 ms, the more the more a server has loaded), which a client test harness waiting for the
    process to go sees as a server that lingers; it is skipped. Output buffers are flushed first.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)


async def _serve(opts: Options, argv: list[str], log: Logger,
                 build: Callable[[Options, Logger], Any] | None = None) -> int:
    if build is None:
        from rillet.server.server import Server as build

    for w in opts.config_warnings:
        log.warn(w)
    from rillet.config.inactive import inactive_warnings
    for w in inactive_warnings(opts):
        log.warn(w)
    try:
        srv = build(opts, log)
        srv.reload_argv = argv  # what SIGHUP and $SYS.REQ.SERVER.<id>.RELOAD read again
    except ValueError as e:
        # as nats-server when it cannot build its server (NewServer): the error on stderr, not in the log,
        # after the program's fixed name (nats-server uses "nats-server", not argv[0])
        print(f"nats-server: {e}", file=sys.stderr)
        log.close()
        return 1
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task] = set()

    def spawn(coro) -> None:
        t = loop.create_task(coro)
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    def on_stop(name: str) -> None:
        log.notice(f"Trapped \"{name}\" signal")
        spawn(srv.shutdown())

    def on_reload() -> None:
        log.notice("Trapped \"hangup\" signal")
        if not srv.start_time:
            return  # still starting: nothing to reload yet
        from rillet.config.flags import parse_command_line
        try:
            new = parse_command_line(argv).options
            srv.reload(new)
        except Exception as e:
            log.error(f"Failed to reload server configuration: {e}")

    def on_ldm() -> None:
        log.notice("Trapped \"user defined signal 2\" signal")
        spawn(srv.lame_duck())

    def on_reopen() -> None:
        log.notice("Trapped \"user defined signal 1\" signal")
        log.reopen()

    # signals are trapped before the server says it is ready, as nats-server does
    loop.add_signal_handler(signal.SIGINT, on_stop, "interrupt")
    loop.add_signal_handler(signal.SIGTERM, on_stop, "terminated")
    loop.add_signal_handler(signal.SIGQUIT, on_stop, "quit")
    loop.add_signal_handler(signal.SIGHUP, on_reload)
    loop.add_signal_handler(signal.SIGUSR2, on_ldm)
    loop.add_signal_handler(signal.SIGUSR1, on_reopen)
    try:
        await srv.start()
    except (OSError, ValueError) as e:
        # an OSError raised with our own text carries it as strerror (str() would add "[Errno N]")
        log.fatal(e.strerror if isinstance(e, OSError) and e.strerror else str(e))
        return 1
    from rillet.server.gcpolicy import policy as gc_policy
    gc_policy.install(loop)  # start-up objects frozen, old-generation collections paced (issue 20)
    held: list[int] = []
    # (first of the shutdown callbacks: before the routes, leaf nodes and gateways close)
    srv.on_shutdown.insert(0, lambda: held.extend(_hold_sockets(srv)))
    await srv.wait_stopped()
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
