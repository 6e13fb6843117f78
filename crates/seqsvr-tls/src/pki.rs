//! A development PKI (feature `pki`, for `seqctl certs init` and tests): CAs, and certificates
//! whose names are the ones `connect.rs` checks ([`crate::server_names_of`]).
//!
//! A server's certificate carries its CN, the names of its role, `localhost` and `127.0.0.1`,
//! and may serve and dial (extended key usages server and client auth); a certificate with no
//! server name (admin, applications) can only dial. Valid from a day back (a host whose clock
//! is behind, or set back by hours as the nemesis does, still accepts a fresh certificate).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Why a certificate could not be made.
pub use rcgen::Error;

/// A CA: what issues, and its certificate and key (PEM).
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
    pub key: String,
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(i64::from(days));
}

/// A self-signed CA named `cn` that issues end entities only, valid for `days`.
pub fn make_ca(cn: &str, days: u32) -> Result<Ca, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, cn);
    params.distinguished_name.push(DnType::OrganizationName, "seqsvr dev");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut params, days);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(Ca { pem: cert.pem(), key: key.serialize_pem(), issuer: Issuer::new(params, key) })
}

/// A certificate for `cn` issued by `ca`, serving under `server_names` (none: a client only),
/// valid for `days`: its certificate and key (PEM). The chain a process presents is this
/// certificate alone (the CA is in the other side's bundle).
pub fn issue(
    ca: &Ca,
    cn: &str,
    server_names: &[String],
    days: u32,
) -> Result<(String, String), Error> {
    let mut names = vec![cn.to_string()];
    if !server_names.is_empty() {
        names.extend(server_names.iter().cloned());
        names.extend(["localhost".into(), "127.0.0.1".into()]);
    }
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = if !server_names.is_empty() {
        vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    validity(&mut params, days);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca.issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}
