"""``rillet vstream``: virtual streams, written in every region and read locally in every region.

A virtual stream ``V`` over regions R1..Rn is made of:

- per region R, a write stream ``V-write-R`` (placed in R's cluster) listening on ``V.R.>``;
- per region R, a read stream ``V-read-R`` (placed in R's cluster, no subjects) sourcing every write
  stream, with the subject transform ``V.*.>`` -> ``V.>`` so that messages keep the subject they were
  published on;
- account subject mappings scoped by cluster: in region R, a publish on ``V.x`` goes to ``V.R.x``, and the
  JetStream API on the name ``V`` (stream info, consumer create in every form, consumer info and delete,
  next-message requests, message get, direct get, acks) goes to ``V-read-R``.

The mappings go into the servers' configuration (``mappings { include "V.mappings.conf" }`` in the account,
or at the top level for the global account); this command writes that file and creates the streams. In
operator mode the mappings belong in the account JWT: ``rillet vstream jwt`` merges them into it, signs it
with the operator's key and pushes it to the servers' resolver.
With ``--ordering``, one stream ``V-order`` (in the cluster given, e.g. a stretch cluster) sources the
write streams and each regional read stream mirrors it instead, so every region sees the same order.
``--ordering-replicas`` and ``--ordering-tag`` give it its own replica count and placement tags (an R3
ordering stream in a stretch cluster over R1 regional streams; one replica per region comes from the
servers' ``unique_tag``, or from a stretch cluster of one server per region).
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, Optional

import typer

from rillet.cli.common import (CliError, connect, format_duration, human_count, parse_duration, print_json,
                               run, table, to_nanos)
from rillet.cli.jsapi import JSAPIError, api

HELP = """Virtual streams: one stream name, written and read locally in every region.

\b
A virtual stream V over regions west,central,east is, per region R, a write
stream V-write-R (subjects V.R.>) and a read stream V-read-R that sources
every write stream (V.*.> -> V.>), plus cluster-scoped subject mappings:
in region R a publish on V.x is stored as V.R.x, and the JetStream API on
the name V (info, consumers, next, get, direct get, acks) acts on V-read-R.

\b
Examples:
  rillet vstream mappings foo --regions west,central,east > foo.mappings.conf
  rillet vstream create foo --regions west,central,east --max-age 24h \\
      --mappings-out foo.mappings.conf
  rillet vstream status foo --regions west,central,east
  rillet vstream rm foo --regions west,central,east -f
  rillet --context sys vstream jwt foo --regions west,central,east \\
      --account-jwt APP.jwt --signing-key operator.nk --push   # operator mode

\b
The servers' configuration includes the mappings file in the account:
  accounts { APP { users: [...], mappings { include "foo.mappings.conf" } } }
