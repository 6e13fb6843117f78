//! The AllocSvr tier as each set's store leader sees it: route tables, registrations and
//! leases, and the commands that move sections (`section move`, `alloc drain`).

use crate::ctx::{members_text, pick_set, store_client, Ctx, Deadline};
use crate::error::{coded, partial, CtlError, Exit};
use crate::render::{self, opt, Done, Row, View};
use futures::future::join_all;
use seqsvr_core::config::{ClusterConfig, SetConfig};
use seqsvr_core::ids::SectionId;
use seqsvr_proto::v1 as pb;
use serde::Serialize;
use tabled::Tabled;

/// The error of a set whose leader did not answer, for a row.
fn set_error(set: &SetConfig, status: &tonic::Status, deadline: Deadline) -> String {
    format!("{}: {}", members_text(set), coded(status, deadline.total()))
}

/// `N of M sets' store leaders did not answer (...)`, for stderr.
pub fn sets_summary<'a>(failed: impl Iterator<Item = &'a u64>, total: usize) -> String {
    let failed: Vec<String> = failed.map(|s| format!("set {s}")).collect();
    format!(
        "{} of {total} sets' store leaders did not answer: {} (ERROR column)",
        failed.len(),
        failed.join(", ")
    )
}

// ---- route ----

/// A set's route table (its entries nested for `--json`, a table of their own in text).
#[derive(Debug, Clone, Serialize, Tabled)]
#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
pub struct SetRoute {
    pub set: u64,
    #[tabled(display = "opt")]
    pub version: Option<u64>,
    #[tabled(display = "opt")]
    pub uid_begin: Option<u64>,
    /// Exclusive.
    #[tabled(display = "opt")]
    pub uid_end: Option<u64>,
    #[tabled(display = "opt")]
    pub section_size: Option<u64>,
    #[tabled(display = "opt")]
    pub error: Option<String>,
    #[tabled(skip)]
    pub entries: Vec<RouteEntryRow>,
}

impl Row for SetRoute {
    const JSON_ONLY: &'static [&'static str] = &["entries"];
}

/// Sections `[section_begin, section_end)` of a set are served by AllocSvr `alloc_id` at `addr`.
#[derive(Debug, Clone, Serialize, Tabled)]
#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
pub struct RouteEntryRow {
    pub set: u64,
    pub section_begin: u64,
    pub section_end: u64,
    pub alloc_id: u64,
    pub addr: String,
}

impl Row for RouteEntryRow {}

impl SetRoute {
    fn from_table(t: &pb::RouteTable) -> SetRoute {
        SetRoute {
            set: t.set_id,
            version: Some(t.version),
            uid_begin: Some(t.uid_begin),
            uid_end: Some(t.uid_end),
            section_size: Some(t.section_size),
            error: None,
            entries: t
                .entries
                .iter()
                .map(|e| RouteEntryRow {
                    set: t.set_id,
                    section_begin: e.section_begin,
                    section_end: e.section_end,
                    alloc_id: e.alloc_id,
                    addr: e.addr.clone(),
                })
                .collect(),
        }
    }

