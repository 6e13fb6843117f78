//! Who is at the other end: the identity a verified client certificate carries
//! ([`PeerIdentity`], read at the handshake by `accept.rs`) and the authorised caller a handler
//! sees ([`Caller`], put in the request by `layer.rs` once `authz.rs` allowed the call).

use crate::Plane;
use seqsvr_core::config::Role;
use seqsvr_core::ids::{NodeId, SetId};
use std::net::SocketAddr;

/// Who is at the other end of a connection, as its verified certificate says. Tonic puts it in
/// the extensions of every request of the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    pub remote_addr: Option<SocketAddr>,
    /// The certificate's subject common name.
    pub cn: Option<String>,
    /// Its DNS subject alternative names.
    pub dns_sans: Vec<String>,
    /// The planes whose CA bundle the certificate chains to (at handshake time).
    pub planes: Vec<Plane>,
}

impl PeerIdentity {
    /// All names, CN first, for messages.
    pub fn names(&self) -> Vec<String> {
        self.cn.iter().cloned().chain(self.dns_sans.iter().cloned()).collect()
    }
}

/// The CN and DNS SANs of a DER certificate.
pub fn certificate_names(der: &[u8]) -> Result<(Option<String>, Vec<String>), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let cn =
        cert.subject().iter_common_name().next().and_then(|a| a.as_str().ok()).map(str::to_string);
    let mut sans = Vec::new();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                sans.push(dns.to_string());
            }
        }
    }
    Ok((cn, sans))
}

/// The authorised caller of a request, for handlers (put in the request extensions by
/// [`crate::AuthLayer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The name `[tls.identities]` knows the certificate by.
    pub name: String,
    pub role: Role,
    pub set: Option<SetId>,
    /// The member a `peer` is (`[tls.identities]`'s `node`): the only one it may speak for.
    pub node: Option<NodeId>,
}