(or a top-level  mappings { include "foo.mappings.conf" }  for the default
account), and each region's servers are a cluster named after the region.
"""

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)

JSON_OPT = typer.Option(False, "--json", help="Produce JSON output")
REGIONS_OPT = typer.Option(..., "--regions", help="Regions (cluster names), comma separated or repeated")


# ---------------------------------------------------------------------------------------------------
# What a virtual stream is made of (pure functions: tested without a server)


def write_name(name: str, region: str) -> str:
    return f"{name}-write-{region}"


def read_name(name: str, region: str) -> str:
    return f"{name}-read-{region}"


def order_name(name: str) -> str:
    return f"{name}-order"


def parse_regions(values: Any) -> list[str]:
    """``["west,central", "east"]`` -> ``["west", "central", "east"]``; names must be usable in subjects."""
    items = [values] if isinstance(values, str) else list(values or [])
    out: list[str] = []
    for item in items:
        for r in item.split(","):
            r = r.strip()
            if not r:
                continue
            if any(c in r for c in ".*> \t\r\n\"'") or r.startswith("$"):
                raise CliError(f"invalid region name {r!r}: it becomes a subject token and a stream name part")
            if r in out:
                raise CliError(f"region {r!r} is given twice")
            out.append(r)
    if not out:
        raise CliError("at least one region is required (--regions west,central,east)")
    return out


def check_name(name: str) -> None:
    if not name or any(c in name for c in ".*> \t\r\n/\\\"'") or name.startswith("$"):
        raise CliError(f"invalid virtual stream name {name!r}: it is a stream name and a subject token")


# (source, destination) pairs of the API mappings, with {v} the virtual name and {r} the read stream
_API_MAPPINGS = (
    ("$JS.API.STREAM.INFO.{v}", "$JS.API.STREAM.INFO.{r}"),
    ("$JS.API.CONSUMER.CREATE.{v}", "$JS.API.CONSUMER.CREATE.{r}"),
    ("$JS.API.CONSUMER.CREATE.{v}.>", "$JS.API.CONSUMER.CREATE.{r}.>"),
    ("$JS.API.CONSUMER.DURABLE.CREATE.{v}.*", "$JS.API.CONSUMER.DURABLE.CREATE.{r}.{{{{wildcard(1)}}}}"),
    ("$JS.API.CONSUMER.INFO.{v}.*", "$JS.API.CONSUMER.INFO.{r}.{{{{wildcard(1)}}}}"),
    ("$JS.API.CONSUMER.DELETE.{v}.*", "$JS.API.CONSUMER.DELETE.{r}.{{{{wildcard(1)}}}}"),
    ("$JS.API.CONSUMER.MSG.NEXT.{v}.*", "$JS.API.CONSUMER.MSG.NEXT.{r}.{{{{wildcard(1)}}}}"),
    ("$JS.API.STREAM.MSG.GET.{v}", "$JS.API.STREAM.MSG.GET.{r}"),
    ("$JS.API.DIRECT.GET.{v}", "$JS.API.DIRECT.GET.{r}"),
    ("$JS.API.DIRECT.GET.{v}.>", "$JS.API.DIRECT.GET.{r}.>"),
    ("$JS.ACK.{v}.>", "$JS.ACK.{r}.>"),
)


def mappings(name: str, regions: list[str], *, local: str = "") -> dict[str, Any]:
    """The account ``mappings {}`` entries of virtual stream ``name``, in the config's form (source ->
    list of ``{destination, weight, cluster}``), one destination per region.

    ``local``: the mappings of the servers of that one region, not scoped by cluster (source ->
    destination), for servers that are not in a cluster named after their region (a single server)."""
    if local:
        if local not in regions:
            raise CliError(f"region {local!r} is not one of {', '.join(regions)}")
        out: dict[str, Any] = {f"{name}.>": f"{name}.{local}.>"}
        for src, dest in _API_MAPPINGS:
            out[src.format(v=name)] = dest.format(r=read_name(name, local))
        return out
    out = {f"{name}.>": [{"destination": f"{name}.{r}.>", "weight": "100%", "cluster": r} for r in regions]}
    for src, dest in _API_MAPPINGS:
        out[src.format(v=name)] = [{"destination": dest.format(r=read_name(name, r)), "weight": "100%",
                                    "cluster": r} for r in regions]
    return out


def jwt_mappings(name: str, regions: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The mappings in an account JWT's form (the claim's ``nats.mappings``: source -> list of
    ``{subject, weight, cluster}``), for operator mode."""
    return {src: [{"subject": d["destination"], "weight": 100, "cluster": d["cluster"]} for d in dests]
            for src, dests in mappings(name, regions).items()}


def render_mappings(name: str, regions: list[str], *, local: str = "") -> str:
    """``mappings(name, regions)`` as configuration text, to include inside an account's ``mappings {}``."""
    lines = [f"# virtual stream {name!r} over regions {', '.join(regions)} (written by `rillet vstream`)"
             + (f": the mappings of region {local!r} only" if local else ""),
             "# include inside the account's block:  mappings { include \"<this file>\" }"]
    for src, dests in mappings(name, regions, local=local).items():
        if isinstance(dests, str):
            lines.append(f"{json.dumps(src)}: {json.dumps(dests)}")
            continue
        entries = ", ".join("{destination: %s, weight: %s, cluster: %s}"
                            % (json.dumps(d["destination"]), d["weight"], json.dumps(d["cluster"])) for d in dests)
        lines.append(f"{json.dumps(src)}: [{entries}]")
    return "\n".join(lines) + "\n"


