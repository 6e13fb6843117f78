//! The seqctl binary against servers made up in the test: a real grpc.health.v1 service, and
//! "servers" that accept TCP and never answer (a SIGSTOPped process), to check that every
//! command ends within --timeout-ms with exit code 2 and an error a person can act on; plus
//! completions, --help and a closed stdout.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn seqctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_seqctl"))
}

fn run(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = seqctl().args(args).stdin(Stdio::null()).output().expect("run seqctl");
    (out, started.elapsed())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A listener that accepts connections and never says a word (keeps them open).
fn silent_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    addr
}

/// An address nothing listens on.
fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().unwrap()
}

/// A one-set cluster config whose stores and AllocSvrs are at `stores` and `allocs`.
fn config(dir: &Path, stores: &[SocketAddr], allocs: &[SocketAddr]) -> String {
    let members: Vec<String> = stores
        .iter()
        .enumerate()
        .map(|(i, a)| format!("  {{ id = {}, addr = \"{a}\" }},", i + 1))
        .collect();
    let allocs: Vec<String> = allocs.iter().map(|a| format!("\"{a}\"")).collect();
    let text = format!(
        "section_size = 100000\n\
         [store]\ntick_ms = 100\nelection_ticks = 10\nheartbeat_ticks = 2\n\
         max_batch_sections = 4096\ncompact_log_entries = 10000\nrequest_timeout_ms = 5000\n\
         [alloc]\nlease_ms = 5000\nlease_margin_ms = 500\nheartbeat_ms = 1500\nstep = 10000\n\
         prefetch_ratio = 0.9\nmax_batch_uids = 10000\nrequest_timeout_ms = 3000\n\
         [[sets]]\nid = 0\nuid_begin = 0\nuid_end = 2147500000\nstores = [\n{}\n]\nallocs = [{}]\n",
        members.join("\n"),
        allocs.join(", ")
    );
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).expect("write config");
    path.display().to_string()
}

/// Every command that talks to the cluster, against members that never answer, ends within
/// --timeout-ms (plus process start-up) with exit code 2 and `error:` / `hint:` lines.
#[test]
fn every_command_honours_timeout_ms_against_silent_servers() {
    let dir = tempfile::tempdir().unwrap();
    let stores = [silent_server(), silent_server(), silent_server()];
    let path = config(dir.path(), &stores, &[silent_server()]);
    let timeout_ms = 1000;
    let commands: &[&[&str]] = &[
        &["status"],
        &["store", "status"],
        &["store", "get", "1"],
        &["store", "advance", "1=100"],
        &["store", "transfer-leader", "--to", "2"],
        &["store", "add-learner", "4", "127.0.0.1:1"],
        &["store", "promote", "4"],
        &["store", "remove", "3"],
        &["store", "set-lease", "--lease-ms", "4000", "--margin-ms", "400"],
        &["route"],
        &["leases"],
        &["section", "move", "1", "--to", "2"],
        &["alloc", "drain", "2"],
        &["next", "42"],
        &["get", "42"],
    ];
    // Room for process start-up on a busy machine, but less than two timeouts: asking three
    // members one after the other, or the store and then the leases, would not fit.
    let budget = Duration::from_millis(timeout_ms + 900);
    let t = timeout_ms.to_string();
    for command in commands {
        let mut args = vec!["--config", path.as_str(), "--timeout-ms", t.as_str()];
        args.extend_from_slice(command);
        let (out, took) = run(&args);
        let err = stderr(&out);
        assert!(took < budget, "{command:?} took {took:?} with --timeout-ms {timeout_ms}: {err}");
        assert_eq!(out.status.code(), Some(2), "{command:?}: {err}\n{}", stdout(&out));
        if !matches!(command[0], "status") && command != &["store", "status"] {
            assert!(err.starts_with("error: "), "{command:?}: {err}");
            assert!(err.contains("\nhint: "), "{command:?}: {err}");
            assert!(!err.contains("panicked"), "{command:?}: {err}");
        }
    }
}

