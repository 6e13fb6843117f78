//! The `seqsvr-http` target: `POST /v1/seq/next` with `{"uids": ["<uid>"]}` to ONE AllocSvr,
//! as a `curl`-style HTTP/JSON client would call it (issue 31), over mutual TLS with the
//! process's application identity (the cluster file's `[tls]`, as the `seqsvr` targets use it),
//! keep-alive. Two ways, each a client at its best (`--http`):
//! - `h1`: HTTP/1.1, one connection per caller, requests one after another on it;
//! - `h2`: HTTP/2, `--http-conns` connections (default 1) shared by every caller, their
//!   requests multiplexed as streams.
//!
//! Every answer is read and checked: status 200, one value, for the uid asked, whose `seq` is a
//! decimal string. The connection code follows `seqsvr-check/src/http.rs` (hyper's client
//! connections over tokio-rustls, the protocol offered alone by ALPN), trimmed to the one
//! request this target sends: the URI and headers are made once, the body is one `format!`.

use anyhow::Context;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, HOST};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::Arc;

/// The path of the call.
const NEXT_PATH: &str = "/v1/seq/next";

/// Which HTTP the target speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HttpMode {
    /// HTTP/1.1, one keep-alive connection per caller.
    H1,
    /// HTTP/2, `--http-conns` connections shared by all callers.
    H2,
}

/// Where and how to connect: the address, the TLS client configuration (the process's
/// identity, trusting the CA that issues AllocSvrs' certificates, ALPN set to the one protocol)
/// and the name the AllocSvr's certificate carries.
pub struct HttpTarget {
    addr: String,
    mode: HttpMode,
    tls: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    /// h2: the shared connections (caller c takes `c % len`). h1: empty, each caller connects.
    shared: Vec<http2::SendRequest<Full<Bytes>>>,
    /// The request's URI: the path for HTTP/1.1 (`Host` names the server), the full URI for
    /// HTTP/2 (`:authority` comes from it).
    uri: http::Uri,
    host: HeaderValue,
}

/// One caller's way to send.
pub enum Caller {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// The answer's shape: `{"values": [{"uid": "42", "seq": "13"}]}`.
#[derive(serde::Deserialize)]
struct NextReply<'a> {
    #[serde(borrow)]
    values: Vec<UidSeq<'a>>,
}

#[derive(serde::Deserialize)]
struct UidSeq<'a> {
    uid: &'a str,
    seq: &'a str,
}