def _placement(region: str, placement: str) -> dict[str, Any] | None:
    if placement == "cluster":
        return {"cluster": region}
    if placement == "tags":
        return {"tags": [f"region:{region}"]}
    return None


def stream_configs(name: str, regions: list[str], *, replicas: int = 3, max_age_ns: int = 0,
                   storage: str = "file", placement: str = "cluster", ordering: str = "",
                   ordering_replicas: int = 0, ordering_tags: tuple[str, ...] | list[str] = ()
                   ) -> list[dict[str, Any]]:
    """The stream configurations to create, in order: write streams, the ordering stream (``ordering``:
    the cluster it is placed in, "" for none; ``ordering_replicas``: its replicas, 0 for ``replicas``;
    ``ordering_tags``: its placement tags), then read streams."""
    if placement not in ("cluster", "tags", "none"):
        raise CliError(f"invalid placement {placement!r}: use cluster, tags or none")
    if not ordering and (ordering_replicas or ordering_tags):
        raise CliError("--ordering-replicas and --ordering-tag need --ordering CLUSTER")
    if ordering_replicas < 0:
        raise CliError("--ordering-replicas must be at least 1")
    tags = [t.strip() for t in ordering_tags if t.strip()]
    if len(tags) != len(list(ordering_tags)):
        raise CliError("--ordering-tag: an empty tag")
    out: list[dict[str, Any]] = []
    for r in regions:
        cfg: dict[str, Any] = {"name": write_name(name, r), "subjects": [f"{name}.{r}.>"], "storage": storage,
                               "num_replicas": replicas, "max_age": max_age_ns}
        p = _placement(r, placement)
        if p:
            cfg["placement"] = p
        out.append(cfg)
    sources = [{"name": write_name(name, r), "subject_transforms": [{"src": f"{name}.*.>", "dest": f"{name}.>"}]}
               for r in regions]
    if ordering:
        cfg = {"name": order_name(name), "storage": storage, "num_replicas": ordering_replicas or replicas,
               "sources": sources, "allow_direct": True}
        if placement != "none" or tags:
            cfg["placement"] = {"cluster": ordering} if placement != "none" else {}
            if tags:
                cfg["placement"]["tags"] = tags
        out.append(cfg)
    for r in regions:
        cfg = {"name": read_name(name, r), "storage": storage, "num_replicas": replicas, "allow_direct": True}
        if ordering:
            cfg["mirror"] = {"name": order_name(name)}
        else:
            cfg["sources"] = sources
        p = _placement(r, placement)
        if p:
            cfg["placement"] = p
        out.append(cfg)
    return out


# ---------------------------------------------------------------------------------------------------
# Commands

LOCAL_OPT = typer.Option("", "--local", metavar="REGION",
                         help="Mappings for the servers of this one region only, not scoped by cluster "
                              "(a single server, or servers not in a cluster named after their region)")