    fn failed(set: u64, error: String) -> SetRoute {
        SetRoute {
            set,
            version: None,
            uid_begin: None,
            uid_end: None,
            section_size: None,
            error: Some(error),
            entries: Vec::new(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct Routes(pub Vec<SetRoute>);

impl View for Routes {
    fn text(&self) -> String {
        let entries: Vec<RouteEntryRow> = self.0.iter().flat_map(|s| s.entries.clone()).collect();
        format!("{}\n{}", render::section("SETS", &self.0), render::section("ROUTES", &entries))
    }
}

impl Routes {
    pub fn exit(&self) -> Exit {
        partial_exit(self.0.iter().filter(|s| s.error.is_some()).count(), self.0.len())
    }
}

/// 0 when every set answered, 2 when none did, 1 in between.
pub fn partial_exit(failed: usize, total: usize) -> Exit {
    match failed {
        0 => Exit::Ok,
        n if n == total => Exit::NoAnswer,
        _ => Exit::Refused,
    }
}

/// The route table of each set, from its store leader (authoritative), asked concurrently.
pub async fn route_tables(config: &ClusterConfig, deadline: Deadline) -> Vec<SetRoute> {
    join_all(config.sets.iter().map(|set| async move {
        let client = match store_client(set) {
            Ok(c) => c,
            Err(e) => return SetRoute::failed(set.id.0, e.what),
        };
        let result = client
            .admin(deadline.left(), |mut c, timeout| async move {
                let mut request = tonic::Request::new(pb::GetRouteTableRequest {});
                request.set_timeout(timeout);
                c.route_table(request).await
            })
            .await
            .and_then(|r| {
                r.route_table.ok_or_else(|| tonic::Status::internal("empty route table"))
            });
        match result {
            Ok(table) => SetRoute::from_table(&table),
            Err(status) => SetRoute::failed(set.id.0, set_error(set, &status, deadline)),
        }
    }))
    .await
}

pub async fn route(ctx: &Ctx) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let view = Routes(route_tables(&config, ctx.deadline()).await);
    render::emit(ctx.json, &view)?;
    let failed = view.0.iter().filter(|s| s.error.is_some()).map(|s| &s.set);
    partial(view.exit(), sets_summary(failed, view.0.len()), ctx.timeout)
}

// ---- leases ----

/// A set's lease timing and route version as its leader sees them; its AllocSvrs and section
/// runs nested for `--json`, tables of their own in text.
#[derive(Debug, Clone, Serialize, Tabled)]
#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
pub struct SetLeases {
    pub set: u64,
    #[tabled(display = "opt")]
    pub lease_ms: Option<u64>,
    #[tabled(display = "opt")]
    pub lease_margin_ms: Option<u64>,
    #[tabled(display = "opt")]
    pub route_version: Option<u64>,
    #[tabled(display = "opt")]
    pub error: Option<String>,
    #[tabled(skip)]
    pub allocs: Vec<AllocRow>,
    #[tabled(skip)]
    pub runs: Vec<RunRow>,
}

impl Row for SetLeases {
    const JSON_ONLY: &'static [&'static str] = &["allocs", "runs"];
}

/// An AllocSvr registered with a set.
#[derive(Debug, Clone, Serialize, Tabled)]
#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
pub struct AllocRow {
    pub set: u64,
    pub alloc_id: u64,
    pub addr: String,
    /// live, draining, released (handed its sections back on SIGTERM), expired (no heartbeat
    /// for a lease: never granted again) or replaced.
    pub state: String,
    /// The certificate identity that registered it ("-" over plaintext).
    pub identity: String,
    pub n_sections: u64,
    /// How long its last grant may still be valid (0: lapsed).
    pub lease_left_ms: i64,
    /// Since the leader last granted it a lease (-1: not since it became leader).
    pub ms_since_grant: i64,
    #[tabled(skip)]
    pub draining: bool,
    #[tabled(skip)]
    pub replaced: bool,
    #[tabled(skip)]
    pub released: bool,
    #[tabled(skip)]
    pub expired: bool,
}

impl Row for AllocRow {
    const JSON_ONLY: &'static [&'static str] = &["draining", "replaced", "released", "expired"];
}

impl AllocRow {
    fn new(set: u64, a: &pb::AllocLease) -> AllocRow {
        let state = if a.replaced {
            "replaced"
        } else if a.released {
            "released"
        } else if a.expired {
            "expired"
        } else if a.draining {
            "draining"
        } else {
            "live"
        };
        AllocRow {
            set,
            alloc_id: a.alloc_id,
            addr: a.addr.clone(),
            state: state.to_string(),
            identity: if a.identity.is_empty() { "-".into() } else { a.identity.clone() },
            n_sections: a.n_sections,
            lease_left_ms: a.lease_left_ms,
            ms_since_grant: a.ms_since_grant,
            draining: a.draining,
            replaced: a.replaced,
            released: a.released,
            expired: a.expired,
        }
    }
}

/// Sections `[section_begin, section_end)` assigned to an AllocSvr; `settled` false while the
/// previous owner's lease may still run.
#[derive(Debug, Clone, Serialize, Tabled)]
#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
pub struct RunRow {
    pub set: u64,
    pub section_begin: u64,
    pub section_end: u64,
    pub alloc_id: u64,
    pub lease_epoch: u64,
    pub settled: bool,
}

impl Row for RunRow {}

impl SetLeases {
    fn new(set: u64, l: &pb::LeasesResponse) -> SetLeases {
        SetLeases {
            set,
            lease_ms: Some(l.lease_ms),
            lease_margin_ms: Some(l.lease_margin_ms),
            route_version: Some(l.route_version),
            error: None,
            allocs: l.allocs.iter().map(|a| AllocRow::new(set, a)).collect(),
            runs: l
                .runs
                .iter()
                .map(|r| RunRow {
                    set,
                    section_begin: r.section_begin,
                    section_end: r.section_end,
                    alloc_id: r.alloc_id,
                    lease_epoch: r.lease_epoch,
                    settled: r.settled,
                })
                .collect(),
        }
    }

