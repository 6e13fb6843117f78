//! The flags both server binaries take the same way: [`ServerArgs`], flattened into
//! `allocsvr`'s and `storesvr`'s own `Args` (same names, environment variables, defaults and
//! help in both).

use std::path::PathBuf;

/// The flags every server shares. Flatten it first in a binary's `Args`: `--config` then shows
/// first, and the rest (their `display_order` 900 and up) after the binary's own flags, before
/// `--help`. A binary states what its certificate is for with
/// `#[command(mut_arg("tls_cert", |a| a.help("…")))]`.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The cluster config (TOML) shared by every process of the cluster.
    #[arg(long, env = "SEQSVR_CONFIG")]
    pub config: PathBuf,
    /// Where to serve Prometheus metrics (`GET /metrics`, plaintext, ungated): `auto` (the
    /// loopback address at the listen port + 10000), `off`, or HOST:PORT (a private interface
    /// only the scraper reaches).
    #[arg(long, env = "SEQSVR_METRICS_ADDR", default_value = "auto", display_order = 900)]
    pub metrics_addr: String,
    /// This server's certificate chain (PEM), required when the cluster file has `[tls]`.
    #[arg(long, env = "SEQSVR_TLS_CERT", display_order = 901)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "SEQSVR_TLS_KEY", display_order = 902)]
    pub tls_key: Option<PathBuf>,
    /// Serve plaintext, with no role checks, when the cluster file has no `[tls]` section:
    /// anyone who reaches the port can do anything. Without it (and without `[tls]`) the
    /// server refuses to start. Logged at start and reported as `seqsvr_insecure` 1.
    #[arg(long, env = "SEQSVR_INSECURE", display_order = 903)]
    pub insecure: bool,
    /// Log format: `text` or `json`. Filter with RUST_LOG (default `info`).
    #[arg(long, env = "SEQSVR_LOG_FORMAT", default_value = "text", display_order = 904)]
    pub log_format: String,
}

impl ServerArgs {
    /// The cluster file `--config` names, read and parsed.
    pub fn read_cluster(&self) -> anyhow::Result<seqsvr_core::config::ClusterConfig> {
        use anyhow::Context as _;
        let text = std::fs::read_to_string(&self.config)
            .with_context(|| format!("cannot read cluster config {}", self.config.display()))?;
        seqsvr_core::config::ClusterConfig::from_toml_str(&text)
            .with_context(|| format!("in {}", self.config.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A server binary.
    #[derive(Debug, Parser)]
    #[command(mut_arg("tls_cert", |a| a.help("Mine.")))]
    struct Bin {
        #[command(flatten)]
        server: ServerArgs,
        /// A flag of the binary's own.
        #[arg(long)]
        own: Option<u64>,
    }

    /// `--config` first, the binary's own flags, then the rest of the shared ones; a binary's
    /// own help for `--tls-cert`.
    #[test]
    fn shared_flags_keep_their_place_and_a_binary_names_its_certificate() {
        let help = <Bin as clap::CommandFactory>::command().render_help().to_string();
        let help = &help[help.find("Options:").expect("an options list")..];
        let at = |flag: &str| help.find(flag).unwrap_or_else(|| panic!("{flag} in {help}"));
        assert!(at("--config") < at("--own") && at("--own") < at("--metrics-addr"), "{help}");
        assert!(at("--log-format") < at("--help"), "{help}");
        assert!(help.contains("Mine"), "{help}");
        let bin = Bin::try_parse_from(["bin", "--config", "c.toml", "--insecure"]).unwrap();
        assert_eq!(
            (bin.server.metrics_addr.as_str(), bin.server.log_format.as_str()),
            ("auto", "text")
        );
        assert!(bin.server.insecure && bin.server.tls_cert.is_none());
    }
}
