//! The budgets that bound what the public calls hold in memory (issue 30), beside
//! `alloc.max_waiting_calls` ([`super::Shared::waiting_calls`], taken by `rpc.rs::WaitSlot`)
//! and `alloc.max_streams` ([`super::Shared::stream_slots`]):
//!
//! - [`Budgets::ids`]: ids held by `NextIds` calls from their checks to their answer, one
//!   permit per id (`alloc.max_ids_in_flight`), taken before the reply is allocated;
//! - [`Budgets::stream_bytes`]: bytes of `NextStream` batches read from the transport whose
//!   replies it has not taken yet (`alloc.max_stream_bytes`); each stream has a budget of its
//!   own on top (`alloc.max_bytes_per_stream`, made by `service.rs` per stream).
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
    /// One permit per byte of `NextStream` batches held (`alloc.max_stream_bytes`).
    pub stream_bytes: Arc<Semaphore>,
    pub max_stream_bytes: usize,
    /// Times a stream stopped reading because a stream budget was out (its own or the total).
    pub stream_reads_held: AtomicU64,
}

impl Budgets {
    pub fn new(tuning: &AllocTuning) -> Budgets {
        Budgets {
            ids: Arc::new(Semaphore::new(tuning.max_ids_in_flight)),
            max_ids: tuning.max_ids_in_flight,
            stream_bytes: Arc::new(Semaphore::new(tuning.max_stream_bytes)),
            max_stream_bytes: tuning.max_stream_bytes,
            stream_reads_held: AtomicU64::new(0),
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
