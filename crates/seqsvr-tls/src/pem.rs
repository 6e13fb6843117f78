//! PEM files: which files a process uses ([`TlsFiles`]), reading them, and parsing certificate
//! chains, CA bundles and private keys, with errors that name the file ([`TlsError`]).
//!
//! Parsing only: what a set of files is built into (a server configuration, a client identity)
//! is `accept.rs`'s and `connect.rs`'s business, and when they are read again is `reload.rs`'s.

use crate::Plane;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use seqsvr_core::config::TlsConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The files one process uses: its own certificate chain and key (its server identity, and its
/// client identity when it dials), the three CA bundles, and the name servers carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
    pub store_ca: PathBuf,
    pub peer_ca: PathBuf,
    pub server_name: String,
}

impl TlsFiles {
    /// The `[tls]` paths resolved against `cluster_dir` (the cluster file's directory), with the
    /// process's own `cert` and `key` (`--tls-cert`, `--tls-key`).
    pub fn resolve(tls: &TlsConfig, cluster_dir: &Path, cert: PathBuf, key: PathBuf) -> TlsFiles {
        let at = |p: &str| cluster_dir.join(p);
        TlsFiles {
            cert,
            key,
            client_ca: at(&tls.client_ca),
            store_ca: at(&tls.store_ca),
            peer_ca: at(&tls.peer_ca),
            server_name: tls.server_name.clone(),
        }
    }

    pub fn ca(&self, plane: Plane) -> &Path {
        match plane {
            Plane::Client => &self.client_ca,
            Plane::Store => &self.store_ca,
            Plane::Peer => &self.peer_ca,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {what}")]
    Pem { path: PathBuf, what: String },
    /// A certificate and a key that do not belong together (a rotation half done).
    #[error("{cert} and {key} are not a pair: {source}")]
    NotAPair { cert: PathBuf, key: PathBuf, source: rustls::Error },
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("TLS client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// The bytes of one file.
pub fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_path_buf(), source })
}

/// Every certificate of a PEM file (a chain or a CA bundle); at least one.
pub fn parse_certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem { path: path.to_path_buf(), what: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "no CERTIFICATE in the file".into(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn parse_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| TlsError::Pem { path: path.to_path_buf(), what: format!("private key: {e}") })
}

/// The one crypto provider of the workspace: rustls with ring.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Does `key` belong to the end-entity certificate of `chain`? (tonic would only find out at
/// the handshake: a certificate renamed into place before its key is a pair that does not load
/// yet.)
pub fn check_pair(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<(), rustls::Error> {
    rustls::sign::CertifiedKey::from_der(chain, key, &provider()).map(|_| ())
}

/// The trust anchors of a CA bundle.
pub fn roots(path: &Path, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in parse_certs(path, pem)? {
        store.add(cert).map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(store)
}
