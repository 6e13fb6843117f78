//! Reading a running process from outside, as an operator's tools do: its Prometheus
//! `/metrics` page and its `grpc.health.v1` status. Used by the cluster tests.

use anyhow::{bail, Context};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One sample of the Prometheus text format: `name{k="v",...} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Every sample of one scrape.
#[derive(Clone, Debug, Default)]
pub struct Samples(pub Vec<Sample>);

impl Samples {
    /// Parses the Prometheus text exposition format (comments and blank lines skipped).
    pub fn parse(text: &str) -> anyhow::Result<Samples> {
        let mut out = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (series, value) =
                line.rsplit_once(' ').with_context(|| format!("no value in {line:?}"))?;
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().with_context(|| format!("bad value in {line:?}"))?,
            };
            let (name, labels) = match series.split_once('{') {
                None => (series.to_string(), Vec::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').with_context(|| format!("in {line:?}"))?;
                    (name.to_string(), parse_labels(body).with_context(|| format!("in {line:?}"))?)
                }
            };
            out.push(Sample { name, labels, value });
        }
        Ok(Samples(out))
    }

    /// Whether any sample has this name.
    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|s| s.name == name)
    }

    /// The sum of the samples named `name` whose labels include every pair of `with`.
    pub fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| with.iter().all(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v)))
            .map(|s| s.value)
            .sum()
    }

    /// Every distinct metric name (histograms show as `_bucket`, `_sum`, `_count`).
    pub fn names(&self) -> std::collections::BTreeSet<&str> {
        self.0.iter().map(|s| s.name.as_str()).collect()
    }
}

fn parse_labels(body: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").context("label without =\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => bail!("dangling escape"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => bail!("unterminated label value"),
            }
        };
        labels.push((key.trim().to_string(), value));
        rest = after[end + 1..].trim_start_matches(',').trim();
    }
    Ok(labels)
}

/// `GET http://{addr}/metrics`, parsed. Bounded by `timeout`.
pub async fn scrape(addr: &str, timeout: Duration) -> anyhow::Result<Samples> {
    let get = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(timeout, get)
        .await
        .with_context(|| format!("scraping {addr} timed out"))??;
    let text = String::from_utf8(response).context("metrics are not UTF-8")?;
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header end")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("GET /metrics at {addr}: {}", head.lines().next().unwrap_or(""));
    }
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Samples::parse(&body)
}

fn dechunk(mut body: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("chunk size line")?;
        let size = usize::from_str_radix(size.trim(), 16).context("chunk size")?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).context("short chunk")?);
        body = rest.get(size + 2..).context("chunk end")?;
    }
}

/// A process's `grpc.health.v1` status for `service` ("" = the server as a whole): true when
/// SERVING. An error when it cannot be asked within `timeout`. `plane`: the server's role
/// (over TLS when this process has an identity: `seqsvr_client::tls::set_process_tls`).
pub async fn serving(
    addr: &str,
    plane: seqsvr_client::tls::Plane,
    service: &str,
    timeout: Duration,
) -> anyhow::Result<bool> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let ask = async {
        let channel =
            seqsvr_client::tls::endpoint(addr, plane)?.connect_timeout(timeout).connect().await?;
        let request = tonic_health::pb::HealthCheckRequest { service: service.to_string() };
        let response = HealthClient::new(channel).check(request).await?.into_inner();
        anyhow::Ok(response.status == ServingStatus::Serving as i32)
    };
    tokio::time::timeout(timeout, ask)
        .await
        .with_context(|| format!("health check of {addr} timed out"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_text_format() {
        let text = "# HELP x help\n# TYPE x counter\nx_total{rpc=\"next\",outcome=\"ok\"} 12\n\
                    x_total{rpc=\"current\",outcome=\"ok\"} 3\ny 1.5\n\
                    h_bucket{le=\"+Inf\",v=\"a\\\"b\"} 7\n";
        let s = Samples::parse(text).unwrap();
        assert_eq!(s.sum("x_total", &[("outcome", "ok")]), 15.0);
        assert_eq!(s.sum("x_total", &[("rpc", "next")]), 12.0);
        assert_eq!(s.sum("y", &[]), 1.5);
        assert_eq!(s.sum("h_bucket", &[("v", "a\"b")]), 7.0);
        assert!(s.has("y") && !s.has("z"));
        assert!(Samples::parse("broken").is_err());
    }

    #[test]
    fn dechunks() {
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(), "abcde");
    }
}
