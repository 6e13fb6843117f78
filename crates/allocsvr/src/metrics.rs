//! The AllocSvr's Prometheus series (exported by `seqsvr_server::metrics`). Handles are
//! registered once at start, so the request path pays an atomic add, not a registry lookup.
//! Before a recorder is installed (unit tests, `--metrics-addr off`) every handle is a no-op.

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};
use std::time::Duration;
use tonic::Code;

/// The public RPCs, as the `rpc` label says them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rpc {
    Next,
    NextBatch,
    /// One batch on a `NextStream` stream (the SDK's coalesced calls).
    NextStream,
    Current,
}

impl Rpc {
    const ALL: [Rpc; 4] = [Rpc::Next, Rpc::NextBatch, Rpc::NextStream, Rpc::Current];

    pub fn label(self) -> &'static str {
        match self {
            Rpc::Next => "next",
            Rpc::NextBatch => "next_batch",
            Rpc::NextStream => "next_stream",
            Rpc::Current => "current",
        }
    }
}

/// How a call ended, as the `outcome` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// FAILED_PRECONDITION: the section is served elsewhere (the answer carries the route table).
    NotOwner,
    /// UNAVAILABLE or DEADLINE_EXCEEDED: no lease, loading, or waiting for the store.
    Unavailable,
    /// INVALID_ARGUMENT: a uid outside the set, an empty or oversized batch.
    Invalid,
    /// RESOURCE_EXHAUSTED: the section reached the `max_seq` ceiling.
    Exhausted,
    /// Anything else (a bug if it ever counts).
    Error,
}

impl Outcome {
    const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::NotOwner,
        Outcome::Unavailable,
        Outcome::Invalid,
        Outcome::Exhausted,
        Outcome::Error,
    ];

    pub fn of(code: Code) -> Outcome {
        match code {
            Code::Ok => Outcome::Ok,
            Code::FailedPrecondition => Outcome::NotOwner,
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => Outcome::Unavailable,
            Code::InvalidArgument | Code::OutOfRange => Outcome::Invalid,
            Code::ResourceExhausted => Outcome::Exhausted,
            _ => Outcome::Error,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::NotOwner => "not_owner",
            Outcome::Unavailable => "unavailable",
            Outcome::Invalid => "invalid",
            Outcome::Exhausted => "exhausted",
            Outcome::Error => "error",
        }
    }
}

/// The budgets that bound what calls hold (issue 30), as the `budget` label says them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// `SeqService` calls waiting at once (`alloc.max_waiting_calls`).
    WaitingCalls,
    /// `NextIds` calls waiting at once (`alloc.max_waiting_id_calls`).
    WaitingIdCalls,
    /// `NextStream` streams open (`alloc.max_streams`).
    Streams,
    /// Bytes of `NextStream` batches and `NextBatch` calls held (`alloc.max_stream_bytes`).
    StreamBytes,
    /// Ids held by `NextIds` calls (`alloc.max_ids_in_flight`).
    IdsInFlight,
}

impl Budget {
    pub const ALL: [Budget; 5] = [
        Budget::WaitingCalls,
        Budget::WaitingIdCalls,
        Budget::Streams,
        Budget::StreamBytes,
        Budget::IdsInFlight,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Budget::WaitingCalls => "waiting_calls",
            Budget::WaitingIdCalls => "waiting_id_calls",
            Budget::Streams => "streams",
            Budget::StreamBytes => "stream_bytes",
            Budget::IdsInFlight => "ids_in_flight",
        }
    }
}

/// One budget's series: what it holds now (set by `observe.rs` every 100 ms), its limit, and
/// how often it was full.
pub struct BudgetSeries {
    pub in_use: Gauge,
    pub limit: Gauge,
    /// A call refused (waiting calls, streams, ids) or a stream's read held back (stream bytes).
    pub full: Counter,
}

struct RpcSeries {
    calls: [Counter; Outcome::ALL.len()],
    values: Counter,
    duration: Histogram,
    waited: Counter,
}

