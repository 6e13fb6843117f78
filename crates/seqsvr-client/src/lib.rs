//! Clients of seqsvr's services.
//!
//! # Layout
//! - [`seq`]: the public client SDK (`SeqClient`): next / next_batch / current for any uid,
//!   routed by cached, self-refreshing route tables.
//! - [`store`]: a client of one set's StoreSvr group that finds the leader, follows
//!   `NOT_LEADER` redirects and retries retryable errors within the caller's deadline.
//! - [`retry`]: the one retry policy of both, and of the AllocSvr's loops: jittered exponential
//!   back-off, a redirect budget, what is retryable, never past the caller's deadline.
//! - [`tls`]: the process's client identity for mutual TLS; every channel above uses it.

pub mod retry;
pub mod seq;
pub mod store;
pub mod tls;