@app.command("mappings")
def mappings_cmd(name: str = typer.Argument(..., help="Virtual stream name"), regions: list[str] = REGIONS_OPT,
                 local: str = LOCAL_OPT,
                 out: Optional[str] = typer.Option(None, "--out", "-o", help="Write to this file, not stdout"),
                 jwt: bool = typer.Option(False, "--jwt", help="JSON in the account JWT's form (the claim's "
                                                               "nats.mappings), for operator mode"),
                 as_json: bool = JSON_OPT) -> None:
    """Print (or write) the subject mappings of a virtual stream, as configuration text.

    \b
    The text goes inside an account's mappings block:
      mappings { include "foo.mappings.conf" }
    (the include path is relative to the including file).

    \b
    Examples:
      rillet vstream mappings foo --regions west,central,east > foo.mappings.conf
      rillet vstream mappings foo --regions west,central,east --local west
      rillet vstream mappings foo --regions west,east --json
      rillet vstream mappings foo --regions west,central,east --jwt

    \b
    In operator mode the mappings belong in the account JWT: --jwt prints
    them in the claim's form ("mappings" in the "nats" section); `rillet
    vstream jwt` merges them into the account JWT, signs and pushes it.
    """
    check_name(name)
    rs = parse_regions(regions)
    if jwt and local:
        raise CliError("--jwt and --local do not go together: the JWT's mappings are scoped by cluster")
    if as_json or jwt:
        text = json.dumps(jwt_mappings(name, rs) if jwt else mappings(name, rs, local=local), indent=2) + "\n"
    else:
        text = render_mappings(name, rs, local=local)
    if out:
        _write(out, text)
        print(f"Wrote the mappings of virtual stream {name} to {out}")
    else:
        print(text, end="")


def update_account_jwt(token: str, name: str, regions: list[str], seed: str | bytes) -> str:
    """``token`` (an account JWT) with the virtual stream's mappings merged into its ``nats.mappings``
    (entries for other subjects kept, the virtual stream's replaced), signed again with ``seed``: the
    operator's key or one of its signing keys (the key that signed the account before, usually)."""
    import nkeys

    from rillet import jwt as J
    try:
        claims = J.decode_unverified(token)
    except (J.JwtError, ValueError) as e:
        raise CliError(f"not an account JWT: {e}") from None
    if J.claim_type(claims) != "account":
        raise CliError(f"not an account JWT: its type is {J.claim_type(claims)!r}")
    try:
        kp = nkeys.from_seed(seed if isinstance(seed, bytes) else seed.encode())
    except (nkeys.NkeysError, ValueError) as e:
        raise CliError(f"signing key: not an nkey seed ({type(e).__name__})") from None
    pub = J.public_key(kp)
    if not pub.startswith("O"):
        raise CliError(f"signing key {pub[:8]}...: an account JWT is signed by an operator key (O...)")
    nats_section = dict(claims.get("nats") or {})
    merged = dict(nats_section.get("mappings") or {})
    merged.update(jwt_mappings(name, regions))
    nats_section["mappings"] = merged
    claims = dict(claims)
    claims["nats"] = nats_section
    import time
    # a later issue time than the JWT it replaces: resolvers skip a JWT that is not newer
    claims["iat"] = max(int(time.time()), int(claims.get("iat") or 0) + 1)
    return J.encode(claims, kp)