pub struct AllocMetrics {
    rpcs: [RpcSeries; Rpc::ALL.len()],
    batch_uids: Histogram,
    advances_committed: Counter,
    advances_refused: Counter,
    advances_failed: Counter,
    advance_sections: Histogram,
    advance_duration: Histogram,
    pub sections_ready: Gauge,
    pub sections_loading: Gauge,
    pub sections_touched: Gauge,
    pub cur_seq_bytes: Gauge,
    /// Sections rebased (a uid's 32-bit `cur_seq` offset would have overflowed): every uid of
    /// the section raised to its highest value served. Set from the table's running total.
    pub offset_rebases: Counter,
    pub lease_remaining: Gauge,
    pub lease_valid: Gauge,
    pub route_version: Gauge,
    pub heartbeats_ok: Counter,
    pub heartbeats_failed: Counter,
    /// Ids issued by `NextIds` (every scheme).
    pub ids_issued: Counter,
    /// Worker ids leased from the store.
    pub ids_workers_leased: Counter,
    /// High-water marks raised in the store.
    pub ids_reservations: Counter,
    /// Wall-clock readings below the one before (per worker id).
    pub ids_clock_back: Counter,
    /// Times a `NextIds` call had to wait for the clock.
    pub ids_clock_waits: Counter,
    budgets: [BudgetSeries; Budget::ALL.len()],
    /// Calls (a `NextStream` batch counts as one) forwarded to their owner, by RPC.
    forwarded: [Counter; Rpc::ALL.len()],
    /// `rongcloud` session calls forwarded to the session's owner.
    pub forwarded_sessions: Counter,
}

impl AllocMetrics {
    /// Registers every series with the installed recorder (no-ops if there is none).
    pub fn new() -> AllocMetrics {
        let rpc = |r: Rpc| {
            RpcSeries {
            calls: Outcome::ALL.map(|o| {
                counter!("seqsvr_alloc_calls_total", "rpc" => r.label(), "outcome" => o.label())
            }),
            values: counter!("seqsvr_alloc_values_total", "rpc" => r.label()),
            duration: histogram!("seqsvr_alloc_request_duration_seconds", "rpc" => r.label()),
            waited: counter!("seqsvr_alloc_waited_calls_total", "rpc" => r.label()),
        }
        };
        describe();
        AllocMetrics {
            rpcs: Rpc::ALL.map(rpc),
            batch_uids: histogram!("seqsvr_alloc_batch_uids"),
            advances_committed: counter!("seqsvr_alloc_advances_total", "outcome" => "committed"),
            advances_refused: counter!("seqsvr_alloc_advances_total", "outcome" => "fenced"),
            advances_failed: counter!("seqsvr_alloc_advances_total", "outcome" => "failed"),
            advance_sections: histogram!("seqsvr_alloc_advance_sections"),
            advance_duration: histogram!("seqsvr_alloc_advance_duration_seconds"),
            sections_ready: gauge!("seqsvr_alloc_sections", "state" => "ready"),
            sections_loading: gauge!("seqsvr_alloc_sections", "state" => "loading"),
            sections_touched: gauge!("seqsvr_alloc_sections_touched"),
            cur_seq_bytes: gauge!("seqsvr_alloc_cur_seq_bytes"),
            offset_rebases: counter!("seqsvr_alloc_offset_rebases_total"),
            lease_remaining: gauge!("seqsvr_alloc_lease_remaining_seconds"),
            lease_valid: gauge!("seqsvr_alloc_lease_valid"),
            route_version: gauge!("seqsvr_alloc_route_version"),
            heartbeats_ok: counter!("seqsvr_alloc_heartbeats_total", "outcome" => "ok"),
            heartbeats_failed: counter!("seqsvr_alloc_heartbeats_total", "outcome" => "failed"),
            ids_issued: counter!("seqsvr_alloc_ids_issued_total"),
            ids_workers_leased: counter!("seqsvr_alloc_id_workers_leased_total"),
            ids_reservations: counter!("seqsvr_alloc_id_reservations_total"),
            ids_clock_back: counter!("seqsvr_alloc_id_clock_back_total"),
            ids_clock_waits: counter!("seqsvr_alloc_id_clock_waits_total"),
            forwarded: Rpc::ALL
                .map(|r| counter!("seqsvr_alloc_forwarded_total", "kind" => r.label())),
            forwarded_sessions: counter!("seqsvr_alloc_forwarded_total", "kind" => "session_ids"),
            budgets: Budget::ALL.map(|b| BudgetSeries {
                in_use: gauge!("seqsvr_alloc_budget_in_use", "budget" => b.label()),
                limit: gauge!("seqsvr_alloc_budget_limit", "budget" => b.label()),
                full: counter!("seqsvr_alloc_budget_full_total", "budget" => b.label()),
            }),
        }
    }

