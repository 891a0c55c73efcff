"""The ``rillet auth`` command tree (typer) and the store the commands work on."""
from __future__ import annotations

from typing import Any
import typer
from rillet.cli.auth.nscstore import Store


HELP = ("Operators, accounts, users and their JWTs in nsc's store (the nsc tool: add, edit, describe, generate, "
        "push, revocations).")
EXAMPLE = "rillet auth add operator --name O --sys"  # (the `rillet` help lists the command with it)
APP_HELP = HELP + """

\b
Store directories (anywhere on the line, as nsc): --config-dir DIR (or $NSC_HOME),
--data-dir DIR, --keystore-dir DIR (or $NKEYS_PATH), -H/--all-dirs DIR for all three.

\b
Examples:
  rillet auth add operator --name O --sys
  rillet auth add account --name A
  rillet auth edit account --name A --js-disk-storage 1GiB --conns 100
  rillet auth add user --account A --name u --deny-pub 'admin.>'
  rillet auth generate config --mem-resolver --config-file server.conf
"""


app = typer.Typer(name="auth", help=APP_HELP, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})
add_app = typer.Typer(help="Add an operator, account or user", no_args_is_help=True)
edit_app = typer.Typer(help="Edit an operator or an account", no_args_is_help=True)
describe_app = typer.Typer(help="Show an operator, account, user or any JWT", no_args_is_help=True)
generate_app = typer.Typer(help="Generate a user's .creds file or a server configuration", no_args_is_help=True)
app.add_typer(add_app, name="add")
app.add_typer(edit_app, name="edit")
app.add_typer(describe_app, name="describe")
app.add_typer(generate_app, name="generate")

STATE: dict[str, Any] = {}


def store() -> Store:
    return Store(STATE["dirs"])


delete_app = typer.Typer(help="Delete a mapping", no_args_is_help=True)
app.add_typer(delete_app, name="delete")


revocations_app = typer.Typer(help="Revoke users of an account", no_args_is_help=True)
app.add_typer(revocations_app, name="revocations")
