"""``rillet context``: saved connection settings."""
from __future__ import annotations

import json
import os
from typing import Any, Optional

import typer

from rillet.cli.common import (CONTEXT_FIELDS, FLAGS, CliError, confirm, context_dir, context_path, load_context,
                               print_fields, print_json, select_context, selected_context, table,
                               validate_context_name)

HELP = """Manage saved contexts: named server URLs and credentials.

\b
Contexts live in $RILLET_CONFIG_DIR/context (default
$XDG_CONFIG_HOME/rillet/context or ~/.config/rillet/context), one JSON file
each. The selected one is used when no --context or NATS_CONTEXT is given.

\b
Examples:
  rillet context add west --server nats://west:4222 --creds west.creds --select
  rillet context ls
  rillet --context west stream ls
"""

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)

_SECRET = ("password", "token")


def _names() -> list[str]:
    try:
        files = os.listdir(context_dir())
    except OSError:
        return []
    return sorted(f[:-5] for f in files if f.endswith(".json"))


def _complete(incomplete: str) -> list[str]:
    return [n for n in _names() if n.startswith(incomplete)]


@app.command("add")
def add(name: str = typer.Argument(..., help="Context name", autocompletion=_complete),
        description: str = typer.Option("", help="A description for this context"),
        select: bool = typer.Option(False, "--select", help="Select the context after saving it"),
        ) -> None:
    """Create or replace a context from the connection options given on this command line.

    \b
    Examples:
      rillet context add local --server nats://127.0.0.1:4222 --select
      rillet context add sys --server nats://h:4222 --user sys --password s3cret
      rillet context add ngs --server tls://connect.ngs.global --creds ~/ngs.creds
    """
    path = context_path(name)
    data: dict[str, Any] = {"description": description}
    for key in CONTEXT_FIELDS:
        if key in FLAGS and key != "description":
            value = FLAGS[key]
            if key in ("creds", "nkey", "cert", "key", "ca") and value:
                value = os.path.abspath(os.path.expanduser(value))
            data[key] = value
    data.setdefault("url", "nats://127.0.0.1:4222")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)
    print(f"Saved context \"{name}\" in {path}")
    if select or not selected_context():
        select_context(name)
        print(f"Selected context \"{name}\"")


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json", help="Produce JSON output"),
       names_only: bool = typer.Option(False, "--names", "-n", help="Show just the names")) -> None:
    """List the saved contexts; the selected one is marked with *.

    \b
    Example:
      rillet context ls --json
    """
    names = _names()
    current = selected_context()
    if as_json:
        print_json([{"name": n, "selected": n == current,
                     "description": _safe(n).get("description", ""), "url": _safe(n).get("url", "")}
                    for n in names])
        return
    if names_only:
        for n in names:
            print(n)
        return
    if not names:
        print("No contexts defined")
        return
    rows = []
    for n in names:
        d = _safe(n)
        rows.append([n + ("*" if n == current else ""), d.get("description", ""), d.get("url", "")])
    table("Known Contexts", ["Name", "Description", "Servers"], rows)


def _safe(name: str) -> dict[str, Any]:
    try:
        return load_context(name)
    except CliError:
        return {}


@app.command("select")
def select(name: str = typer.Argument(..., help="Context to select", autocompletion=_complete)) -> None:
    """Make a context the default.

    \b
    Example:
      rillet context select west
    """
    load_context(name)
    select_context(name)
    print(f"Selected context \"{name}\"")


@app.command("show")
def show(name: Optional[str] = typer.Argument(None, help="Context to show (default: the selected one)",
                                             autocompletion=_complete),
         as_json: bool = typer.Option(False, "--json", help="Produce JSON output")) -> None:
    """Show a context's settings (secrets masked).

    \b
    Examples:
      rillet context show
      rillet context show west --json
    """
    name = name or selected_context()
    if not name:
        raise CliError("no context selected: give a context name or select one with 'rillet context select'")
    data = dict(load_context(name))
    for k in _SECRET:
        if data.get(k):
            data[k] = "*********"
    if as_json:
        print_json({"name": name, **data})
        return
    labels = [("description", "Description"), ("url", "Server URLs"), ("user", "Username"),
              ("password", "Password"), ("token", "Token"), ("creds", "Credentials"), ("nkey", "NKey"),
              ("cert", "Certificate"), ("key", "Key"), ("ca", "CA"), ("js_domain", "JetStream Domain"),
              ("js_api_prefix", "JetStream API Prefix"), ("inbox_prefix", "Inbox Prefix")]
    print(f"NATS Configuration Context \"{name}\"\n")
    print_fields([(None, [(label, data[k]) for k, label in labels if data.get(k)]
                   + [("Path", context_path(name))])])


@app.command("rm")
def rm(name: str = typer.Argument(..., help="Context to remove", autocompletion=_complete),
       force: bool = typer.Option(False, "--force", "-f", help="Remove without a prompt")) -> None:
    """Remove a saved context.

    \b
    Example:
      rillet context rm west -f
    """
    validate_context_name(name)
    path = context_path(name)
    if not os.path.exists(path):
        raise CliError(f"unknown context {name!r}")
    confirm(f"Really remove context {name}?", force)
    os.unlink(path)
    if selected_context() == name:
        os.unlink(os.path.join(os.path.dirname(context_dir()), "context.txt"))
    print(f"Removed context \"{name}\"")
