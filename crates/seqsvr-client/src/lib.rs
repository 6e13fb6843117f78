//! Clients of seqsvr's services.
//!
//! # Layout
//! - [`seq`]: the public client SDK (`SeqClient`): next / next_batch / current for any uid,
//!   routed by cached, self-refreshing route tables.
//! - [`store`]: a client of one set's StoreSvr group that finds the leader, follows
//!   `NOT_LEADER` redirects and retries retryable errors within the caller's deadline.

pub mod seq;
pub mod store;
