//! The Rust SDK's runner of the SDK conformance suite: `seqcheck conformance static|load`
//! executes `tests/conformance/cases.json` through `seqsvr-client`'s public API as the
//! protocol in `tests/conformance/README.md` says (the same command line, `results.jsonl` and
//! history files as the Go, Java and Python runners). `scripts/conformance.sh` drives it.
//!
//! The SDK's TLS identity is one per process, so each `refused_connection` case runs in a
//! child process (`seqcheck conformance refused`) with the identity the case names.

use crate::history::{Operation, Outcome};
use anyhow::Context;
use seqsvr_client::ids::{decode, layout_of, DecodedView, IdClient, Session, SessionId};
use seqsvr_client::seq::SeqClient;
use seqsvr_core::config::{ClusterConfig, IdSchemeConfig};
use seqsvr_tls::http_error::code_name;
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tonic::{Code, Status};

/// A call's deadline (the SDK retries within it).
const CALL: Duration = Duration::from_secs(10);
/// How long a refused connection may take to be refused.
const REFUSAL: Duration = Duration::from_secs(3);

/// The command line shared by both modes (`tests/conformance/README.md`).
#[derive(Clone, Debug, clap::Args)]
pub struct RunnerArgs {
    #[arg(long)]
    pub cases: PathBuf,
    /// The cluster file every server reads.
    #[arg(long)]
    pub cluster: PathBuf,
    /// The application's certificate and key.
    #[arg(long)]
    pub cert: PathBuf,
    #[arg(long)]
    pub key: PathBuf,
    /// A certificate of a CA the cluster does not know (static mode).
    #[arg(long)]
    pub foreign_cert: Option<PathBuf>,
    #[arg(long)]
    pub foreign_key: Option<PathBuf>,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, Deserialize)]
struct CasesFile {
    version: u32,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    #[serde(default)]
    phase: Option<String>,
    #[serde(flatten)]
    kind: Kind,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Kind {
    ConcurrentNext { callers: u32, calls_per_caller: u32, uids: Vec<u64> },
    BatchOrder { uids: Vec<u64> },
    CurrentAfterNext { uids: Vec<u64> },
    Error { call: Call, code: String },
    RefusedConnection { certificate: String, server_name_prefix: Option<String> },
    DecodeVectors { file: String },
    IdsDecode { count: u32, session: SessionSpec },
    FaultLoad { callers: u32, uids: Vec<u64>, batch_every: u32 },
}

#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Call {
    Next { uid: u64 },
    NextBatch { uids: Vec<u64> },
    NextIds { scheme: String, count: u32 },
}

#[derive(Debug, Deserialize)]
struct SessionSpec {
    #[serde(rename = "type")]
    session_type: u32,
    id: String,
}

/// The connected SDK and what the runner needs of the cluster file.
struct Runner {
    seq: SeqClient,
    ids: IdClient,
    config: ClusterConfig,
    cases_dir: PathBuf,
    out: PathBuf,
    args: RunnerArgs,
}

fn read_cases(path: &Path) -> anyhow::Result<CasesFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file: CasesFile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a cases file", path.display()))?;
    anyhow::ensure!(
        file.version == 1,
        "{}: version {} (this runner reads 1)",
        path.display(),
        file.version
    );
    Ok(file)
}

fn read_cluster(path: &Path) -> anyhow::Result<ClusterConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    ClusterConfig::from_toml_str(&text).map_err(|e| anyhow::anyhow!("in {}: {e}", path.display()))
}

async fn connect(args: &RunnerArgs) -> anyhow::Result<Runner> {
    let config = read_cluster(&args.cluster)?;
    seqsvr_client::tls::use_cluster_identity(
        config.tls.as_ref(),
        &args.cluster,
        Some(&args.cert),
        Some(&args.key),
    )?;
    let seeds: Vec<String> = config.sets.iter().flat_map(|s| s.allocs.clone()).collect();
    let seq =
        SeqClient::connect(&seeds, CALL).await.map_err(|s| anyhow::anyhow!("connect: {s}"))?;
    let ids = IdClient::from_config(&config).map_err(|s| anyhow::anyhow!("id client: {s}"))?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot make {}", args.out.display()))?;
    let cases_dir = args.cases.parent().unwrap_or(Path::new(".")).to_path_buf();
    Ok(Runner { seq, ids, config, cases_dir, out: args.out.clone(), args: args.clone() })
}

