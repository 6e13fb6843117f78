//! The cluster at a glance (`status`), once or redrawn like `top` (`watch`, `status --watch`).

use crate::commands::alloc::{lease_rows, sets_summary, AllocRow, Leases, RunRow, SetLeases};
use crate::commands::store::{
    store_rows, StoreMemberRow, StoreStatus, COMMANDS_VERSION_NOTE, VOTE_BLOCKED_NOTE,
};
use crate::ctx::{Ctx, Deadline};
use crate::error::{partial, CtlError, Exit};
use crate::render::{self, View};
use seqsvr_core::config::ClusterConfig;
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `status`: every store member, and each set's leases as its leader sees them.
/// `--json`: `{"store": [store status rows], "leases": [leases rows]}`.
#[derive(Debug, Serialize)]
pub struct ClusterStatus {
    pub store: Vec<StoreMemberRow>,
    pub leases: Vec<SetLeases>,
}

impl View for ClusterStatus {
    fn text(&self) -> String {
        let allocs: Vec<AllocRow> = self.leases.iter().flat_map(|s| s.allocs.clone()).collect();
        let runs: Vec<RunRow> = self.leases.iter().flat_map(|s| s.runs.clone()).collect();
        let mut text = render::section("STORE MEMBERS", &self.store);
        if self.store.iter().any(|r| r.vote_blocked == Some(true)) {
            text.push_str(VOTE_BLOCKED_NOTE);
        }
        if self.store.iter().any(StoreMemberRow::awaits_commands_version) {
            text.push_str(COMMANDS_VERSION_NOTE);
        }
        for part in [
            render::section("SETS", &self.leases),
            render::section("ALLOCSVRS", &allocs),
            render::section("SECTIONS", &runs),
        ] {
            text.push('\n');
            text.push_str(&part);
        }
        text
    }
}

impl ClusterStatus {
    /// What did not answer, for stderr.
    pub fn summary(&self) -> String {
        let store = StoreStatus(self.store.clone());
        let failed = self.leases.iter().filter(|s| s.error.is_some()).map(|s| &s.set);
        let mut parts = Vec::new();
        if store.exit() != Exit::Ok {
            parts.push(store.summary());
        }
        if Leases(self.leases.clone()).exit() != Exit::Ok {
            parts.push(sets_summary(failed, self.leases.len()));
        }
        parts.join("; ")
    }

    /// The worse of the store's and the sets' outcomes.
    pub fn exit(&self) -> Exit {
        StoreStatus(self.store.clone()).exit().max(Leases(self.leases.clone()).exit())
    }
}

/// Asks every member and every set's leader at once, all within `deadline`.
pub async fn gather(config: &ClusterConfig, deadline: Deadline) -> ClusterStatus {
    let (store, leases) = tokio::join!(store_rows(config, deadline), lease_rows(config, deadline));
    ClusterStatus { store, leases }
}

pub async fn status(ctx: &Ctx) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let view = gather(&config, ctx.deadline()).await;
    render::emit(ctx.json, &view)?;
    partial(view.exit(), view.summary(), ctx.timeout)
}

/// Clears the screen and puts the cursor top left (ANSI; only on a terminal).
const CLEAR: &str = "\x1b[H\x1b[2J";

/// One frame of `watch`: on a terminal the screen is cleared first; elsewhere views follow each
/// other a blank line apart. Text gets a heading with the time; JSON stays pure JSON documents.
pub fn frame(
    body: &str,
    tty: bool,
    json: bool,
    first: bool,
    interval: Duration,
    now: SystemTime,
) -> String {
    let mut out = String::new();
    if tty {
        out.push_str(CLEAR);
    } else if !first {
        out.push('\n');
    }
    if !json {
        out.push_str(&format!(
            "seqctl watch: every {} ms, updated {} UTC{}\n\n",
            interval.as_millis(),
            clock(now),
            if tty { " (Ctrl-C to quit)" } else { "" }
        ));
    }
    out.push_str(body);
    out
}

/// `HH:MM:SS` of a time, UTC.
fn clock(now: SystemTime) -> String {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Redraws the cluster view every `interval` (each refresh within --timeout-ms) until Ctrl-C,
/// which ends it quietly with exit code 0.
pub async fn watch(ctx: &Ctx, interval: Duration) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let tty = std::io::stdout().is_terminal();
    let interval = interval.max(Duration::from_millis(100));
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // One Ctrl-C listener for the whole loop, so a Ctrl-C between two selects is not missed.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut first = true;
    loop {
        let view = tokio::select! {
            _ = &mut ctrl_c => break,
            view = async {
                ticker.tick().await;
                gather(&config, ctx.deadline()).await
            } => view,
        };
        let body = render::render(ctx.json, &view)?;
        let text = frame(&body, tty, ctx.json, first, interval, SystemTime::now());
        first = false;
        let mut out = std::io::stdout().lock();
        // A closed stdout (`seqctl watch | head`) ends the process through SIGPIPE.
        if out.write_all(text.as_bytes()).and_then(|_| out.flush()).is_err() {
            return Ok(Exit::Ok);
        }
    }
    if tty {
        println!();
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::alloc::tests::sample_leases;
    use crate::commands::store::tests::sample_rows;

    fn sample() -> ClusterStatus {
        ClusterStatus { store: sample_rows(), leases: sample_leases() }
    }

    #[test]
    fn status_text_has_one_titled_table_per_part() {
        let text = sample().text();
        let titles: Vec<&str> = text
            .lines()
            .filter(|l| l.chars().all(|c| c.is_ascii_uppercase() || c == ' ') && !l.is_empty())
            .collect();
        assert_eq!(titles, ["STORE MEMBERS", "SETS", "ALLOCSVRS", "SECTIONS"], "{text}");
        assert!(text.lines().nth(1).unwrap().starts_with("SET  ID  ADDR"), "{text}");
    }

    #[test]
    fn status_json_is_store_and_leases() {
        let json = serde_json::to_value(sample()).unwrap();
        assert_eq!(json["store"].as_array().unwrap().len(), 2);
        assert_eq!(json["leases"][0]["allocs"][0]["state"], "live");
        assert_eq!(json["leases"][0]["runs"][0]["lease_epoch"], 4);
        assert_eq!(sample().exit(), Exit::Refused, "one member and one set did not answer");
    }

    #[test]
    fn watch_frames_clear_a_terminal_and_stack_in_a_pipe() {
        let at = UNIX_EPOCH + Duration::from_secs(86_400 * 3 + 3600 * 13 + 60 * 5 + 9);
        let second = Duration::from_secs(1);
        let tty = frame("BODY\n", true, false, false, second, at);
        assert!(tty.starts_with(CLEAR), "{tty:?}");
        assert!(tty.contains("updated 13:05:09 UTC (Ctrl-C to quit)\n\nBODY\n"), "{tty:?}");
        let first = frame("BODY\n", false, false, true, second, at);
        assert_eq!(first, "seqctl watch: every 1000 ms, updated 13:05:09 UTC\n\nBODY\n");
        let next = frame("BODY\n", false, false, false, second, at);
        assert_eq!(next, format!("\n{first}"), "a blank line between views");
        assert!(!next.contains('\x1b'), "no ANSI outside a terminal");
        assert_eq!(frame("{}\n", false, true, false, second, at), "\n{}\n", "JSON stays JSON");
    }
}
