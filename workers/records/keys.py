"""Every Redis key family of taubot's records, defined once: a newcomer reads here what is kept.

Each family is a prefix and the functions that build its keys; the module that reads and writes a
family imports it from here, so two writers can never spell one family two ways, and a family's
shape (what follows the prefix) is decided in one place. Records only: the plumbing's own working
sets — the timed jobs' due and leased sets (`workers/plumbing/timed_jobs.py`) and Slack's pace
(`workers/surfaces/pacing.py`) — are mechanisms, not records, and live with the mechanism.

| family | key | written by | read by |
|---|---|---|---|
| posted card | `taubot:card:<channel>:<ts>` (+ `:lock`) | every card writer | every card writer |
| *Details* | `taubot:details:<id>` | card store | *Details* press |
| stored diagnosis | `taubot:diagnosis:<id>` | Escalate offer | Escalate press |
| escalation claim | `taubot:escalated:<digest>` | Escalate press | cards (the note) |
| watch | `taubot:watch:<wid>` (+ `:owner`, `:pending`, `:lock`) | the watch | the watch, Stop |
| node-validation offer | `taubot:validate-offer:<id>` (+ `:used`) | status card | *Validate* press |
| parent message | `taubot:parent:<job id>` | status job | its retries, failure callback |
| operator access | `taubot:operator-access:<scope>:<digest>` | operator review | operator review |
| first sighting of a log | `taubot:log-seen:<run uid>` | layer 7 | layer 7 |
| what the last log read found | `taubot:last-read:<run uid>` | layer 7 | layer 7 (what to send early) |
| LocalQueue → ClusterQueue | `taubot:cq-of:<digest>` | queue read | queue read |
| a run's training ETA | `taubot:eta:<run uid>` | status, watch (layer 7) | a waiting run's start estimate |
| exporter labels of a cluster | `taubot:exporter-labels:<digest>` | `--run-profile` | `--run-profile` |
| stall monitor | `taubot:monitor:…` (rec, group, posted, claim, lease, log-checked) | monitor | monitor |
| mute | `taubot:monitor:mute:…`, `taubot:monitor:mute-record:<id>` | Mute press, monitor | monitor, Mute |
| Slack user → identity | `taubot:identity:<team>:<user>` | front end | front end |
| App Home | `taubot:home:user:<user>`, `taubot:home:budget:<minute>` | home job | home job |
"""

from __future__ import annotations

import hashlib

# -- cards
CARD = "taubot:card:"
DETAILS = "taubot:details:"


def card_key(channel: str, ts: str) -> str:
    return f"{CARD}{channel}:{ts}"


def details_key(record_id: str) -> str:
    return DETAILS + record_id


def details_posted_key(record_id: str, card_hash: str) -> str:
    """Set (NX) when *Details* of a card at this hash was posted: one post per card state."""
    return f"{DETAILS}{record_id}:posted:{card_hash}"


# -- escalation
DIAGNOSIS = "taubot:diagnosis:"
ESCALATED = "taubot:escalated:"


def diagnosis_key(record_id: str) -> str:
    return DIAGNOSIS + record_id


def escalated_key(digest: str) -> str:
    return ESCALATED + digest

# -- watches
WATCH = "taubot:watch:"


def watch_state_key(wid: str) -> str:
    return f"{WATCH}{wid}"


def watch_owner_key(wid: str) -> str:
    return f"{WATCH}{wid}:owner"


def watch_pending_key(wid: str) -> str:
    return f"{WATCH}{wid}:pending"


def watch_lock_key(wid: str) -> str:
    return f"{WATCH}{wid}:lock"


WATCH_OWNERS = f"{WATCH}*:owner"  # the SCAN pattern of live watches

# -- status
VALIDATE_OFFER = "taubot:validate-offer:"
PARENT = "taubot:parent:"


def validate_offer_key(offer_id: str) -> str:
    return VALIDATE_OFFER + offer_id


def validate_offer_used_key(offer_id: str) -> str:
    """Set (NX) by the first press that may create the pods: the offer is single-use."""
    return f"{VALIDATE_OFFER}{offer_id}:used"


def parent_key(job_id: str) -> str:
    return f"{PARENT}{job_id}"


# -- reads the collect layer remembers
OPERATOR_ACCESS = "taubot:operator-access:"
LOG_SEEN = "taubot:log-seen:"
LAST_READ = "taubot:last-read:"  # + the run's uid: what its last layer-7 read found (logs/memory.py)
CLUSTER_QUEUE_OF = "taubot:cq-of:"  # + a digest of (cluster, namespace, LocalQueue): the ClusterQueue's name
RUN_ETA = "taubot:eta:"  # + the run's uid: its training ETA as taubot last computed it (kueue_etas.py)
EXPORTER_LABELS = "taubot:exporter-labels:"  # + a digest of the cluster: both exporter LISTs at once


def log_seen_key(run_uid: str) -> str:
    return LOG_SEEN + run_uid


def last_read_key(run_uid: str) -> str:
    return LAST_READ + run_uid


def run_eta_key(run_uid: str) -> str:
    return RUN_ETA + run_uid


def cluster_queue_of_key(digest: str) -> str:
    return CLUSTER_QUEUE_OF + digest


def exporter_labels_key(cluster: str) -> str:
    """Per cluster target (its JSON), hashed: a server URL is no part of a key."""
    return EXPORTER_LABELS + hashlib.sha256(cluster.encode()).hexdigest()[:32]


def operator_access_key(scope: str, identity_json: str) -> str:
    """Per workspace and identity; a changed group list is a different key."""
    return f"{OPERATOR_ACCESS}{scope}:{hashlib.sha256(identity_json.encode()).hexdigest()[:16]}"


# -- the stall monitor
MONITOR = "taubot:monitor:"
MONITOR_LEASE = f"{MONITOR}lease"
MONITOR_LOG_CHECKED = f"{MONITOR}log-checked:"


def stall_record_key(ws: str, uid: str) -> str:
    return f"{MONITOR}rec:{ws}:{uid}"


def stall_group_key(ws: str, digest: str) -> str:
    return f"{MONITOR}group:{ws}:{digest}"


def stall_posted_key(ws: str) -> str:
    return f"{MONITOR}posted:{ws}"


def stall_claim_key(ws: str, ident: str) -> str:
    return f"{MONITOR}claim:{ws}:{ident}"


def mute_key(ws: str, ns: str, run: str) -> str:
    return f"{MONITOR}mute:{ws}:{ns}:{run}"


def mute_record_key(record_id: str) -> str:
    return f"{MONITOR}mute-record:{record_id}"


# -- the front end
IDENTITY = "taubot:identity:"

# -- the App Home tab (issue 37): a user's last publish (a minute's cache) and the workspace's tier-4 budget
HOME = "taubot:home:"


def home_key(user: str) -> str:
    return f"{HOME}user:{user}"


def home_budget_key(minute: int) -> str:
    return f"{HOME}budget:{minute}"