/// The TLS client configuration of `tls` (the process's identity) for `mode`.
fn client_config(
    tls: &seqsvr_client::tls::ClientTls,
    mode: HttpMode,
) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&tls.store_ca_pem) {
        roots.add(cert.context("the CA bundle")?).context("the CA bundle")?;
    }
    let chain = CertificateDer::pem_slice_iter(&tls.cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .context("the client certificate")?;
    let key = PrivateKeyDer::from_pem_slice(&tls.key_pem).context("the client key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .context("the client identity")?;
    config.alpn_protocols = vec![match mode {
        HttpMode::H1 => b"http/1.1".to_vec(),
        HttpMode::H2 => b"h2".to_vec(),
    }];
    Ok(config)
}

impl HttpTarget {
    /// Connects the shared HTTP/2 connections (`conns` of them), or checks that one HTTP/1.1
    /// connection can be made; as the process's identity (`use_cluster_identity` first).
    pub async fn connect(addr: &str, mode: HttpMode, conns: usize) -> anyhow::Result<HttpTarget> {
        anyhow::ensure!(conns > 0, "--http-conns must be at least 1");
        let tls = seqsvr_client::tls::process_tls()
            .context("the HTTP target needs the cluster file's [tls] and an identity")?;
        let name = seqsvr_core::config::alloc_server_name(&tls.server_name);
        let server_name = ServerName::try_from(name.clone())
            .with_context(|| format!("{name:?} is not a server name"))?;
        let uri = match mode {
            HttpMode::H1 => http::Uri::from_static(NEXT_PATH),
            HttpMode::H2 => format!("https://{addr}{NEXT_PATH}").parse()?,
        };
        let mut target = HttpTarget {
            addr: addr.to_string(),
            mode,
            tls: Arc::new(client_config(&tls, mode)?),
            server_name,
            shared: Vec::new(),
            uri,
            host: HeaderValue::from_str(addr).context("--url is not a host:port")?,
        };
        match mode {
            HttpMode::H2 => {
                for _ in 0..conns {
                    let sender = target.connect_h2().await?;
                    target.shared.push(sender);
                }
            }
            HttpMode::H1 => drop(target.connect_h1().await?),
        }
        Ok(target)
    }

    /// A new TLS connection (TCP with no Nagle delay, the TLS handshake).
    async fn tls_io(
        &self,
    ) -> anyhow::Result<TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>> {
        let tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        tcp.set_nodelay(true)?;
        let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .with_context(|| format!("TLS handshake with {}", self.addr))?;
        Ok(TokioIo::new(stream))
    }

    /// A new HTTP/1.1 connection; hyper's connection task runs on its own.
    async fn connect_h1(&self) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
        let (sender, conn) = http1::handshake(self.tls_io().await?).await?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// A new HTTP/2 connection; hyper's connection task runs on its own.
    async fn connect_h2(&self) -> anyhow::Result<http2::SendRequest<Full<Bytes>>> {
        let io = self.tls_io().await?;
        let (sender, conn) = http2::Builder::new(TokioExecutor::new()).handshake(io).await?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// Caller `client`'s way to send: a connection of its own (h1), or a shared one (h2).
    pub async fn caller(&self, client: usize) -> anyhow::Result<Caller> {
        match self.mode {
            HttpMode::H1 => Ok(Caller::H1(self.connect_h1().await?)),
            HttpMode::H2 => Ok(Caller::H2(self.shared[client % self.shared.len()].clone())),
        }
    }

    /// `POST /v1/seq/next` `{"uids": ["<uid>"]}` on `caller`; the value, checked.
    pub async fn next(&self, caller: &mut Caller, uid: u64) -> anyhow::Result<u64> {
        let mut request = http::Request::builder()
            .method(http::Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if self.mode == HttpMode::H1 {
            request = request.header(HOST, self.host.clone());
        }
        let body = Full::new(Bytes::from(format!("{{\"uids\":[\"{uid}\"]}}")));
        let request = request.body(body)?;
        let response = match caller {
            Caller::H1(s) => {
                s.ready().await?;
                s.send_request(request).await?
            }
            Caller::H2(s) => {
                s.ready().await?;
                s.send_request(request).await?
            }
        };
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        anyhow::ensure!(
            status == http::StatusCode::OK,
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        );
        seq_of(&body, uid)
    }
}

/// The value of a `POST /v1/seq/next` answer for one `uid`: exactly one value, for that uid, a
/// decimal string.
pub fn seq_of(body: &[u8], uid: u64) -> anyhow::Result<u64> {
    let reply: NextReply = serde_json::from_slice(body)
        .with_context(|| format!("not a /v1/seq/next answer: {}", String::from_utf8_lossy(body)))?;
    let [value] = reply.values.as_slice() else {
        anyhow::bail!("{} values for one uid", reply.values.len());
    };
    anyhow::ensure!(
        value.uid.parse::<u64>().ok() == Some(uid),
        "the answer is for uid {}",
        value.uid
    );
    value.seq.parse::<u64>().with_context(|| format!("seq {:?} is not a decimal u64", value.seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked() {
        assert_eq!(seq_of(br#"{"values": [{"uid": "42", "seq": "13"}]}"#, 42).unwrap(), 13);
        let max = br#"{"values":[{"uid":"7","seq":"18446744073709551615"}]}"#;
        assert_eq!(seq_of(max, 7).unwrap(), u64::MAX);
        for (body, why) in [
            (&br#"{"values": [{"uid": "43", "seq": "13"}]}"#[..], "another uid"),
            (br#"{"values": [{"uid": "42", "seq": 13}]}"#, "a number, not a string"),
            (br#"{"values": [{"uid": "42", "seq": "-1"}]}"#, "negative"),
            (br#"{"values": []}"#, "no value"),
            (br#"{"values": [{"uid": "42", "seq": "1"}, {"uid": "42", "seq": "2"}]}"#, "two"),
            (br#"{"code": "UNAVAILABLE", "message": "m"}"#, "an error body"),
            (b"", "empty"),
        ] {
            assert!(seq_of(body, 42).is_err(), "{why}");
        }
    }
}
