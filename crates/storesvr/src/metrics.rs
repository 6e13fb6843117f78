//! The StoreSvr's Prometheus series (exported by `seqsvr_server::metrics`). The Raft driver
//! thread owns a [`StoreMetrics`] and publishes its gauges once per tick; counters and
//! histograms are recorded where things happen. Before a recorder is installed (unit tests,
//! `--metrics-addr off`) every handle is a no-op.

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

pub struct StoreMetrics {
    pub has_leader: Gauge,
    pub is_leader: Gauge,
    pub term: Gauge,
    pub leader_changes: Counter,
    pub commit_index: Gauge,
    pub applied_index: Gauge,
    pub last_index: Gauge,
    pub proposals_committed: Counter,
    pub proposals_failed: Counter,
    pub proposals_pending: Gauge,
    pub proposal_apply: Histogram,
    pub synced_write: Histogram,
    pub snapshots_sent: Counter,
    pub snapshots_received: Counter,
    pub allocsvrs_registered: Gauge,
    pub sections_unsettled: Gauge,
    pub vote_blocked: Gauge,
    pub commands_version: Gauge,
}

impl StoreMetrics {
    /// Registers every series with the installed recorder (no-ops if there is none).
    pub fn new() -> StoreMetrics {
        describe();
        StoreMetrics {
            has_leader: gauge!("seqsvr_store_has_leader"),
            is_leader: gauge!("seqsvr_store_is_leader"),
            term: gauge!("seqsvr_store_term"),
            leader_changes: counter!("seqsvr_store_leader_changes_total"),
            commit_index: gauge!("seqsvr_store_commit_index"),
            applied_index: gauge!("seqsvr_store_applied_index"),
            last_index: gauge!("seqsvr_store_last_index"),
            proposals_committed: counter!("seqsvr_store_proposals_total", "outcome" => "committed"),
            proposals_failed: counter!("seqsvr_store_proposals_total", "outcome" => "failed"),
            proposals_pending: gauge!("seqsvr_store_proposals_pending"),
            proposal_apply: histogram!("seqsvr_store_proposal_apply_seconds"),
            synced_write: histogram!("seqsvr_store_synced_write_seconds"),
            snapshots_sent: counter!("seqsvr_store_snapshots_total", "direction" => "sent"),
            snapshots_received: counter!("seqsvr_store_snapshots_total", "direction" => "received"),
            allocsvrs_registered: gauge!("seqsvr_store_allocsvrs_registered"),
            sections_unsettled: gauge!("seqsvr_store_sections_unsettled"),
            vote_blocked: gauge!("seqsvr_store_vote_blocked"),
            commands_version: gauge!("seqsvr_store_commands_version"),
        }
    }
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics::new()
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_gauge!(
        "seqsvr_store_has_leader",
        "1 while this member knows a leader that has a quorum in sight (what health reports)."
    );
    describe_gauge!("seqsvr_store_is_leader", "1 while this member is the set's Raft leader.");
    describe_gauge!("seqsvr_store_term", "Current Raft term.");
    describe_counter!(
        "seqsvr_store_leader_changes_total",
        "Times the leader this member knows changed (including to none)."
    );
    describe_counter!(
        "seqsvr_store_raft_messages_refused_total",
        "Raft messages from a peer refused before parsing by the wire pre-check \
         (seqsvr_core::raft_wire: protobuf groups, malformed fields; RUSTSEC-2024-0437)."
    );
    describe_gauge!("seqsvr_store_commit_index", "Raft commit index.");
    describe_gauge!("seqsvr_store_applied_index", "Raft index applied to the state machine.");
    describe_gauge!("seqsvr_store_last_index", "Last index in this member's Raft log.");
    describe_counter!(
        "seqsvr_store_proposals_total",
        "Proposals answered by this member as leader, by outcome (committed: applied, whatever \
         the state machine answered; failed: refused, dropped, superseded or unknown)."
    );
    describe_gauge!(
        "seqsvr_store_proposals_pending",
        "Proposals waiting for their entry to apply."
    );
    describe_histogram!(
        "seqsvr_store_proposal_apply_seconds",
        Unit::Seconds,
        "Time from proposing an entry to applying it."
    );
    describe_histogram!(
        "seqsvr_store_synced_write_seconds",
        Unit::Seconds,
        "Time of one synced RocksDB write of Raft entries and hard state (fsync included)."
    );
    describe_counter!("seqsvr_store_snapshots_total", "Raft snapshots sent and received.");
    describe_gauge!(
        "seqsvr_store_allocsvrs_registered",
        "AllocSvrs registered with this set (the applied registry)."
    );
    describe_gauge!(
        "seqsvr_store_sections_unsettled",
        "Sections whose hand-over has not settled (a new owner waits for the old lease to end)."
    );
    describe_gauge!(
        "seqsvr_store_vote_blocked",
        "1 while this member, started from an empty data dir, may not vote until re-added."
    );
    describe_gauge!(
        "seqsvr_store_commands_version",
        "The set's commands version as this member applied it: below the build's (seqctl store \
         status) while a member of an older build holds back the commands that need it."
    );
}
