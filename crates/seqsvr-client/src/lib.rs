//! Clients of seqsvr's services.
//!
//! # Layout
//! - [`store`]: a client of one set's StoreSvr group that finds the leader, follows
//!   `NOT_LEADER` redirects and retries retryable errors within the caller's deadline.

pub mod store;
