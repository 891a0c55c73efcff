"""Turning chunks of JetStream messages into Arrow record batches with the exact schema Spark expects."""
from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rillet.spark.client import Chunk, parse_headers

META_COLUMNS = ("stream", "subject", "seq", "timestamp", "headers", "region", "origin")
SOURCE_HDR = "Nats-Stream-Source"


def _origin(value: str) -> str:
    # "<origin stream>[:<hash>] <origin seq> <filter> <destination>"
    first = value.split(" ", 1)[0]
    return first.split(":", 1)[0]


def _utf8(arr: pa.Array) -> pa.Array:
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if b is None else b.decode("utf-8", "replace") for b in arr.to_pylist()], pa.string())


class BatchBuilder:
    """Builds record batches for ``arrow_schema`` (from ``to_arrow_schema`` of the query's schema)."""

    def __init__(self, arrow_schema: pa.Schema, stream: str, decode: str, region_header: str,
                 json_names: list[str] | None = None) -> None:
        self.schema = arrow_schema
        self.stream = stream
        self.decode = decode
        self.region_header = region_header.lower()
        names = set(arrow_schema.names)
        self.need_headers = bool(names & {"headers", "region", "origin"})
        jn = {n.lower() for n in (json_names or [])}
        self.json_fields = [f for f in arrow_schema
                            if f.name.lower() in jn or (f.name not in META_COLUMNS and f.name != "data")]
        self.json_names = {f.name for f in self.json_fields}
        if decode != "json" and self.json_fields:
            raise ValueError(f"unknown columns {[f.name for f in self.json_fields]} (decoded columns need "
                             f"decode=json)")
        self.json_type = pa.struct(self.json_fields) if self.json_fields else None

    def build(self, c: Chunk) -> pa.RecordBatch:
        n = len(c)
        cols: dict[str, Any] = {}
        parsed: list[list[tuple[str, str]] | None] | None = None
        if self.need_headers:
            parsed = [parse_headers(h) if h else None for h in c.headers]
        for f in self.schema:
            name = f.name
            if name in self.json_names:
                continue
            if name == "stream":
                arr = pa.array([self.stream] * n, pa.string())
            elif name == "subject":
                arr = _utf8(pa.array(c.subjects, pa.binary()))
            elif name == "seq":
                arr = pa.array(c.seqs, pa.int64())
            elif name == "timestamp":
                arr = pc.divide(pa.array(c.times, pa.int64()), 1000).cast(f.type)
            elif name == "headers":
                vals = []
                for pairs in parsed:  # type: ignore[union-attr]
                    if not pairs:
                        vals.append(None)
                        continue
                    d: dict[str, list[str]] = {}
                    for k, v in pairs:
                        d.setdefault(k, []).append(v)
                    vals.append(list(d.items()))
                arr = pa.array(vals, f.type)
            elif name in ("region", "origin"):
                want = self.region_header if name == "region" else SOURCE_HDR.lower()
                vals2: list[str | None] = []
                for pairs in parsed:  # type: ignore[union-attr]
                    got = None
                    if pairs:
                        for k, v in pairs:
                            if k.lower() == want:
                                got = v if name == "region" else _origin(v)
                                break
                    vals2.append(got)
                arr = pa.array(vals2, pa.string())
            elif name == "data":
                raw = pa.array(c.datas, pa.binary())
                arr = _utf8(raw) if pa.types.is_string(f.type) else raw
            else:
                continue
            cols[name] = arr
        if self.json_fields:
            struct = self._json(c.datas)
            for i, f in enumerate(self.json_fields):
                cols[f.name] = struct.field(i)
        return pa.RecordBatch.from_arrays([cols[f.name] for f in self.schema], schema=self.schema)

    def _json(self, datas: list[bytes]) -> pa.StructArray:
        """Each payload parsed as a JSON object into the user's schema; a payload that is not JSON, or does
        not fit the schema, gives a row of nulls (as Spark's from_json in PERMISSIVE mode)."""
        objs: list[Any] = []
        for d in datas:
            try:
                o = json.loads(d)
            except ValueError:
                o = None
            objs.append(o if isinstance(o, dict) else None)
        try:
            arr = pa.array(objs, self.json_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            rows = []
            for o in objs:
                try:
                    pa.array([o], self.json_type)
                    rows.append(o)
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
                    rows.append(None)
            arr = pa.array(rows, self.json_type)
        if arr.null_count:
            # a null struct must read as null fields
            arr = pa.StructArray.from_arrays([arr.field(i) if not arr.null_count else
                                              pc.if_else(arr.is_null(), pa.nulls(len(arr), f.type), arr.field(i))
                                              for i, f in enumerate(self.json_fields)],
                                             fields=list(self.json_fields))
        return arr
