"""``rillet``: the entry point. ``rillet server ...`` goes straight to the server's own command line."""
from __future__ import annotations

import sys

# `rillet server <these>` are client commands; anything else after `server` is a server flag.
SERVER_SUBCOMMANDS = {"ping", "list", "ls", "info", "check", "run"}
# commands with a Go tool's own command line (nk's and nats-top's single-dash flags, nsc's directory flags
# anywhere): their own parser takes argv as it is
GO_FLAG_COMMANDS = {"nkey": "rillet.cli.nkey", "top": "rillet.cli.top", "auth": "rillet.cli.auth"}

HELP = """NATS command line tool (works with Rillet and the Go nats-server).

\b
Connection options (--server, --context, --user, --password, --token,
--creds, --nkey, --tlscert, --tlskey, --tlsca, --timeout) are accepted by
every command; the NATS_URL, NATS_CONTEXT, NATS_USER, NATS_PASSWORD,
NATS_TOKEN, NATS_CREDS, NATS_NKEY, NATS_CERT, NATS_KEY, NATS_CA and
NATS_TIMEOUT environment variables and the selected context fill in the rest.

\b
Examples:
  rillet context add local --server nats://127.0.0.1:4222 --select
  rillet pub orders.new '{"id": {{Count}}}' --count 10
  rillet sub 'orders.>'
  rillet stream add ORDERS --subjects 'orders.>'
  rillet kv put CONFIG color blue
  rillet vstream create foo --regions west,central,east
  rillet bench pub test --msgs 1000000 --size 128
  rillet health --context sys        (servers, gateways, JetStream groups)
  rillet nkey -gen user -pubout     (nk's flags: -gen, -inkey, -pubout, -sign, -verify)
  rillet top -m 8222 -sort msgs_to  (nats-top's flags: -s, -m, -n, -d, -sort, -o)
  rillet auth add operator --name O --sys   (nsc: operators, accounts, users, JWTs)
  rillet server -js -sd ./data      (the server, same flags as rillet-server)
"""


def build_app():  # -> typer.Typer
    import typer

    from rillet.cli import account, bench, consumer, context, core, kv, obj, server, stream, vstream
    from rillet.cli import health

    app = typer.Typer(name="rillet", help=HELP, no_args_is_help=True, pretty_exceptions_enable=False,
                      rich_markup_mode=None, add_completion=True,
                      context_settings={"help_option_names": ["-h", "--help"]})
    app.add_typer(context.app, name="context", help=context.HELP)
    core.register(app)
    app.add_typer(server.app, name="server", help=server.HELP)
    app.command("health", help=health.HELP)(health.health)
    app.add_typer(stream.app, name="stream", help=stream.HELP)
    app.add_typer(consumer.app, name="consumer", help=consumer.HELP)
    app.add_typer(account.app, name="account", help=account.HELP)
    app.add_typer(kv.app, name="kv", help=kv.HELP)
    app.add_typer(obj.app, name="object", help=obj.HELP)
    app.add_typer(bench.app, name="bench", help=bench.HELP)
    app.add_typer(vstream.app, name="vstream", help=vstream.HELP)
    for name, module in GO_FLAG_COMMANDS.items():
        _add_go_flag_command(app, name, module)
    return app


def _add_go_flag_command(app, name: str, module: str) -> None:  # noqa: ANN001
    """List a Go-flag command in the help; ``main`` hands its argv to the module before click parses."""
    import importlib

    import typer
    mod = importlib.import_module(module)

    def forward(ctx) -> None:  # noqa: ANN001
        raise typer.Exit(mod.main(list(ctx.args)))
    forward.__annotations__ = {"ctx": typer.Context, "return": None}  # real types for typer (no string eval)

    app.command(name, help=mod.HELP + "\n\n\b\nExample:\n  " + mod.EXAMPLE, add_help_option=False,
                context_settings={"ignore_unknown_options": True, "allow_extra_args": True})(forward)


def build_command():  # -> click.Command
    import typer.main

    from rillet.cli.common import add_connection_options

    cmd = typer.main.get_command(build_app())
    add_connection_options(cmd)
    return cmd


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "server" and (len(argv) == 1 or argv[1] not in SERVER_SUBCOMMANDS):
        from rillet.app.main import main as server_main
        return server_main(argv[1:]) or 0
    if argv and argv[0] in GO_FLAG_COMMANDS:
        import importlib
        return importlib.import_module(GO_FLAG_COMMANDS[argv[0]]).main(argv[1:])
    from typer import Abort, Exit
    from typer._click.exceptions import ClickException

    from rillet.cli.common import FLAGS, CliError

    FLAGS.clear()
    cmd = build_command()
    try:
        rv = cmd.main(args=argv, prog_name="rillet", standalone_mode=False)
    except Exit as e:
        return e.exit_code
    except Abort:
        return 130
    except ClickException as e:
        e.show()
        return e.exit_code
    except CliError as e:
        sys.stdout.flush()
        print(f"rillet: error: {e}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `rillet ... | head`: quietly stop writing
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
