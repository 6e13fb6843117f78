//! Pure seqsvr logic, shared by every binary. It does no I/O and knows no gRPC/prost or Raft
//! types, so it can be tested exhaustively.
//!
//! # Layout
//! - [`idscheme`]: time-ordered unique id layouts (Snowflake … UUIDv7) and their generator.
//! - [`ids`]: newtypes for the numbers that must never be swapped (`SectionId`, `NodeId`, `SetId`).
//! - [`section`]: uid → section arithmetic and section ranges.
//! - [`alloc`]: the AllocSvr's in-memory `cur_seq`/`max_seq` table (the allocation hot path).
//! - [`arbiter`]: the store leader's lease arithmetic and section placement decisions.
//! - [`lease`]: the lease timing (`LeaseConfig`, shared by the store and the arbiter) and the
//!   AllocSvr's lease arithmetic on its own clock (end, renewal, validity).
//! - [`assign`]: the section → AllocSvr assignment (runs with owner, lease epoch, fence state).
//! - [`config`]: the cluster config (`cluster.toml`): sets, their uid ranges and members, tunables.
//! - [`store`]: the StoreSvr state machine: per-section `max_seq` (invariants I2, I4) and its
//!   command and snapshot encodings.
//! - [`teeth`]: test-only switches that break the promise on purpose (off by default).

pub mod alloc;
pub mod arbiter;
pub mod assign;
pub mod config;
pub mod decode;
pub mod ids;
pub mod idscheme;
pub mod lease;
pub mod raft_wire;
pub mod section;
pub mod store;
pub mod teeth;
