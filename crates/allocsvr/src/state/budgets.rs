//! The budgets that bound what the public calls hold in memory (issue 30), beside
//! `alloc.max_waiting_calls` and `alloc.max_waiting_id_calls` ([`super::Shared::waiting_calls`],
//! [`super::Shared::waiting_id_calls`], taken by `rpc.rs::WaitSlot`) and `alloc.max_streams`
//! ([`super::Shared::stream_slots`]):
//!
//! - [`Budgets::ids`]: ids held by `NextIds` calls from their checks until the transport has
//!   taken their reply, one permit per id (`alloc.max_ids_in_flight`), taken before the reply
//!   is allocated (`rpc.rs::HeldUntilSent` holds them while the reply is sent);
//! - [`Budgets::stream_bytes`]: bytes of `NextStream` batches read from the transport whose
//!   replies it has not taken yet, and of `NextBatch` calls until their reply is taken
//!   (`alloc.max_stream_bytes`), each with the route table its reply carries to a client with
//!   an older one; each stream has a budget of its own on top (`alloc.max_bytes_per_stream`,
//!   made by `service.rs` per stream).
//!
//! What each holds is its limit minus its available permits; `observe.rs` publishes it as the
//! `seqsvr_alloc_budget_in_use` gauges.

use seqsvr_core::config::AllocTuning;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::sync::Semaphore;

pub struct Budgets {
    /// One permit per id in flight (`alloc.max_ids_in_flight`).
    pub ids: Arc<Semaphore>,
    pub max_ids: usize,
    /// The share of `ids` that calls of more than `ids::clock::CHUNK` ids may hold between
    /// them: half (a call bigger than the half takes all of it), so calls of at most a chunk
    /// always have the other half, however long big calls of a slow layout wait for the clock.
    pub big_ids: Arc<Semaphore>,
    pub max_big_ids: usize,
    /// One permit per byte of `NextStream` batches held (`alloc.max_stream_bytes`).
    pub stream_bytes: Arc<Semaphore>,
    pub max_stream_bytes: usize,
    /// Times a stream stopped reading because a stream budget was out (its own or the total).
    pub stream_reads_held: AtomicU64,
    /// Streams ended because their client took no reply for `alloc.request_timeout_ms`.
    pub streams_stalled: AtomicU64,
}

impl Budgets {
    pub fn new(tuning: &AllocTuning) -> Budgets {
        Budgets {
            ids: Arc::new(Semaphore::new(tuning.max_ids_in_flight)),
            max_ids: tuning.max_ids_in_flight,
            big_ids: Arc::new(Semaphore::new((tuning.max_ids_in_flight / 2).max(1))),
            max_big_ids: (tuning.max_ids_in_flight / 2).max(1),
            stream_bytes: Arc::new(Semaphore::new(tuning.max_stream_bytes)),
            max_stream_bytes: tuning.max_stream_bytes,
            stream_reads_held: AtomicU64::new(0),
            streams_stalled: AtomicU64::new(0),
        }
    }

    /// Ids held by `NextIds` calls now.
    pub fn ids_in_use(&self) -> usize {
        self.max_ids.saturating_sub(self.ids.available_permits())
    }

    /// Bytes held by `NextStream` batches now.
    pub fn stream_bytes_in_use(&self) -> usize {
        self.max_stream_bytes.saturating_sub(self.stream_bytes.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `AllocTuning::validate` bounds the semaphore budgets by `config::MAX_BUDGET`: it is
    /// tokio's most permits, and budgets that large start (no panic in `Semaphore::new`).
    #[test]
    fn the_largest_valid_budgets_start() {
        assert_eq!(seqsvr_core::config::MAX_BUDGET, Semaphore::MAX_PERMITS);
        let tuning = AllocTuning {
            max_stream_bytes: seqsvr_core::config::MAX_BUDGET,
            max_streams: seqsvr_core::config::MAX_BUDGET,
            ..AllocTuning::default()
        };
        tuning.validate().expect("valid");
        let budgets = Budgets::new(&tuning);
        assert_eq!(budgets.stream_bytes_in_use(), 0);
        let _streams = Semaphore::new(tuning.max_streams);
    }
}