/// `static`: every case without `"phase": "load"`; Ok(true) when every one passed.
pub async fn run_static(args: RunnerArgs) -> anyhow::Result<bool> {
    let cases = read_cases(&args.cases)?;
    let runner = Arc::new(connect(&args).await?);
    let mut results = std::fs::File::create(runner.out.join("results.jsonl"))?;
    let mut all = true;
    for case in cases.cases.iter().filter(|c| c.phase.as_deref() != Some("load")) {
        let outcome = runner.clone().run_case(case).await;
        let (ok, detail) = match outcome {
            Ok(detail) => (true, detail),
            Err(e) => (false, format!("{e:#}")),
        };
        all &= ok;
        println!("{} {}: {detail}", if ok { "PASS" } else { "FAIL" }, case.name);
        writeln!(results, "{}", json!({"case": case.name, "ok": ok, "detail": detail}))?;
        results.flush()?;
    }
    Ok(all)
}

/// `load`: the `fault_load` case until `out/stop` exists.
pub async fn run_load(args: RunnerArgs) -> anyhow::Result<()> {
    let cases = read_cases(&args.cases)?;
    let case = cases
        .cases
        .iter()
        .find(|c| c.phase.as_deref() == Some("load"))
        .context("no case with \"phase\": \"load\"")?;
    let Kind::FaultLoad { callers, uids, batch_every } = &case.kind else {
        anyhow::bail!("case {}: the load phase runs only fault_load", case.name);
    };
    let runner = Arc::new(connect(&args).await?);
    let stop = runner.out.join("stop");
    let history = History::create(&runner.out.join(format!("{}.history.jsonl", case.name)))?;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for caller in 0..*callers {
        let (runner, uids, history, stop) =
            (runner.clone(), uids.clone(), history.clone(), stop.clone());
        let batch_every = u64::from((*batch_every).max(1));
        tasks.push(tokio::spawn(async move {
            let mut i = caller as usize % uids.len();
            let mut n = 0u64;
            let mut last_check = Instant::now();
            let mut stopped = stop.exists();
            while !stopped {
                n += 1;
                let batch = n.is_multiple_of(batch_every);
                let call_uids = if batch { uids.clone() } else { vec![uids[i]] };
                let invoke = t0.elapsed();
                let result = if batch {
                    runner.seq.next_batch(&call_uids, CALL).await
                } else {
                    runner.seq.next(call_uids[0], CALL).await.map(|v| vec![v])
                };
                let set = runner.set_of(call_uids[0]);
                history.record(caller, set, call_uids, invoke, t0.elapsed(), result)?;
                i = (i + 1) % uids.len();
                if last_check.elapsed() >= Duration::from_millis(50) {
                    stopped = stop.exists();
                    last_check = Instant::now();
                }
            }
            Ok::<(), std::io::Error>(())
        }));
    }
    for task in tasks {
        task.await?.context("cannot write the history")?;
    }
    history.finish()
}

/// `refused`: one connection attempt with the given identity; Ok(()) when it was refused.
pub async fn run_refused(
    cluster: &Path,
    cert: &Path,
    key: &Path,
    server_name_prefix: Option<&str>,
) -> anyhow::Result<String> {
    let config = read_cluster(cluster)?;
    let tls = config.tls.as_ref().context("the cluster file has no [tls]")?;
    let dir = cluster.parent().unwrap_or(Path::new(""));
    let mut client = seqsvr_client::tls::ClientTls::from_files(tls, dir, cert, key)?;
    if let Some(prefix) = server_name_prefix {
        client.server_name = format!("{prefix}{}", client.server_name);
    }
    seqsvr_client::tls::set_process_tls(client);
    let seeds: Vec<String> = config.sets.iter().flat_map(|s| s.allocs.clone()).collect();
    let seq = match SeqClient::connect(&seeds, REFUSAL).await {
        Ok(seq) => seq,
        Err(s) => return Ok(format!("refused at connect: {:?}: {}", s.code(), s.message())),
    };
    match seq.next(42, REFUSAL).await {
        Ok(v) => anyhow::bail!("served next(42) = {v}: the connection was not refused"),
        Err(s) => Ok(format!("refused: {:?}: {}", s.code(), s.message())),
    }
}

