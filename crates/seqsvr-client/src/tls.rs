//! The process's client transport: every channel of this crate dials as the process chose, once,
//! at start, before any channel is opened: mutual TLS with its identity ([`set_process_tls`] or
//! [`use_cluster_identity`]) or plaintext ([`use_plaintext`], for a cluster whose servers run
//! with `--insecure`). A process that chose neither opens no channel: every client of this
//! crate answers FAILED_PRECONDITION ([`NO_TRANSPORT`]) rather than fall back to plaintext. The
//! code is `seqsvr-tls`'s (`connect.rs`: the server-name rule, rotation of the identity's files
//! through its `reload.rs`); this module is the SDK's door to it and exports nothing of the
//! server side.

pub use seqsvr_tls::connect::{
    endpoint, endpoint_for, endpoint_with, generation, process_tls, process_transport,
    set_process_tls, use_cluster_identity, use_plaintext, ClientTls, IdentityError, NO_TRANSPORT,
};
pub use seqsvr_tls::{Plane, TlsError, RELOAD_CHECK};
