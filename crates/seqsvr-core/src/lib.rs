//! Pure seqsvr logic, shared by every binary. It does no I/O and knows no gRPC/prost or Raft
//! types, so it can be tested exhaustively.
//!
//! # Layout
//! - [`ids`]: newtypes for the numbers that must never be swapped (`SectionId`, `NodeId`, `SetId`).
//! - [`section`]: uid → section arithmetic and section ranges.
//! - [`config`]: the cluster config (`cluster.toml`): sets, their uid ranges and members, tunables.
//! - [`store`]: the StoreSvr state machine: per-section `max_seq` (invariants I2, I4) and its
//!   command and snapshot encodings.

pub mod config;
pub mod ids;
pub mod section;
pub mod store;
