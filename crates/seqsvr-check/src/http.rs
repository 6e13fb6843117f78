//! An HTTP/JSON client of the AllocSvr's HTTP API (issue 31), as a `curl` would call it: one
//! connection ([`HttpConn`]) over mutual TLS or plaintext, speaking HTTP/1.1 or HTTP/2 as
//! chosen ([`HttpVersion`], offered by ALPN), requests sent one after another on it
//! (keep-alive). For the cluster tests, the AllocSvr's own tests and load tools.

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::Arc;

/// Which HTTP the connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpVersion {
    Http1,
    Http2,
}

/// How to reach the server: its address, and over TLS the client configuration and the name
/// its certificate must carry.
#[derive(Clone)]
pub struct HttpTarget {
    pub addr: String,
    pub tls: Option<(Arc<rustls::ClientConfig>, String)>,
}

impl HttpTarget {
    /// A plaintext server (`--insecure`).
    pub fn plaintext(addr: &str) -> HttpTarget {
        HttpTarget { addr: addr.to_string(), tls: None }
    }

    /// An AllocSvr over mutual TLS: trusting `ca_pem`, presenting `cert_pem`/`key_pem` (none:
    /// no client certificate), expecting `server_name` (an AllocSvr's is `alloc.<name>`).
    pub fn tls(
        addr: &str,
        ca_pem: &[u8],
        identity: Option<(&[u8], &[u8])>,
        server_name: &str,
    ) -> Result<HttpTarget, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| e.to_string())?;
                builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(HttpTarget { addr: addr.to_string(), tls: Some((Arc::new(config), server_name.into())) })
    }

    /// An AllocSvr over mutual TLS as the process identity `tls` (what
    /// `seqsvr_client::tls::ClientTls::from_files` read): its certificate, the store CA bundle
    /// that issues AllocSvrs' certificates, and their name.
    pub fn with_identity(
        addr: &str,
        tls: &seqsvr_client::tls::ClientTls,
    ) -> Result<HttpTarget, String> {
        let name = seqsvr_core::config::alloc_server_name(&tls.server_name);
        let identity = Some((tls.cert_pem.as_slice(), tls.key_pem.as_slice()));
        HttpTarget::tls(addr, &tls.store_ca_pem, identity, &name)
    }
}

/// An answer: its status, headers and body.
#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl HttpReply {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

enum Sender {
    H1(http1::SendRequest<http_body_util::Full<Bytes>>),
    H2(http2::SendRequest<http_body_util::Full<Bytes>>),
}

/// One open connection.
pub struct HttpConn {
    sender: Sender,
    /// The `Host`/`:authority` of requests.
    authority: String,
}

impl HttpConn {
    /// Connects to `target` and agrees on `version` (over TLS, offered alone by ALPN).
    pub async fn connect(target: &HttpTarget, version: HttpVersion) -> Result<HttpConn, String> {
        HttpConn::connect_with(target, version, None).await
    }

    /// [`HttpConn::connect`]; over HTTP/2 with windows (stream and connection) of
    /// `h2_window` bytes instead of hyper's megabytes: what the server may send before the
    /// client reads.
    pub async fn connect_with(
        target: &HttpTarget,
        version: HttpVersion,
        h2_window: Option<u32>,
    ) -> Result<HttpConn, String> {
        let tcp = tokio::net::TcpStream::connect(&target.addr).await.map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let authority = target.addr.clone();
        let sender = match &target.tls {
            None => handshake(TokioIo::new(tcp), version, h2_window).await?,
            Some((config, name)) => {
                let name = ServerName::try_from(name.clone()).map_err(|e| e.to_string())?;
                let mut config = (**config).clone();
                config.alpn_protocols = vec![match version {
                    HttpVersion::Http1 => b"http/1.1".to_vec(),
                    HttpVersion::Http2 => b"h2".to_vec(),
                }];
                let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS handshake: {e}"))?;
                handshake(TokioIo::new(stream), version, h2_window).await?
            }
        };
        Ok(HttpConn { sender, authority })
    }

    /// Sends `method path` with `headers` and `body`; the answer, or why none came.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<HttpReply, String> {
        let response = self.send_unread(method, path, headers, body).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| format!("body: {e}"))?.to_bytes();
        Ok(HttpReply { status: parts.status.as_u16(), headers: parts.headers, body })
    }

    /// [`HttpConn::send`], answered once the answer's headers arrived, its body not read yet
    /// (a client that reads slowly).
    pub async fn send_unread(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<http::Response<hyper::body::Incoming>, String> {
        let uri = match self.sender {
            // HTTP/2 takes the authority from the URI (`:authority`), HTTP/1.1 from `Host`.
            Sender::H1(_) => path.to_string(),
            Sender::H2(_) => format!("https://{}{path}", self.authority),
        };
        let mut request = http::Request::builder().method(method).uri(uri);
        if let Sender::H1(_) = self.sender {
            request = request.header(http::header::HOST, &self.authority);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request =
            request.body(http_body_util::Full::new(body.into())).map_err(|e| e.to_string())?;
        let response = match &mut self.sender {
            Sender::H1(s) => {
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(request).await
            }
            Sender::H2(s) => {
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(request).await
            }
        }
        .map_err(|e| format!("no answer: {e}"));
        response
    }

    /// Whether the connection is closed (by the server, or after an error): a request sent on
    /// it now would fail without being sent.
    pub fn is_closed(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    /// `GET path`.
    pub async fn get(&mut self, path: &str) -> Result<HttpReply, String> {
        self.send("GET", path, &[], Bytes::new()).await
    }

    /// `POST path` with `json` as an `application/json` body.
    pub async fn post_json(
        &mut self,
        path: &str,
        json: &serde_json::Value,
    ) -> Result<HttpReply, String> {
        let headers = [("content-type", "application/json")];
        self.send("POST", path, &headers, json.to_string()).await
    }
}

/// The HTTP handshake over `io`; the connection is driven by a task of its own.
async fn handshake<I>(
    io: TokioIo<I>,
    version: HttpVersion,
    h2_window: Option<u32>,
) -> Result<Sender, String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    match version {
        HttpVersion::Http1 => {
            let (sender, conn) = http1::handshake(io).await.map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Ok(Sender::H1(sender))
        }
        HttpVersion::Http2 => {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            if let Some(window) = h2_window {
                builder.initial_stream_window_size(window).initial_connection_window_size(window);
            }
            let (sender, conn) = builder.handshake(io).await.map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Ok(Sender::H2(sender))
        }
    }
}