impl Runner {
    fn set_of(&self, uid: u64) -> u64 {
        self.config
            .sets
            .iter()
            .find(|s| s.uid_begin <= uid && uid < s.uid_end)
            .map_or(u64::MAX, |s| s.id.0)
    }

    /// Runs one case: Ok(what was seen) if it passed.
    async fn run_case(self: Arc<Self>, case: &Case) -> anyhow::Result<String> {
        match &case.kind {
            Kind::ConcurrentNext { callers, calls_per_caller, uids } => {
                self.concurrent_next(&case.name, *callers, *calls_per_caller, uids).await
            }
            Kind::BatchOrder { uids } => self.batch_order(uids).await,
            Kind::CurrentAfterNext { uids } => self.current_after_next(uids).await,
            Kind::Error { call, code } => self.error(call, code).await,
            Kind::RefusedConnection { certificate, server_name_prefix } => {
                self.refused(certificate, server_name_prefix.as_deref())
            }
            Kind::DecodeVectors { file } => decode_vectors(&self.cases_dir.join(file)),
            Kind::IdsDecode { count, session } => self.ids_decode(*count, session).await,
            Kind::FaultLoad { .. } => anyhow::bail!("fault_load runs in the load phase only"),
        }
    }

    async fn concurrent_next(
        self: Arc<Self>,
        name: &str,
        callers: u32,
        calls: u32,
        uids: &[u64],
    ) -> anyhow::Result<String> {
        anyhow::ensure!(!uids.is_empty(), "no uids");
        let history = History::create(&self.out.join(format!("{name}.history.jsonl")))?;
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for caller in 0..callers {
            let (runner, uids, history) = (self.clone(), uids.to_vec(), history.clone());
            tasks.push(tokio::spawn(async move {
                let mut last: std::collections::HashMap<u64, u64> = Default::default();
                for k in 0..calls as usize {
                    let uid = uids[(caller as usize + k) % uids.len()];
                    let invoke = t0.elapsed();
                    let result = runner.seq.next(uid, CALL).await;
                    let value = result.as_ref().ok().copied();
                    let set = runner.set_of(uid);
                    history
                        .record(
                            caller,
                            set,
                            vec![uid],
                            invoke,
                            t0.elapsed(),
                            result.map(|v| vec![v]),
                        )
                        .map_err(|e| format!("cannot write the history: {e}"))?;
                    let value =
                        value.ok_or_else(|| format!("caller {caller}: next({uid}) failed"))?;
                    if let Some(&before) = last.get(&uid) {
                        if value <= before {
                            return Err(format!(
                                "caller {caller}: next({uid}) = {value} after {before}"
                            ));
                        }
                    }
                    last.insert(uid, value);
                }
                Ok::<(), String>(())
            }));
        }
        let mut errors = Vec::new();
        for task in tasks {
            if let Err(e) = task.await? {
                errors.push(e);
            }
        }
        history.finish()?;
        anyhow::ensure!(errors.is_empty(), "{} callers failed, first: {}", errors.len(), errors[0]);
        Ok(format!("{} calls ok, each caller strictly increasing per uid", callers * calls))
    }

