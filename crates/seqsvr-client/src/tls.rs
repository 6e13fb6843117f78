//! The process's client identity for mutual TLS: every channel of this crate dials with it
//! ([`set_process_tls`] or [`use_cluster_identity`] at start, before any channel is opened;
//! without one, channels are plaintext). The code is `seqsvr-tls`'s (`connect.rs`: the
//! server-name rule, rotation of the identity's files through its `reload.rs`); this module is
//! the SDK's door to it and exports nothing of the server side.

pub use seqsvr_tls::connect::{
    endpoint, endpoint_with, generation, process_tls, set_process_tls, use_cluster_identity,
    ClientTls, IdentityError,
};
pub use seqsvr_tls::{Plane, TlsError, RELOAD_CHECK};
