"""``rillet auth``: what ``nsc`` is, for operators, accounts and users of operator mode (decentralized JWT auth).

The store is nsc's own layout, so that either tool reads what the other wrote:

* configuration ``<config-dir>/nsc.json`` (``{"store_root", "operator", "account"}``); config-dir is
  ``--config-dir``, else ``$NSC_HOME``, else ``$XDG_CONFIG_HOME/nats/nsc`` (``~/.config/nats/nsc``);
* JWTs under the store root (``--data-dir``, else nsc.json's ``store_root``, else
  ``$XDG_DATA_HOME/nats/nsc/stores``): ``<operator>/<operator>.jwt``, ``<operator>/.nsc`` (the store's
  version), ``<operator>/accounts/<account>/<account>.jwt``, ``.../<account>/users/<user>.jwt``;
* keys (``--keystore-dir``, else ``$NKEYS_PATH``, else ``$XDG_DATA_HOME/nats/nsc/keys``): each seed in
  ``keys/<kind letter>/<2nd-3rd letters>/<public key>.nk``, each user's ``.creds`` in
  ``creds/<operator>/<account>/<user>.creds``. ``-H``/``--all-dirs`` sets the three directories at once.

Commands (nsc's names and flags): ``add operator --name O [--sys] [--generate-signing-key]``,
``add account --name A``, ``edit account --name A [--conns --leaf-conns --data --payload --subscriptions
--imports --exports --js-mem-storage --js-disk-storage --js-streams --js-consumer --js-max-mem-stream
--js-max-disk-stream --js-max-ack-pending --js-max-bytes-required --js-disable]``,
``add user --account A --name U [--allow-pub --allow-sub --allow-pubsub --deny-pub --deny-sub --deny-pubsub
--bearer --expiry]``, ``describe operator|account|user|jwt`` (``--json``, ``--raw``, ``jwt --file F``),
``generate creds --account A --name U [--output-file F]``, ``generate config --mem-resolver
[--config-file F] [--sys-account NAME] [--force]``, ``env``.

Every JWT read is checked (form, signature, its signer: the operator's key or one of its signing keys for
an account, the account's key or signing keys for a user, expiry); a fault is one error line and exit
status 1, with nothing written: each command checks everything before it writes a file, and writes each
file whole (a temporary file renamed over it).
"""
from __future__ import annotations

import sys

from rillet.cli.auth import describe, entities, resolver, sharing  # noqa: F401 (their commands register on app)
from rillet.cli.auth.app import EXAMPLE, HELP, STATE, app, store  # noqa: F401 (HELP, EXAMPLE: the `rillet` help lists the command with them)
from rillet.cli.auth.nscstore import AuthError, resolve_dirs, split_dir_flags


@app.command("env")
def env() -> None:
    """The directories in use, the current operator and account."""
    s = store()
    print(f"config dir:   {s.dirs.config}")
    print(f"data dir:     {s.dirs.data}")
    print(f"keystore dir: {s.dirs.keys}")
    print(f"operator:     {s.cfg.get('operator', '')}")
    print(f"account:      {s.cfg.get('account', '')}")


def main(argv: list[str]) -> int:
    from typer import Abort, Exit
    from typer._click.exceptions import ClickException
    from typer.main import get_command

    from rillet.cli.common import CliError
    try:
        flags, rest = split_dir_flags(list(argv))
        STATE["dirs"] = resolve_dirs(flags)
        cmd = get_command(app)
        rv = cmd.main(args=rest, prog_name="rillet auth", standalone_mode=False)
    except AuthError as e:
        sys.stdout.flush()
        print(f"rillet: error: {e}", file=sys.stderr)
        return 1
    except CliError as e:  # (an AuthError raised inside rillet.cli.common.run comes back as a CliError)
        sys.stdout.flush()
        print(f"rillet: error: {e}", file=sys.stderr)
        return e.status
    except Exit as e:
        return e.exit_code
    except ClickException as e:
        e.show()
        return e.exit_code
    except Abort:
        return 130
    return rv if isinstance(rv, int) else 0