    async fn batch_order(&self, uids: &[u64]) -> anyhow::Result<String> {
        let first = self.seq.next_batch(uids, CALL).await.map_err(status_error)?;
        anyhow::ensure!(
            first.len() == uids.len(),
            "{} values for {} uids",
            first.len(),
            uids.len()
        );
        for i in 0..uids.len() {
            for j in i + 1..uids.len() {
                if uids[i] == uids[j] && first[i] >= first[j] {
                    anyhow::bail!(
                        "uid {} at places {i} and {j}: {} then {}",
                        uids[i],
                        first[i],
                        first[j]
                    );
                }
            }
        }
        let second = self.seq.next_batch(uids, CALL).await.map_err(status_error)?;
        anyhow::ensure!(
            second.len() == uids.len(),
            "{} values for {} uids",
            second.len(),
            uids.len()
        );
        for (i, uid) in uids.iter().enumerate() {
            let highest = uids.iter().zip(&first).filter(|(u, _)| *u == uid).map(|(_, v)| *v).max();
            if let Some(highest) = highest.filter(|h| second[i] <= *h) {
                anyhow::bail!(
                    "uid {uid}: {} in the second call, {highest} in the first",
                    second[i]
                );
            }
        }
        Ok(format!("{uids:?} -> {first:?} then {second:?}"))
    }

    async fn current_after_next(&self, uids: &[u64]) -> anyhow::Result<String> {
        let mut seen = Vec::new();
        for &uid in uids {
            let v = self.seq.next(uid, CALL).await.map_err(status_error)?;
            let c = self.seq.current(uid, CALL).await.map_err(status_error)?;
            anyhow::ensure!(c == v, "uid {uid}: next = {v}, then current = {c}");
            seen.push(format!("{uid}: {v}"));
        }
        Ok(seen.join(", "))
    }

    async fn error(&self, call: &Call, code: &str) -> anyhow::Result<String> {
        let result = match call {
            Call::Next { uid } => self.seq.next(*uid, CALL).await.map(|v| format!("{v}")),
            Call::NextBatch { uids } => {
                self.seq.next_batch(uids, CALL).await.map(|v| format!("{v:?}"))
            }
            Call::NextIds { scheme, count } => self
                .ids
                .next_ids(scheme, *count, 0, CALL)
                .await
                .map(|ids| format!("{} ids", ids.ids.len())),
        };
        let status = match result {
            Ok(v) => anyhow::bail!("answered {v}, expected {code}"),
            Err(status) => status,
        };
        let got = code_name(status.code());
        anyhow::ensure!(got == code, "{got}: {} (expected {code})", status.message());
        anyhow::ensure!(!status.message().is_empty(), "{got} with an empty message");
        let after = self.seq.next(42, CALL).await.map_err(status_error)?;
        Ok(format!("{got}: {} (next(42) afterwards: {after})", status.message()))
    }

    /// In a child process: the SDK's identity is the process's.
    fn refused(&self, certificate: &str, prefix: Option<&str>) -> anyhow::Result<String> {
        let (cert, key) = match certificate {
            "own" => (self.args.cert.clone(), self.args.key.clone()),
            "foreign" => (
                self.args.foreign_cert.clone().context("--foreign-cert not given")?,
                self.args.foreign_key.clone().context("--foreign-key not given")?,
            ),
            other => anyhow::bail!("unknown certificate {other:?} (own, foreign)"),
        };
        let exe = std::env::current_exe()?;
        let mut cmd = std::process::Command::new(exe);
        cmd.args(["conformance", "refused", "--cluster"]).arg(&self.args.cluster);
        cmd.arg("--cert").arg(cert).arg("--key").arg(key);
        if let Some(prefix) = prefix {
            cmd.args(["--server-name-prefix", prefix]);
        }
        let output = cmd.output()?;
        let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let err = String::from_utf8_lossy(&output.stderr).trim().to_string();
        anyhow::ensure!(output.status.success(), "{text} {err}");
        Ok(text)
    }