def _read_text(path: str, what: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        raise CliError(f"{what}: {e.strerror}: {path}") from None


@app.command("jwt")
def jwt_cmd(name: str = typer.Argument(..., help="Virtual stream name"), regions: list[str] = REGIONS_OPT,
            account_jwt: Optional[str] = typer.Option(None, "--account-jwt", help="File holding the account's JWT"),
            signing_key: Optional[str] = typer.Option(None, "--signing-key",
                                                      help="File holding the operator's nkey seed (or a signing "
                                                           "key's)"),
            auth_account: Optional[str] = typer.Option(None, "--auth-account",
                                                       help="The account in the `rillet auth` (nsc) store instead "
                                                            "of --account-jwt/--signing-key: its JWT is read from "
                                                            "the store, signed with the operator's key from the "
                                                            "keystore and written back"),
            auth_dir: Optional[str] = typer.Option(None, "--auth-dir",
                                                   help="The store's directory for config, data and keys (as "
                                                        "`rillet auth -H`; default: NSC_HOME, NKEYS_PATH, XDG)"),
            out: Optional[str] = typer.Option(None, "--out", "-o", help="Write the new JWT to this file"),
            push: bool = typer.Option(False, "--push", help="Send the new JWT to the servers' resolver "
                                                             "($SYS.REQ.ACCOUNT.<key>.CLAIMS.UPDATE; needs a "
                                                             "system account user)")) -> None:
    """Operator mode: put a virtual stream's mappings into an account JWT, sign it, push it.

    \b
    The mappings (cluster-scoped, as `rillet vstream mappings --jwt` prints
    them) are merged into the JWT's nats.mappings, the JWT is signed again
    with the operator's key (or an operator signing key), then written out
    and/or pushed to the servers (full or memory resolver) like `nsc push`.
    With --auth-account the account of the `rillet auth` store is updated
    in place (then `rillet auth push` or --push sends it).

    \b
    Examples:
      rillet vstream jwt foo --regions west,central,east --account-jwt APP.jwt \\
          --signing-key operator.nk --out APP.jwt
      rillet --context sys vstream jwt foo --regions west,central,east \\
          --account-jwt APP.jwt --signing-key operator.nk --push
      rillet vstream jwt foo --regions west,central,east --auth-account APP
    """
    check_name(name)
    rs = parse_regions(regions)
    if auth_account is not None:
        if account_jwt or signing_key:
            raise CliError("--auth-account takes the JWT and the key from the store: not with --account-jwt or "
                           "--signing-key")
        token, path = _from_auth_store(auth_account, auth_dir, name, rs)
        print(f"Updated account {auth_account} in the auth store ({path}) with the mappings of virtual stream "
              f"{name}")
    else:
        if not account_jwt or not signing_key:
            raise CliError("give --account-jwt and --signing-key, or --auth-account")
        token = update_account_jwt(_read_text(account_jwt, "account JWT"), name, rs,
                                   _read_text(signing_key, "signing key"))
    if out:
        _write(out, token + "\n")
        print(f"Wrote the account JWT with the mappings of virtual stream {name} to {out}")
    if push:
        from rillet import jwt as J
        run(_push, token, J.decode_unverified(token)["sub"])
    if not out and not push and auth_account is None:
        print(token)


def _from_auth_store(account: str, auth_dir: Optional[str], name: str, regions: list[str]) -> tuple[str, str]:
    """The account's JWT in the `rillet auth` store with the mappings merged, signed with the operator's key
    (or one of its signing keys) from the keystore, and written back to the store."""
    from rillet.cli.auth import nscstore as auth
    try:
        s = auth.Store(auth.resolve_dirs({"all": auth_dir} if auth_dir else {}))
        op = s.operator()
        _, op_claims = s.operator_claims(op)
        acc = s.account(op, account)
        old, _claims = s.account_claims(op, acc, op_claims)
        keys = [op_claims["sub"], *s._signing_keys(op_claims)]
        seed = ""
        for pub in keys:
            try:
                seed = s.seed_of(pub)
                break
            except auth.AuthError:
                continue
        if not seed:
            raise auth.AuthError(f"no key of operator {op} is in the keystore {s.dirs.keys}")
        token = update_account_jwt(old, name, regions, seed)
        path = s.acc_jwt_path(op, acc)
        auth.write_file(path, token + "\n", 0o644)
    except auth.AuthError as e:
        raise CliError(str(e)) from None
    return token, path


async def _push(token: str, account: str) -> None:
    from nats import errors as nats_errors
    conn = await connect()
    try:
        try:
            # (the account's own update subject: answered by full and memory resolvers alike)
            r = await conn.nc.request(f"$SYS.REQ.ACCOUNT.{account}.CLAIMS.UPDATE", token.encode(),
                                      timeout=conn.settings.timeout)
        except nats_errors.Error as e:
            raise CliError(f"pushing the account JWT: {e!r} (connect as a system account user)") from None
        try:
            d = json.loads(r.data)
        except ValueError:
            raise CliError(f"pushing the account JWT: unexpected answer {r.data[:200]!r}") from None
        if d.get("error"):
            err = d["error"]
            raise CliError(f"pushing the account JWT: {err.get('description', err)}")
        print(f"Pushed: {(d.get('data') or {}).get('message', d)}")
    finally:
        await conn.nc.close()


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise CliError(f"could not write {path}: {e.strerror or e}") from None


@app.command("create")
def create(name: str = typer.Argument(..., help="Virtual stream name"), regions: list[str] = REGIONS_OPT,
           replicas: int = typer.Option(3, "--replicas", "-r", help="Replicas of every write and read stream"),
           max_age: Optional[str] = typer.Option(None, "--max-age",
                                                 help="Maximum age of the write streams' messages, e.g. 24h "
                                                      "(default: unlimited)"),
           storage: str = typer.Option("file", "--storage", help="file or memory"),
           placement: str = typer.Option("cluster", "--placement",
                                         help="Where each region's streams go: cluster (placement cluster = the "
                                              "region), tags (tag region:<region>, a stretch cluster) or none"),
           ordering: Optional[str] = typer.Option(None, "--ordering", metavar="CLUSTER",
                                                  help="Ordering variant: a stream <name>-order in this cluster "
                                                       "sources the write streams; the read streams mirror it, so "
                                                       "every region sees one global order"),
           ordering_replicas: int = typer.Option(0, "--ordering-replicas", metavar="N",
                                                 help="Replicas of the ordering stream (default: --replicas), "
                                                      "e.g. 3 in a stretch cluster over three regions"),
           ordering_tags: Optional[list[str]] = typer.Option(None, "--ordering-tag", metavar="TAG",
                                                             help="A placement tag of the ordering stream "
                                                                  "(repeatable); one replica per region comes "
                                                                  "from the servers' jetstream unique_tag"),
           mappings_out: Optional[str] = typer.Option(None, "--mappings-out",
                                                      help="Write the servers' mappings include file here "
                                                           "(default: print it after the streams)"),
           local: str = LOCAL_OPT, as_json: bool = JSON_OPT) -> None:
    """Create a virtual stream: its write and read streams, and the mappings for the servers.

    \b
    Per region R (a cluster named R): a write stream <name>-write-R on
    subjects <name>.R.> and a read stream <name>-read-R sourcing every write
    stream (<name>.*.> -> <name>.>). Streams that exist with the same
    configuration are left as they are.

    \b
    The mappings are server configuration: put them in the account's
    mappings block on every server (mappings { include "<file>" }) and
    reload the servers. Only then do publishes on <name>.x and the
    JetStream API on <name> reach the regional streams.

    \b
    Examples:
      rillet vstream create foo --regions west,central,east --max-age 24h \\
          --mappings-out foo.mappings.conf
      rillet vstream create foo --regions west,central,east --ordering stretch
      rillet vstream create foo --regions west,central,east --replicas 1 \\
          --ordering stretch --ordering-replicas 3
      rillet vstream create foo --regions west,central,east --replicas 1 \\
          --placement none --local west          (try it on one server)
    """
    check_name(name)
    rs = parse_regions(regions)
    if replicas < 1:
        raise CliError("--replicas must be at least 1")
    if storage not in ("file", "memory"):
        raise CliError(f"invalid storage {storage!r}: use file or memory")
    age = to_nanos(parse_duration(max_age)) if max_age else 0
    cfgs = stream_configs(name, rs, replicas=replicas, max_age_ns=age, storage=storage, placement=placement,
                          ordering=ordering or "", ordering_replicas=ordering_replicas,
                          ordering_tags=ordering_tags or ())
    text = render_mappings(name, rs, local=local)
    if mappings_out:
        _write(mappings_out, text)
    run(_create, name, cfgs, text, mappings_out, local, as_json)


async def _create(name: str, cfgs: list[dict[str, Any]], text: str, mappings_out: str | None, local: str,
                  as_json: bool) -> None:
    conn = await connect()
    made: list[dict[str, Any]] = []
    try:
        for cfg in cfgs:  # in order: the write streams exist before the streams that source them
            try:
                resp = await api(conn, f"STREAM.CREATE.{cfg['name']}", cfg, timeout=max(conn.settings.timeout, 10))
            except JSAPIError as e:
                raise CliError(f"could not create stream {cfg['name']}: {e.description}"
                               + (f" (after creating {', '.join(m['name'] for m in made)})" if made else "")
                               ) from None
            cl = resp.get("cluster") or {}
            made.append({"name": cfg["name"], "cluster": cl.get("name", ""), "leader": cl.get("leader", ""),
                         "replicas": cfg["num_replicas"]})
    finally:
        await conn.nc.close()
    if as_json:
        print_json({"streams": made, "mappings_file": mappings_out, "mappings": None if mappings_out else text})
        return
    for m in made:
        where = f" in cluster {m['cluster']}" if m["cluster"] else ""
        print(f"Stream {m['name']} is ready{where} ({m['replicas']} replica{'s' if m['replicas'] != 1 else ''})")
    print()
    if mappings_out:
        print(f"Wrote the mappings to {mappings_out}: include them in the account's mappings block on every "
              f"server{' of region ' + local if local else ''} and reload:")
        print(f'  mappings {{ include "{mappings_out}" }}')
    else:
        print(f"Mappings for the account's mappings block on every server{' of region ' + local if local else ''}"
              " (then reload the servers):\n")
        print(text, end="")


def _discover(names: list[str], name: str) -> tuple[list[str], bool]:
    """The regions of virtual stream ``name`` among these stream names, and whether it has an ordering
    stream."""
    regions: list[str] = []
    for prefix in (f"{name}-write-", f"{name}-read-"):
        for n in sorted(names):
            if n.startswith(prefix) and n[len(prefix):] not in regions:
                regions.append(n[len(prefix):])
    return regions, order_name(name) in names


async def _stream_infos(conn: Any, streams: list[str]) -> dict[str, Any]:
    """STREAM.INFO of each stream (at once); an error's description where there is no answer."""
    async def one(s: str) -> Any:
        try:
            return await api(conn, f"STREAM.INFO.{s}")
        except CliError as e:
            return str(e)
    return dict(zip(streams, await asyncio.gather(*(one(s) for s in streams))))


def _replicas(info: dict[str, Any]) -> tuple[str, int, int]:
    """(leader, current replicas counting the leader, configured replicas)."""
    cl = info.get("cluster") or {}
    want = (info.get("config") or {}).get("num_replicas", 1)
    leader = cl.get("leader", "")
    cur = (1 if leader else 0) + sum(1 for r in cl.get("replicas") or [] if r.get("current"))
    return leader, cur, want


def _active(ns: Any) -> str:
    if ns is None or ns < 0:
        return "never"
    return format_duration(ns / 1e9) + " ago"


def status_data(name: str, regions: list[str], ordering: bool, infos: dict[str, Any]) -> dict[str, Any]:
    """What ``status`` shows, from the streams' STREAM.INFO answers (a string: why there is none)."""
    streams = []
    lags = []
    order = [order_name(name)] if ordering else []
    for r, sname, role in ([(r, write_name(name, r), "write") for r in regions]
                           + [("", o, "order") for o in order]
                           + [(r, read_name(name, r), "read") for r in regions]):
        info = infos.get(sname)
        if not isinstance(info, dict):
            streams.append({"region": r, "stream": sname, "role": role, "error": info or "no answer"})
            continue
        st = info.get("state") or {}
        leader, cur, want = _replicas(info)
        streams.append({"region": r, "stream": sname, "role": role, "messages": st.get("messages", 0),
                        "last_seq": st.get("last_seq", 0), "cluster": (info.get("cluster") or {}).get("name", ""),
                        "leader": leader, "replicas_current": cur, "replicas": want})
        origins = list(info.get("sources") or [])
        if info.get("mirror"):
            origins.append(info["mirror"])
        for o in origins:
            lags.append({"region": r, "stream": sname, "origin": o.get("name", ""), "lag": o.get("lag", 0),
                         "active_ns": o.get("active", -1), "error": (o.get("error") or {}).get("description")})
    return {"name": name, "regions": regions, "streams": streams, "lag": lags}


@app.command("status")
def status(name: str = typer.Argument(..., help="Virtual stream name"),
           regions: Optional[list[str]] = typer.Option(None, "--regions",
                                                       help="Regions (default: found from the stream names)"),
           as_json: bool = JSON_OPT) -> None:
    """Per region, each stream's state, and how far each read stream lags behind each write stream.

    \b
    Lag is the number of messages a read stream has not yet copied from a
    write stream (sources[].lag in the read stream's info); "active" is
    when it last heard from that source. A stream that does not answer
    (its region down, no quorum) is shown with the error.

    \b
    Examples:
      rillet vstream status foo
      rillet vstream status foo --regions west,central,east --json
    """
    check_name(name)
    rs = parse_regions(regions) if regions else []
    run(_status, name, rs, as_json)


async def _status(name: str, regions: list[str], as_json: bool) -> None:
    from rillet.cli.jsapi import stream_names
    conn = await connect()
    try:
        names = await stream_names(conn)
        found, ordering = _discover(names, name)
        regions = regions or found
        if not regions:
            raise CliError(f"no streams of virtual stream {name} ({name}-write-<region>, {name}-read-<region>)")
        want = [write_name(name, r) for r in regions] + [read_name(name, r) for r in regions]
        if ordering:
            want.append(order_name(name))
        infos = await _stream_infos(conn, want)
    finally:
        await conn.nc.close()
    data = status_data(name, regions, ordering, infos)
    if as_json:
        print_json(data)
        return
    rows = []
    for s in data["streams"]:
        if "error" in s:
            rows.append([s["region"], s["stream"], s["role"], "", "", "", "", s["error"]])
            continue
        rows.append([s["region"], s["stream"], s["role"], human_count(s["messages"]), human_count(s["last_seq"]),
                     s["leader"], f"{s['replicas_current']}/{s['replicas']}", ""])
    table(f"Virtual stream {name}: streams", ["Region", "Stream", "Role", "Messages", "Last Seq", "Leader",
                                              "Replicas current", "Error"], rows)
    rows = [[lg["region"], lg["stream"], lg["origin"], human_count(lg["lag"]), _active(lg["active_ns"]),
             lg["error"] or ""] for lg in data["lag"]]
    table(f"Virtual stream {name}: lag behind the write streams", ["Region", "Stream", "Source", "Lag", "Active",
                                                                   "Error"], rows)


@app.command("rm")
def rm(name: str = typer.Argument(..., help="Virtual stream name"),
       regions: Optional[list[str]] = typer.Option(None, "--regions",
                                                   help="Regions (default: found from the stream names)"),
       force: bool = typer.Option(False, "--force", "-f", help="Act without a prompt")) -> None:
    """Delete a virtual stream's read, ordering and write streams (and all their messages).

    \b
    The mappings stay in the servers' configuration until you remove them.

    \b
    Example:
      rillet vstream rm foo -f
    """
    check_name(name)
    from rillet.cli.common import confirm
    confirm(f"Really delete every stream of virtual stream {name}?", force)
    run(_rm, name, parse_regions(regions) if regions else [])


async def _rm(name: str, regions: list[str]) -> None:
    from rillet.cli.jsapi import stream_names
    conn = await connect()
    try:
        names = set(await stream_names(conn))
        found, ordering = _discover(list(names), name)
        regions = regions or found
        doomed = [read_name(name, r) for r in regions] + ([order_name(name)] if ordering else []) \
            + [write_name(name, r) for r in regions]
        doomed = [d for d in doomed if d in names]
        if not doomed:
            raise CliError(f"no streams of virtual stream {name}")
        for s in doomed:
            await api(conn, f"STREAM.DELETE.{s}", timeout=max(conn.settings.timeout, 10))
            print(f"Deleted stream {s}")
    finally:
        await conn.nc.close()
