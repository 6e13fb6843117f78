//! Client-side certificate rotation: a process whose identity was read from files picks up new
//! files (checked at most once per `RELOAD_CHECK`) without a restart, and keeps the old identity
//! while the new files do not load (a half-rotated pair). Its own process: the identity is
//! process-wide.

use rcgen::{CertificateParams, DnType, KeyPair};
use seqsvr_tls::{generation, process_tls, set_process_tls, ClientTls, RELOAD_CHECK};
use std::path::Path;
use std::time::{Duration, Instant};

/// A self-signed certificate (PEM) and its key for `cn`.
fn leaf(cn: &str) -> (String, String) {
    let mut params = CertificateParams::new(vec![cn.to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    let key = KeyPair::generate().unwrap();
    (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

/// Writes the way an operator should rotate: a temporary file renamed into place.
fn put(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// `generation()` until it differs from `from`, for at most `within`.
fn wait_generation_change(from: u64, within: Duration) -> Option<u64> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        let now = generation();
        if now != from {
            return Some(now);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn a_rotated_client_certificate_is_picked_up_and_a_broken_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let at = |f: &str| dir.path().join(f);
    let (ca, _) = leaf("some-ca");
    put(&at("ca.pem"), &ca);
    let (cert, key) = leaf("alloc-0-1");
    put(&at("me.pem"), &cert);
    put(&at("me.key"), &key);
    let read =
        || ClientTls::read("seqsvr", &at("me.pem"), &at("me.key"), &at("ca.pem"), &at("ca.pem"));
    set_process_tls(read().unwrap());
    let first = generation();
    assert_eq!(process_tls().unwrap().cert_pem, cert.as_bytes());

    // The operator puts a new pair in place, key first: the new key with the old certificate is
    // no pair, so nothing changes until the certificate follows.
    let (cert2, key2) = leaf("alloc-0-1");
    put(&at("me.key"), &key2);
    assert_eq!(wait_generation_change(first, RELOAD_CHECK * 3), None, "a half pair was taken");
    put(&at("me.pem"), &cert2);
    let second =
        wait_generation_change(first, RELOAD_CHECK * 5).expect("the rotation is picked up");
    let now = process_tls().unwrap();
    assert_eq!(
        (now.cert_pem.as_slice(), now.key_pem.as_slice()),
        (cert2.as_bytes(), key2.as_bytes())
    );

    // A certificate file that does not load: the identity in use stays, and so does the
    // generation (clients keep their channels).
    put(&at("me.pem"), "not a certificate");
    assert_eq!(wait_generation_change(second, RELOAD_CHECK * 3), None);
    assert_eq!(process_tls().unwrap().cert_pem, cert2.as_bytes());
}