    /// The series of `budget`.
    pub fn budget(&self, budget: Budget) -> &BudgetSeries {
        let i = Budget::ALL.iter().position(|&b| b == budget).expect("every Budget is in ALL");
        &self.budgets[i]
    }

    /// Publishes the budgets' limits (once, at start).
    pub fn budget_limits(&self, tuning: &seqsvr_core::config::AllocTuning) {
        for (budget, limit) in [
            (Budget::WaitingCalls, tuning.max_waiting_calls),
            (Budget::WaitingIdCalls, tuning.max_waiting_id_calls),
            (Budget::Streams, tuning.max_streams),
            (Budget::StreamBytes, tuning.max_stream_bytes),
            (Budget::IdsInFlight, tuning.max_ids_in_flight),
        ] {
            self.budget(budget).limit.set(limit as f64);
        }
    }

    fn rpc(&self, rpc: Rpc) -> &RpcSeries {
        &self.rpcs[Rpc::ALL.iter().position(|&r| r == rpc).expect("every Rpc is in ALL")]
    }

    /// One finished call: its outcome, the values it handed out, how long it took, and whether
    /// it had to wait for a load or an advance.
    pub fn call(&self, rpc: Rpc, code: Code, values: usize, took: Duration, waited: bool) {
        let series = self.rpc(rpc);
        let outcome = Outcome::of(code);
        let i = Outcome::ALL.iter().position(|&o| o == outcome).expect("every Outcome is in ALL");
        series.calls[i].increment(1);
        series.values.increment(values as u64);
        series.duration.record(took.as_secs_f64());
        if waited {
            series.waited.increment(1);
        }
    }

    /// The number of uids in a `NextBatch` (a coalescing client's batch).
    /// A call of `rpc` (or some of its uids) went to the owner (`forward.rs`).
    pub fn forwarded(&self, rpc: Rpc) {
        self.forwarded[Rpc::ALL.iter().position(|&r| r == rpc).expect("every Rpc is in ALL")]
            .increment(1);
    }

    pub fn batch(&self, uids: usize) {
        self.batch_uids.record(uids as f64);
    }

    /// One `AdvanceMaxSeq` sent to the store: how many sections, how long, and how it ended.
    pub fn advance(&self, sections: usize, took: Duration, result: Result<(), Code>) {
        self.advance_sections.record(sections as f64);
        self.advance_duration.record(took.as_secs_f64());
        match result {
            Ok(()) => self.advances_committed.increment(1),
            Err(Code::FailedPrecondition) => self.advances_refused.increment(1),
            Err(_) => self.advances_failed.increment(1),
        }
    }
}