    async fn ids_decode(&self, count: u32, spec: &SessionSpec) -> anyhow::Result<String> {
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
        let session =
            Session { session_type: spec.session_type, id: SessionId::Text(spec.id.clone()) };
        let mut seen = Vec::new();
        for name in self.config.ids.schemes.keys() {
            let layout = layout_of(&self.config.ids, name, now_ms)?;
            let rongcloud = layout.scheme() == seqsvr_core::idscheme::Scheme::RongCloud;
            let ids = if rongcloud {
                self.ids.next_session_ids(name, count, &session, CALL).await
            } else {
                self.ids.next_ids(name, count, 0, CALL).await
            }
            .map_err(status_error)
            .with_context(|| format!("scheme {name}"))?;
            anyhow::ensure!(
                ids.ids.len() == count as usize,
                "{name}: {} ids for {count}",
                ids.ids.len()
            );
            let mut previous = None;
            for id in ids.ids.iter() {
                let text = id.text(&layout)?;
                let d = decode(&layout, &text).with_context(|| format!("{name}: {text}"))?;
                if rongcloud {
                    anyhow::ensure!(
                        d.worker.is_none()
                            && d.fields.session_type == u64::from(spec.session_type)
                            && d.fields.session_hash == session.hash(),
                        "{name}: {text} decodes to {d:?}, asked for session {spec:?}"
                    );
                } else {
                    anyhow::ensure!(
                        d.worker == Some(ids.worker_id),
                        "{name}: {text} carries worker {:?}, the reply names {}",
                        d.worker,
                        ids.worker_id
                    );
                }
                anyhow::ensure!(
                    previous.is_none_or(|p| p < id.value()),
                    "{name}: ids not increasing"
                );
                previous = Some(id.value());
            }
            seen.push(format!("{name}: worker {}", ids.worker_id));
        }
        Ok(seen.join(", "))
    }
}

/// The decode vectors (`tests/conformance/decode-vectors.json`), through the SDK's decoder.
fn decode_vectors(path: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file: Value = serde_json::from_str(&text)?;
    let now_ms = file["now_ms"].as_u64().context("now_ms")?;
    let load = |entry: &Value| -> anyhow::Result<Result<seqsvr_core::idscheme::Layout, String>> {
        let spec: IdSchemeConfig = serde_json::from_value(entry["spec"].clone())?;
        let at = entry["load_at_ms"].as_u64().unwrap_or(now_ms);
        Ok(spec.layout_spec().load(at).map_err(|e| e.to_string()))
    };
    let mut checked = 0;
    for v in file["decode"].as_array().context("decode")? {
        let name = v["layout"].as_str().context("layout")?;
        let layout = load(&file["layouts"][name])?.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let input = v["input"].as_str().context("input")?;
        match (decode(&layout, input), v.get("expect"), v["error"].as_str()) {
            (Ok(d), Some(expect), _) => {
                let got = serde_json::to_value(DecodedView::new(name, &d))?;
                for (key, want) in expect.as_object().context("expect")? {
                    anyhow::ensure!(
                        same(&got[key], want),
                        "{name} {input:?}: {key} = {}, the vector says {want}",
                        got[key]
                    );
                }
            }
            (Err(e), None, Some(error)) => {
                anyhow::ensure!(
                    e.to_string() == error,
                    "{name} {input:?}: error {e:?}, the vector says {error:?}"
                )
            }
            (Ok(d), None, _) => {
                anyhow::bail!("{name} {input:?}: decoded {d:?}, the vector says it fails")
            }
            (Err(e), _, _) => anyhow::bail!("{name} {input:?}: {e}, the vector says it decodes"),
        }
        checked += 1;
    }
    for v in file["layout_errors"].as_array().context("layout_errors")? {
        let want = v["error_contains"].as_str().context("error_contains")?;
        match load(v)? {
            Ok(_) => anyhow::bail!("{}: loaded, the vector says it fails with {want:?}", v["spec"]),
            Err(e) => anyhow::ensure!(e.contains(want), "{}: {e:?} lacks {want:?}", v["spec"]),
        }
        checked += 1;
    }
    for v in file["session_hashes"].as_array().context("session_hashes")? {
        let id = v["session_id"].as_str().context("session_id")?;
        let want = v["hash"].as_u64().context("hash")?;
        let got = seqsvr_core::idscheme::session_hash_of(id);
        anyhow::ensure!(got == want, "session {id:?}: hash {got}, the vector says {want}");
        checked += 1;
    }
    Ok(format!("{checked} vectors"))
}

