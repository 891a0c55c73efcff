"""The RAFT node's roles, a follower's replication modes (as its leader tracks them) and membership change
operations: plain strings, shared by the node and its parts."""

FOLLOWER = "follower"
PRE_CANDIDATE = "pre-candidate"
CANDIDATE = "candidate"
LEADER = "leader"

PROBE = "probe"          # one append in flight, wait for the answer: find where the logs agree
REPLICATE = "replicate"  # optimistic: stream appends up to max_inflight ahead of the acknowledgements
SNAPSHOT = "snapshot"    # a snapshot is on its way; nothing else is sent until it is acknowledged

ADD = "add"
REMOVE = "remove"