#[test]
fn status_lists_unreachable_members_with_their_error_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let stores = [closed_port(), silent_server()];
    let path = config(dir.path(), &stores, &[]);
    let (out, _) = run(&["--config", &path, "--timeout-ms", "500", "status"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "STORE MEMBERS", "{text}");
    assert!(lines[1].starts_with("SET  ID  ADDR"), "{text}");
    assert!(lines[2].contains("unreachable") && lines[3].contains("unreachable"), "{text}");
    assert!(lines[2].contains("Connection refused"), "{text}");
    assert!(lines[3].contains("no answer within 500 ms"), "{text}");
    let err = stderr(&out);
    assert!(err.starts_with("error: 2 of 2 store members did not answer"), "{err}");
    assert!(err.contains("\nhint: "), "{err}");

    let (out, _) = run(&["--config", &path, "--timeout-ms", "500", "status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["store"][0]["role"], "unreachable");
    assert_eq!(json["store"][0]["term"], serde_json::Value::Null);
    assert!(json["leases"][0]["error"].as_str().unwrap().contains("set 0 StoreSvrs"), "{json}");
}

#[test]
fn a_missing_config_says_how_to_name_one() {
    let (out, _) = run(&["--config", "/nonexistent/cluster.toml", "status"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.starts_with("error: cannot read the cluster config /nonexistent/cluster.toml"));
    assert!(err.contains("hint: name it with --config FILE or SEQSVR_CONFIG"), "{err}");
}

/// A grpc.health.v1 server on a random port: "" SERVING, `down` NOT_SERVING.
fn health_server() -> (SocketAddr, tokio::runtime::Runtime) {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let addr = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter.set_service_status("down", tonic_health::ServingStatus::NotServing).await;
        reporter.set_service_status("unknown", tonic_health::ServingStatus::Unknown).await;
        tokio::spawn(async move {
            let _keep = reporter;
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
        });
        addr
    });
    (addr, runtime)
}

#[test]
fn health_exit_codes() {
    let (addr, _runtime) = health_server();
    let addr = addr.to_string();
    // No cluster config needed.
    let no_config = ["--config", "/nonexistent/cluster.toml"];
    let health = |extra: &[&str]| {
        let mut args = no_config.to_vec();
        args.extend_from_slice(&["health", addr.as_str()]);
        args.extend_from_slice(extra);
        run(&args).0
    };
    let out = health(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("{addr} SERVING\n"));

    let out = health(&["--service", "down"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("{addr} down NOT_SERVING\n"));

    let out = health(&["--service", "unknown"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), format!("{addr} unknown UNKNOWN\n"));

    let out = health(&["--service", "no.such.Service", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"addr": addr, "service": "no.such.Service", "status": "SERVICE_UNKNOWN"})
    );

    // Nothing listening, or a server that never answers: 2, a message on stderr, nothing on stdout.
    for (target, timeout) in [(closed_port(), "2000"), (silent_server(), "300")] {
        let started = Instant::now();
        let out = seqctl()
            .args(["--timeout-ms", timeout, "health", &target.to_string()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(started.elapsed() < Duration::from_millis(2500));
        assert!(out.stdout.is_empty());
        let err = stderr(&out);
        assert!(err.starts_with(&format!("error: health check of {target}")), "{err}");
        assert!(err.contains("hint:"), "{err}");
    }
}

#[test]
fn completions_for_bash_and_zsh() {
    let (out, _) = run(&["completions", "bash"]);
    assert!(out.status.success());
    let script = stdout(&out);
    assert!(script.contains("_seqctl()") && script.contains("transfer-leader"), "bash");
    let (out, _) = run(&["completions", "zsh"]);
    assert!(out.status.success());
    assert!(stdout(&out).starts_with("#compdef seqctl"), "zsh");
}

#[test]
fn help_documents_exit_codes() {
    let (out, _) = run(&["--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    assert!(help.contains("Exit codes:\n  0  done"), "{help}");
}

/// `seqctl ... | head -1`: the reader goes away after one line; seqctl ends by SIGPIPE like any
/// Unix tool, without a panic or a backtrace on stderr.
#[test]
fn a_closed_stdout_ends_seqctl_quietly() {
    let mut child = seqctl()
        .args(["completions", "bash"])
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    // The reader (and so the pipe) is dropped here, after one line.
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    assert!(!first.is_empty());
    assert!(err.is_empty(), "stderr: {err}");
    use std::os::unix::process::ExitStatusExt;
    assert!(status.success() || status.signal() == Some(libc::SIGPIPE), "{status:?}");
}

/// `seqctl watch | head -1` (not a terminal): one view per interval until the reader goes; then
/// SIGPIPE ends it quietly.
#[test]
fn watch_in_a_pipe_ends_quietly_when_the_reader_goes() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), &[closed_port()], &[]);
    let mut child = seqctl()
        .args(["--config", &path, "--timeout-ms", "300", "watch", "--interval-ms", "100"])
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    // Two views: a heading, a table, ... and a blank line between views.
    while lines.iter().filter(|l: &&String| l.starts_with("seqctl watch: every 100 ms")).count() < 2
    {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "watch ended early: {lines:?}");
        lines.push(line);
    }
    assert!(!lines.concat().contains('\x1b'), "no ANSI in a pipe: {lines:?}");
    let second = lines.iter().rposition(|l| l.starts_with("seqctl watch:")).unwrap();
    assert_eq!(lines[second - 1], "\n", "a blank line between views: {lines:?}");
    drop(reader);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("watch kept running after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.is_empty(), "stderr: {err}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
}