/// JSON values equal, a number and its decimal string alike (ids and rand_b are strings).
fn same(got: &Value, want: &Value) -> bool {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    got == want || (!got.is_null() && !want.is_null() && text(got) == text(want))
}

fn status_error(status: Status) -> anyhow::Error {
    anyhow::anyhow!("{}: {}", code_name(status.code()), status.message())
}

/// A history file written as calls complete (one line each, flushed: `conformance.sh` watches
/// it grow during the faults).
#[derive(Clone)]
struct History {
    file: Arc<Mutex<Option<std::io::BufWriter<std::fs::File>>>>,
}

impl History {
    fn create(path: &Path) -> anyhow::Result<History> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(History { file: Arc::new(Mutex::new(Some(std::io::BufWriter::new(file)))) })
    }

    fn record(
        &self,
        client: u32,
        set: u64,
        uids: Vec<u64>,
        invoke: Duration,
        complete: Duration,
        result: Result<Vec<u64>, Status>,
    ) -> std::io::Result<()> {
        let outcome = match result {
            Ok(values) => Outcome::Ok { values },
            Err(s) if matches!(s.code(), Code::InvalidArgument | Code::NotFound) => {
                Outcome::Fail { code: code_name(s.code()).to_string() }
            }
            Err(s) => {
                Outcome::Unknown { reason: format!("{}: {}", code_name(s.code()), s.message()) }
            }
        };
        let op = Operation {
            client,
            set,
            uids,
            invoke_ns: invoke.as_nanos() as u64,
            complete_ns: complete.as_nanos() as u64,
            outcome,
        };
        let line = serde_json::to_string(&op)?;
        let mut guard = self.file.lock().expect("history lock");
        let file = guard.as_mut().expect("history written after finish");
        // A history that cannot be written fails the run: a missing line could hide a repeat.
        writeln!(file, "{line}")?;
        file.flush()
    }

    fn finish(&self) -> anyhow::Result<()> {
        if let Some(mut file) = self.file.lock().expect("history lock").take() {
            file.flush()?;
            file.get_ref().sync_all()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/decode-vectors.json")
    }

    #[test]
    fn the_decode_vectors_pass_and_a_changed_one_is_caught() {
        let detail = decode_vectors(&vectors_path()).expect("the Rust decoder passes its vectors");
        assert!(detail.ends_with(" vectors"), "{detail}");
        // One field of the first vector changed: the case must fail, naming it.
        let text = std::fs::read_to_string(vectors_path()).unwrap();
        let mut file: Value = serde_json::from_str(&text).unwrap();
        file["decode"][0]["expect"]["sequence"] = json!(4);
        let dir = tempfile::tempdir().unwrap();
        let changed = dir.path().join("v.json");
        std::fs::write(&changed, file.to_string()).unwrap();
        let err = decode_vectors(&changed).expect_err("a wrong vector is caught");
        assert!(format!("{err}").contains("sequence"), "{err}");
    }

    #[test]
    fn every_case_of_the_suite_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/cases.json");
        let file = read_cases(&path).expect("cases.json parses");
        assert!(file.cases.iter().any(|c| matches!(c.kind, Kind::FaultLoad { .. })));
        assert!(file.cases.iter().filter(|c| matches!(c.kind, Kind::Error { .. })).count() >= 4);
    }

    #[test]
    fn numbers_and_their_decimal_strings_compare_equal_nulls_do_not() {
        assert!(same(&json!(7), &json!("7")));
        assert!(same(&json!("a"), &json!("a")));
        assert!(!same(&json!(7), &json!("8")));
        assert!(!same(&Value::Null, &json!("null")));
        assert!(same(&Value::Null, &Value::Null));
    }
}