impl Default for AllocMetrics {
    fn default() -> Self {
        AllocMetrics::new()
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!("seqsvr_alloc_calls_total", "Public calls answered, by RPC and outcome.");
    describe_counter!("seqsvr_alloc_values_total", "Sequence values handed out, by RPC.");
    describe_counter!("seqsvr_alloc_ids_issued_total", "Globally unique ids issued by NextIds.");
    describe_counter!(
        "seqsvr_alloc_forwarded_total",
        "Calls forwarded to the AllocSvr that owns their uids (or session), by kind: next, \
         next_batch, next_stream (a batch), current, session_ids."
    );
    describe_counter!(
        "seqsvr_alloc_id_workers_leased_total",
        "Worker ids leased from the store (one per scheme per registration, more after a drop)."
    );
    describe_counter!(
        "seqsvr_alloc_id_reservations_total",
        "High-water marks of worker ids raised in the store (ReserveTime)."
    );
    describe_counter!(
        "seqsvr_alloc_id_clock_back_total",
        "Times the wall clock read lower than before while issuing ids (issued times never go back)."
    );
    describe_counter!(
        "seqsvr_alloc_id_clock_waits_total",
        "Times a NextIds call waited for the clock to reach the time already used."
    );
    describe_histogram!(
        "seqsvr_alloc_request_duration_seconds",
        Unit::Seconds,
        "Time from receiving a public call to answering it."
    );
    describe_counter!(
        "seqsvr_alloc_waited_calls_total",
        "Calls that waited for a section load, an advance or a lease before answering."
    );
    describe_histogram!("seqsvr_alloc_batch_uids", "Uids per NextBatch call (coalesced batches).");
    describe_counter!(
        "seqsvr_alloc_advances_total",
        "AdvanceMaxSeq calls to the store, by outcome (committed, fenced, failed)."
    );
    describe_histogram!("seqsvr_alloc_advance_sections", "Sections per AdvanceMaxSeq call.");
    describe_histogram!(
        "seqsvr_alloc_advance_duration_seconds",
        Unit::Seconds,
        "Time for the store to commit an AdvanceMaxSeq (or refuse it)."
    );
    describe_gauge!("seqsvr_alloc_sections", "Sections granted to this AllocSvr, by state.");
    describe_gauge!(
        "seqsvr_alloc_sections_touched",
        "Ready sections with a cur_seq array (a uid was served since loading)."
    );
    describe_gauge!(
        "seqsvr_alloc_cur_seq_bytes",
        Unit::Bytes,
        "Bytes allocated for cur_seq arrays (zeroed lazily: untouched pages cost address space)."
    );
    describe_counter!(
        "seqsvr_alloc_offset_rebases_total",
        "Sections rebased because a uid's 32-bit cur_seq offset would overflow: every uid of the \
         section jumps to its highest value served (a gap, never a value going back)."
    );
    describe_gauge!(
        "seqsvr_alloc_lease_remaining_seconds",
        Unit::Seconds,
        "Time left on the lease (0 when it has none); it serves only while positive."
    );
    describe_gauge!(
        "seqsvr_alloc_lease_valid",
        "1 while the AllocSvr holds a valid lease, else 0."
    );
    describe_gauge!("seqsvr_alloc_route_version", "Version of the newest route table seen.");
    describe_counter!("seqsvr_alloc_heartbeats_total", "Heartbeats to the store, by outcome.");
    describe_gauge!(
        "seqsvr_alloc_budget_in_use",
        "What a budget holds now (refreshed every 100 ms): waiting_calls (calls waiting), streams \
         (NextStream streams open), stream_bytes (bytes of NextStream batches read whose replies \
         the transport has not taken), ids_in_flight (ids held by NextIds calls)."
    );
    describe_gauge!("seqsvr_alloc_budget_limit", "Each budget's limit (alloc.max_*).");
    describe_counter!(
        "seqsvr_alloc_budget_full_total",
        "Times a budget was full: a call refused with RESOURCE_EXHAUSTED (waiting_calls, streams, \
         ids_in_flight) or a NextStream stream's reading held back (stream_bytes)."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_code_maps_to_an_outcome_label() {
        assert_eq!(Outcome::of(Code::Ok).label(), "ok");
        assert_eq!(Outcome::of(Code::FailedPrecondition).label(), "not_owner");
        assert_eq!(Outcome::of(Code::Unavailable).label(), "unavailable");
        assert_eq!(Outcome::of(Code::DeadlineExceeded).label(), "unavailable");
        assert_eq!(Outcome::of(Code::InvalidArgument).label(), "invalid");
        assert_eq!(Outcome::of(Code::ResourceExhausted).label(), "exhausted");
        assert_eq!(Outcome::of(Code::Internal).label(), "error");
    }

    #[test]
    fn without_a_recorder_every_handle_is_a_no_op() {
        let m = AllocMetrics::new();
        m.call(Rpc::NextBatch, Code::Ok, 64, Duration::from_micros(30), false);
        m.advance(3, Duration::from_millis(2), Err(Code::FailedPrecondition));
    }
}
