//! Clients of seqsvr's services.
//!
//! # Layout
//! - [`ids`]: globally unique ids from the AllocSvrs' `IdService` (`IdClient`, round-robin
//!   over every AllocSvr known), a client-side cache refilled in the background (`CachedIds`),
//!   and decoding without a server (`decode`).
//! - [`seq`]: the public client SDK (`SeqClient`): next / next_batch / current for any uid,
//!   routed by cached, self-refreshing route tables.
//! - [`store`]: a client of one set's StoreSvr group that finds the leader, follows
//!   `NOT_LEADER` redirects and retries retryable errors within the caller's deadline.
//! - [`retry`]: the one retry policy of both, and of the AllocSvr's loops: jittered exponential
//!   back-off, a redirect budget, what is retryable, never past the caller's deadline.
//! - [`tls`]: the process's client identity for mutual TLS; every channel above uses it.
//! - `fake_alloc` (tests only): the one fake AllocSvr of the SDK's tests (`FakeAlloc`: a test
//!   writes only the answers it needs; `serve` puts it on a loopback port).

#[cfg(test)]
mod fake_alloc;
pub mod ids;
pub mod retry;
pub mod seq;
pub mod store;
pub mod tls;
