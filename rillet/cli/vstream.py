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
or at the top level for the global account); this command writes that file and creates the streams.
With ``--ordering``, one stream ``V-order`` (in the cluster given, e.g. a stretch cluster) sources the
write streams and each regional read stream mirrors it instead, so every region sees the same order.
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
                   storage: str = "file", placement: str = "cluster", ordering: str = "") -> list[dict[str, Any]]:
    """The stream configurations to create, in order: write streams, the ordering stream (``ordering``:
    the cluster it is placed in, "" for none), then read streams."""
    if placement not in ("cluster", "tags", "none"):
        raise CliError(f"invalid placement {placement!r}: use cluster, tags or none")
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
        cfg = {"name": order_name(name), "storage": storage, "num_replicas": replicas, "sources": sources,
               "allow_direct": True}
        if placement != "none":
            cfg["placement"] = {"cluster": ordering}
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
