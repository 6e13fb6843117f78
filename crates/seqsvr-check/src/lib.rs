//! Proving the promise (invariant I1 of `DESIGN.md`) from the outside.
//!
//! # Layout
//! - [`history`]: operations with invoke/complete times and outcomes, JSON lines, and the
//!   checker (distinct values, real-time order per uid).
//! - [`cluster`]: the process harness (start, kill -9, SIGSTOP, restart, wipe a data dir, add
//!   store members, wait) shared with the cluster tests.
//! - [`proxy`]: fault-injecting TCP proxies for cutting single links.
//! - [`http`]: an HTTP/1.1 or HTTP/2 client of the AllocSvr's HTTP/JSON API (issue 31).
//! - [`observe`]: a process's `/metrics` and gRPC health, read as an operator's tools do.
//! - [`nemesis`]: seeded fault schedules and the runner behind `seqcheck nemesis`; its load's
//!   clients (SDK, plain gRPC and HTTP/JSON clients of one AllocSvr) in `nemesis/clients.rs`.
//! - [`load`]: `seqcheck load`: the nemesis's client load against any running cluster (a cluster
//!   file), with steps marked on stdin by an outside fault script (the container chaos test).
//! - [`ids`]: `IdService.NextIds` calls as JSON lines and the checker of the id guarantees
//!   (no id twice per scheme; one worker id's ids only grow in real time), issue 10.
//! - [`hostile`]: `seqcheck hostile`: one AllocSvr under hostile clients (streams that never
//!   read, the largest id counts, oversized and malformed messages, stalled handshakes, store
//!   registrations) while a good client runs: memory, liveness, the good client's errors (issue 30).
//! - [`conformance`]: `seqcheck conformance`: the Rust SDK's runner of the SDK conformance
//!   suite (`tests/conformance/`, driven by `scripts/conformance.sh` for every SDK).
//! - [`lost_disk`]: the lost-disk interleaving (`DESIGN.md` §8) behind `seqcheck lost-disk`.

pub mod cluster;
pub mod conformance;
pub mod history;
pub mod hostile;
pub mod http;
pub mod ids;
pub mod load;
pub mod lost_disk;
pub mod nemesis;
pub mod observe;
pub mod proxy;