    fn failed(set: u64, error: String) -> SetLeases {
        SetLeases {
            set,
            lease_ms: None,
            lease_margin_ms: None,
            route_version: None,
            error: Some(error),
            allocs: Vec::new(),
            runs: Vec::new(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct Leases(pub Vec<SetLeases>);

impl View for Leases {
    fn text(&self) -> String {
        let allocs: Vec<AllocRow> = self.0.iter().flat_map(|s| s.allocs.clone()).collect();
        let runs: Vec<RunRow> = self.0.iter().flat_map(|s| s.runs.clone()).collect();
        format!(
            "{}\n{}\n{}",
            render::section("SETS", &self.0),
            render::section("ALLOCSVRS", &allocs),
            render::section("SECTIONS", &runs)
        )
    }
}

impl Leases {
    pub fn exit(&self) -> Exit {
        partial_exit(self.0.iter().filter(|s| s.error.is_some()).count(), self.0.len())
    }
}

/// Each set's leases from its store leader, asked concurrently.
pub async fn lease_rows(config: &ClusterConfig, deadline: Deadline) -> Vec<SetLeases> {
    join_all(config.sets.iter().map(|set| async move {
        let client = match store_client(set) {
            Ok(c) => c,
            Err(e) => return SetLeases::failed(set.id.0, e.what),
        };
        let result = client
            .admin(deadline.left(), |mut c, timeout| async move {
                let mut request = tonic::Request::new(pb::LeasesRequest {});
                request.set_timeout(timeout);
                c.leases(request).await
            })
            .await;
        match result {
            Ok(l) => SetLeases::new(set.id.0, &l),
            Err(status) => SetLeases::failed(set.id.0, set_error(set, &status, deadline)),
        }
    }))
    .await
}

pub async fn leases(ctx: &Ctx) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let view = Leases(lease_rows(&config, ctx.deadline()).await);
    render::emit(ctx.json, &view)?;
    let failed = view.0.iter().filter(|s| s.error.is_some()).map(|s| &s.set);
    partial(view.exit(), sets_summary(failed, view.0.len()), ctx.timeout)
}

// ---- section move, alloc drain ----

#[derive(Debug, Serialize)]
pub struct Moved {
    pub set: u64,
    pub section_begin: u64,
    pub section_end: u64,
    pub to_alloc_id: u64,
    pub lease_epoch: u64,
}

pub async fn section_move(ctx: &Ctx, section: u64, to: u64, count: u64) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let Some(set) =
        config.sets.iter().find(|s| s.sections(config.section_size).contains(SectionId(section)))
    else {
        return Err(CtlError::usage(
            format!("section {section} belongs to no set of the cluster"),
            "`seqctl route` lists each set's sections",
        ));
    };
    let client = store_client(set)?;
    let end = section.saturating_add(count.max(1));
    let request =
        pb::MoveSectionsRequest { section_begin: section, section_end: end, to_alloc_id: to };
    let r = client
        .admin(ctx.deadline().left(), |mut c, timeout| async move {
            let mut request = tonic::Request::new(request);
            request.set_timeout(timeout);
            c.move_sections(request).await
        })
        .await
        .map_err(|status| {
            CtlError::grpc(
                &format!("move sections [{section}, {end}) to alloc {to}"),
                &members_text(set),
                &status,
                ctx.timeout,
            )
        })?;
    let view = Done {
        sentence: format!(
            "set {}: sections [{section}, {end}) assigned to alloc {to} at lease epoch {}; served \
             there once the previous owner's lease has run out",
            set.id, r.lease_epoch
        ),
        facts: Moved {
            set: set.id.0,
            section_begin: section,
            section_end: end,
            to_alloc_id: to,
            lease_epoch: r.lease_epoch,
        },
    };
    render::emit(ctx.json, &view)?;
    Ok(Exit::Ok)
}

#[derive(Debug, Serialize)]
pub struct Drained {
    pub set: u64,
    pub alloc_id: u64,
    pub draining: bool,
}

pub async fn drain(
    ctx: &Ctx,
    alloc_id: u64,
    set: Option<u64>,
    undo: bool,
) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let set = pick_set(&config, set)?;
    let client = store_client(set)?;
    let request = pb::DrainAllocRequest { alloc_id, drain: !undo };
    client
        .admin(ctx.deadline().left(), |mut c, timeout| async move {
            let mut request = tonic::Request::new(request);
            request.set_timeout(timeout);
            c.drain_alloc(request).await
        })
        .await
        .map_err(|status| {
            let what = if undo { "stop draining" } else { "drain" };
            CtlError::grpc(
                &format!("{what} alloc {alloc_id}"),
                &members_text(set),
                &status,
                ctx.timeout,
            )
        })?;
    let sentence = if undo {
        format!("set {}: alloc {alloc_id} may receive sections again", set.id)
    } else {
        format!(
            "set {}: alloc {alloc_id} is draining; its sections move away (`seqctl leases` \
             shows them go)",
            set.id
        )
    };
    let view = Done { sentence, facts: Drained { set: set.id.0, alloc_id, draining: !undo } };
    render::emit(ctx.json, &view)?;
    Ok(Exit::Ok)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::render::assert_table_matches_json;

    pub fn sample_leases() -> Vec<SetLeases> {
        let response = pb::LeasesResponse {
            lease_ms: 3000,
            lease_margin_ms: 300,
            route_version: 12,
            workers: vec![],
            allocs: vec![
                pb::AllocLease {
                    alloc_id: 1,
                    addr: "127.0.0.1:7201".into(),
                    draining: false,
                    replaced: false,
                    released: false,
                    expired: false,
                    identity: "alloc-0-1".into(),
                    ms_since_grant: 120,
                    lease_left_ms: 2880,
                    n_sections: 16384,
                },
                pb::AllocLease {
                    alloc_id: 2,
                    addr: "127.0.0.1:7202".into(),
                    draining: true,
                    replaced: false,
                    released: false,
                    expired: false,
                    identity: String::new(),
                    ms_since_grant: -1,
                    lease_left_ms: 0,
                    n_sections: 0,
                },
            ],
            runs: vec![pb::AssignedRun {
                section_begin: 0,
                section_end: 16384,
                alloc_id: 1,
                lease_epoch: 4,
                settled: true,
            }],
        };
        vec![
            SetLeases::new(0, &response),
            SetLeases::failed(1, "set 1 StoreSvrs 1@127.0.0.1:7111: Unavailable: down".into()),
        ]
    }

    pub fn sample_routes() -> Vec<SetRoute> {
        let table = pb::RouteTable {
            set_id: 0,
            version: 12,
            uid_begin: 0,
            uid_end: 1 << 31,
            section_size: 65536,
            entries: vec![pb::RouteEntry {
                section_begin: 0,
                section_end: 16384,
                alloc_id: 1,
                addr: "127.0.0.1:7201".into(),
            }],
        };
        vec![SetRoute::from_table(&table), SetRoute::failed(1, "no leader".into())]
    }

    #[test]
    fn lease_tables_and_json_carry_the_same_columns_and_values() {
        let sets = sample_leases();
        assert_table_matches_json(&sets);
        assert_table_matches_json(&sets[0].allocs);
        assert_table_matches_json(&sets[0].runs);
        assert_eq!(sets[0].allocs[1].state, "draining");
    }

    #[test]
    fn route_tables_and_json_carry_the_same_columns_and_values() {
        let routes = sample_routes();
        assert_table_matches_json(&routes);
        assert_table_matches_json(&routes[0].entries);
        // The keys scripts and t70 read.
        let json = serde_json::to_value(&routes).unwrap();
        for key in ["set", "version", "entries"] {
            assert!(json[0].get(key).is_some(), "{key}");
        }
        for key in ["section_begin", "section_end", "alloc_id", "addr"] {
            assert!(json[0]["entries"][0].get(key).is_some(), "{key}");
        }
    }

    #[test]
    fn a_set_that_did_not_answer_makes_the_exit_code_partial() {
        assert_eq!(Routes(sample_routes()).exit(), Exit::Refused);
        assert_eq!(Routes(sample_routes()[..1].to_vec()).exit(), Exit::Ok);
        assert_eq!(Routes(sample_routes()[1..].to_vec()).exit(), Exit::NoAnswer);
        assert_eq!(Leases(sample_leases()).exit(), Exit::Refused);
    }
}
