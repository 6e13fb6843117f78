//! Cluster tests: they start real seqsvr processes on 127.0.0.1 through the harness in
//! `seqsvr-check` (shared with the nemesis runner) and check invariants from outside.

pub use seqsvr_check::cluster::*;
pub use seqsvr_check::history;
