//! Mutual TLS for seqsvr, below both servers and the SDK: the three trust planes, PEM files and
//! their rotation, server accept, client connect, and the one place that decides who may call
//! what.
//!
//! Three planes ([`Plane`]), each with its own CA bundle: client (`client_ca`: clients and
//! admins → AllocSvr), store (`store_ca`: AllocSvrs and admins → StoreSvr) and peer (`peer_ca`:
//! StoreSvr ↔ StoreSvr). A server ([`ServerKind`]) requires a client certificate verified
//! against the union of the bundles of the planes it serves, then records which planes' bundles
//! it chains to, its CN and DNS SANs ([`PeerIdentity`], in every request's extensions);
//! [`AuthLayer`] checks the role of every call against the table of `authz.rs`. Clients check
//! the server's certificate for the name of the role they dial ([`server_name_for`]).
//! Identities and roles come from the cluster file's `[tls]` ([`TlsConfig`]); changing them
//! needs a restart (the cluster file is read once).
//!
//! # Layout
//!
//! - `pem.rs`: which files a process uses ([`TlsFiles`]), reading and parsing PEM certificate
//!   chains, CA bundles and keys; [`TlsError`].
//! - `reload.rs`: the one rotation mechanism ([`Reloading`]): a value built from files, rebuilt
//!   when their contents change (looked at once per [`RELOAD_CHECK`] at most), the old one kept
//!   while new files do not load. Server configurations, members' peer configurations and the
//!   process's client identity all rotate through it.
//! - `identity.rs`: who is at the other end ([`PeerIdentity`], [`certificate_names`]) and the
//!   authorised caller handlers see ([`Caller`]).
//! - `authz.rs`: **the role → RPC table** ([`need_for`]) and the decision for one call
//!   ([`authorize`], [`require_admin`], [`alloc_identity`], [`require_own_node`]). Adding an RPC
//!   means a row there.
//! - `http_error.rs`: errors as an HTTP/JSON client sees them ([`http_error::json_error`]):
//!   the status of each gRPC code and the one JSON error body (the AllocSvr's HTTP API and the
//!   layer's refusals of its requests).
//! - `layer.rs`: the tower layer in front of every service ([`AuthLayer`], [`auth_layer`]):
//!   refusals and the audit lines ([`AUDIT_TARGET`]).
//! - `gate.rs`: admission of accepted connections ([`AcceptGate`], [`AcceptLimits`]): open
//!   connections per remote IP and TLS handshakes in progress (in all and per remote IP), all
//!   bounded.
//! - `accept.rs`: server accept ([`ServerTls`], [`incoming`], [`TlsConn`]), serving a router
//!   over it or plaintext with `--insecure` ([`plain_incoming`], [`ServeExt`], [`TlsSetup`]).
//! - `connect.rs`: client connect: the server-name rule ([`server_name_for`],
//!   [`server_names_of`]), the process's client identity ([`ClientTls`], [`set_process_tls`],
//!   [`generation`], [`endpoint`]), a member's configuration for its peers
//!   ([`ReloadingClientTls`], [`client_tls_config`]).
//! - `pki.rs` (feature `pki`): a development PKI (`seqctl certs init`).

pub mod accept;
pub mod authz;
pub mod connect;
pub mod gate;
pub mod http_error;
pub mod identity;
pub mod layer;
pub mod pem;
#[cfg(feature = "pki")]
pub mod pki;
pub mod reload;

pub use accept::{
    incoming, incoming_gated, plain_incoming, PlainConn, ServeExt, ServerTls, TlsConn, TlsSetup,
    CLIENT_HELLO_TIMEOUT, HANDSHAKE_TIMEOUT, TCP_KEEPALIVE,
};
pub use authz::{
    alloc_identity, authorize, need_for, require_admin, require_own_node, Grant, Need,
};
pub use connect::{
    client_tls_config, endpoint, endpoint_for, endpoint_with, endpoint_with_config, generation,
    process_tls, process_transport, server_ca_plane, server_name_for, server_names_of,
    set_process_tls, use_cluster_identity, use_plaintext, ClientTls, IdentityError,
    ReloadingClientTls, NO_TRANSPORT,
};
pub use gate::{AcceptGate, AcceptLimits, HandshakeSlot, Refusal};
pub use identity::{certificate_names, Caller, PeerIdentity};
pub use layer::{auth_layer, Auth, AuthLayer};
pub use pem::{parse_certs, parse_key, TlsError, TlsFiles};
pub use reload::{Reloading, RELOAD_CHECK};
pub use seqsvr_core::config::TlsConfig;

use seqsvr_core::ids::SetId;

/// Where the audit lines go (`RUST_LOG=seqsvr::audit=info` keeps only them).
pub const AUDIT_TARGET: &str = "seqsvr::audit";

/// One of the three trust planes, each with its own CA bundle. The one `Plane` of the
/// workspace: servers serve planes, clients dial them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Plane {
    /// Clients and admins → AllocSvr (`SeqService`): `client_ca`.
    Client,
    /// AllocSvrs and admins → StoreSvr (`StoreService`, `StoreAdmin`): `store_ca`.
    Store,
    /// StoreSvr ↔ StoreSvr (`RaftTransport`): `peer_ca`.
    Peer,
}

impl Plane {
    pub fn ca_key(self) -> &'static str {
        match self {
            Plane::Client => "client_ca",
            Plane::Store => "store_ca",
            Plane::Peer => "peer_ca",
        }
    }
}

/// Which server is serving: decides the planes it trusts and the set its peers must belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// Serves `SeqService` on the client plane.
    AllocSvr,
    /// Serves `StoreService` and `StoreAdmin` on the store plane, `RaftTransport` on the peer
    /// plane to the members of `set`.
    StoreSvr { set: SetId },
}

impl ServerKind {
    pub fn planes(self) -> &'static [Plane] {
        match self {
            // The store plane for AllocSvrs forwarding calls (`authz.rs`).
            ServerKind::AllocSvr => &[Plane::Client, Plane::Store],
            ServerKind::StoreSvr { .. } => &[Plane::Store, Plane::Peer],
        }
    }
}
