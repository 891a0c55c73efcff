"""The stream configuration a clustered stream replica last applied from its group's log, kept durably beside its
store (``<stream dir>/applied-config.json``), so that a restarted replica opens its store and applies its log
with the configuration its store was last written under, not the one its meta assignment held when the replica
was built.

Why (issue 24): a stream's configuration changes through an UPDATE entry of its own group's log, ordered with
the messages. After a restart the meta layer rebuilds the replica from the assignment as it replays the meta
log, that is with the configuration of the stream's creation (the later update only reaches a leader, which
proposes it), and the group's WAL replay skips the UPDATE entry when the store already holds what came after
it. The store was then opened with the old limits (a KV bucket updated to ``discard: old`` came back with
``discard: new``): the limit removals, whose state-log records a file store writes lazily and redoes on open,
were not redone (evicted messages back), and the replicas decided differently on the same entries (one stored
a message its leader refused with 10077): a fork.

The file holds the group's name (a stream deleted and made again under the same name has another group: its
file is ignored) and the configuration as the UPDATE entry carries it (Go JSON). It is written with a
temporary file fsynced and renamed over the old one, the directory fsynced (``rillet.durable.write_json``),
whenever an UPDATE entry is applied (after the store was made durable up to it: a restart never finds the
store short of the UPDATE's place in the log, where the entries before it would be applied again under the new
configuration) or a snapshot carrying a configuration is installed on a store that was behind it (a replica
that missed the UPDATE: snapshots carry the configuration and its time); memory streams keep nothing.
"""
from __future__ import annotations

import json
import os
from typing import Any

from rillet.durable import read_json, write_json

FILE = "applied-config.json"


def load(sdir: str, group: str) -> tuple[Any, int] | None:
    """(the configuration, a StreamConfig, the time of its UPDATE entry) last applied by this stream's group
    ``group`` here; None without one."""
    from rillet.jetstream.api.common import stream_config_from_dict
    doc = read_json(os.path.join(sdir, FILE), "a stream's applied configuration")
    if not isinstance(doc, dict) or doc.get("group") != group or not isinstance(doc.get("config"), dict):
        return None
    ts = doc.get("ts")
    return stream_config_from_dict(doc["config"]), ts if isinstance(ts, int) else 0


def applied(rep: Any, ts: int) -> None:
    """(every replica) An UPDATE entry (the leader's time ``ts``) was applied: the store made durable up to here
    (its limit removals too), so that no restart finds the store short of this point of the log, then the new
    configuration kept. Raises OSError (StoreError) when that fails: the entry's apply fails with it."""
    st = rep.stream
    rep.config_ts = ts
    if getattr(rep, "cfg_wanted", None) == st.cfg:
        rep.cfg_wanted = None  # (the assignment's update is applied: clustered.config_due)
    if st.cfg.storage == "memory":
        return
    st.store.flush()
    st.store.sync()
    from rillet.jetstream.api.common import encode_config
    write_json(rep.jsa.stream_dir(st.name), FILE,
               {"group": rep.group.name, "config": json.loads(encode_config(st.cfg)), "ts": ts})


def snapshot_fields(rep: Any) -> dict:
    """What a group snapshot carries of the configuration: the one the log applied up to it, and its time."""
    from rillet.jetstream.api.common import encode_config
    return {"config": bytes(encode_config(rep.stream.cfg)), "config_ts": rep.config_ts}


def install(rep: Any, snap: dict) -> None:
    """A snapshot of the leader's was installed on a store that was behind it: the entries it stands for may
    have held UPDATEs this replica never applied, so its configuration becomes the snapshot's (applied as its
    UPDATE entry was, at that entry's time: the limits are the ones the leader's store had then), then kept."""
    raw = snap.get("config")
    if not isinstance(raw, bytes):
        return  # (a snapshot of an older Rillet)
    from rillet.jetstream.api.common import stream_config_from_dict
    from rillet.jetstream.log import Entry
    from rillet.jetstream.storeopen import store_config
    cfg = stream_config_from_dict(json.loads(raw))
    st = rep.stream
    if cfg == st.cfg:
        return
    ts = snap.get("config_ts") or 0
    # (at the UPDATE's time nothing the leader's store held at the snapshot expires; without that time, at 1 ns
    # past the epoch: never the local clock, whose expiries and markers would be this replica's alone)
    st.apply(Entry(Entry.UPDATE, (cfg, store_config(cfg, rep.cs.js), ts or 1)))
    st.take_effects()  # (nothing for the consumers here: the snapshot's state is the leader's)
    applied(rep, ts)
