//! StoreSvr (Raft group) commands: member status, section reads and raises, leadership and
//! membership changes, the replicated lease timing.

use crate::ctx::{members_text, pick_set, store_client, Ctx, Deadline};
use crate::error::{describe, one_line, partial, CtlError, Exit};
use crate::render::{self, opt, opt_list, Done, Row, View};
use futures::future::join_all;
use seqsvr_client::store::member_status;
use seqsvr_core::config::{ClusterConfig, SetConfig};
use seqsvr_core::ids::{NodeId, SectionId};
use seqsvr_proto::v1 as pb;
use serde::Serialize;
use std::collections::BTreeSet;
use tabled::Tabled;

/// One store member as it sees itself, plus what its set's leader makes of it.
#[derive(Debug, Clone, Serialize, Tabled)]
#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
pub struct StoreMemberRow {
    pub set: u64,
    pub id: u64,
    pub addr: String,
    /// leader, follower, candidate, pre_candidate; `unreachable` when it did not answer.
    pub role: String,
    /// The leader's membership: voter, learner or removed (null without an answering leader).
    #[tabled(display = "opt")]
    pub member: Option<String>,
    #[tabled(display = "opt")]
    pub term: Option<u64>,
    #[tabled(display = "opt")]
    pub leader_id: Option<u64>,
    #[tabled(display = "opt")]
    pub commit_index: Option<u64>,
    #[tabled(display = "opt")]
    pub applied_index: Option<u64>,
    #[tabled(display = "opt")]
    pub snapshot_index: Option<u64>,
    /// How far behind the leader's commit index (the leader's view).
    #[tabled(display = "opt")]
    pub lag: Option<u64>,
    #[tabled(display = "opt_list")]
    pub voters: Option<Vec<u64>>,
    #[tabled(display = "opt_list")]
    pub learners: Option<Vec<u64>>,
    /// Started empty in an existing set: votes only once a membership change made it a voter.
    #[tabled(display = "opt")]
    pub vote_blocked: Option<bool>,
    /// The set's commands version as this member applied it, and the one its build applies
    /// (0: a build before the version gate). A rolling upgrade is done when all are equal.
    #[tabled(display = "opt")]
    pub commands_version: Option<u32>,
    #[tabled(display = "opt")]
    pub build_commands_version: Option<u32>,
    /// Why it is unreachable.
    #[tabled(display = "opt")]
    pub error: Option<String>,
    #[tabled(skip)]
    pub first_index: Option<u64>,
    #[tabled(skip)]
    pub last_index: Option<u64>,
    #[tabled(skip)]
    pub section_begin: Option<u64>,
    #[tabled(skip)]
    pub section_end: Option<u64>,
    #[tabled(skip)]
    pub n_sections_advanced: Option<u64>,
    #[tabled(skip)]
    pub lease_ms: Option<u64>,
    #[tabled(skip)]
    pub lease_margin_ms: Option<u64>,
    /// The replicated membership as this member knows it.
    #[tabled(skip)]
    pub members: Option<Vec<MemberRow>>,
    /// The set's recorded layout (`section_size 100000, uids [0, 2147500000)`); absent until
    /// recorded.
    #[tabled(skip)]
    pub recorded_layout: Option<String>,
}

impl Row for StoreMemberRow {
    const JSON_ONLY: &'static [&'static str] = &[
        "first_index",
        "last_index",
        "section_begin",
        "section_end",
        "n_sections_advanced",
        "lease_ms",
        "lease_margin_ms",
        "members",
        "recorded_layout",
    ];
}

impl StoreMemberRow {
    pub fn answered(set: u64, id: u64, addr: &str, s: &pb::StoreStatusResponse) -> StoreMemberRow {
        StoreMemberRow {
            set,
            id,
            addr: addr.to_string(),
            role: s.role.clone(),
            member: None,
            term: Some(s.term),
            leader_id: Some(s.leader_id),
            commit_index: Some(s.commit_index),
            applied_index: Some(s.applied_index),
            snapshot_index: Some(s.snapshot_index),
            lag: None,
            voters: Some(s.voters.clone()),
            learners: Some(s.learners.clone()),
            vote_blocked: Some(s.vote_blocked),
            commands_version: Some(s.commands_version),
            build_commands_version: Some(s.build_commands_version),
            error: None,
            first_index: Some(s.first_index),
            last_index: Some(s.last_index),
            section_begin: Some(s.section_begin),
            section_end: Some(s.section_end),
            n_sections_advanced: Some(s.n_sections_advanced),
            lease_ms: Some(s.lease_ms),
            lease_margin_ms: Some(s.lease_margin_ms),
            members: Some(s.members.iter().map(MemberRow::from).collect()),
            recorded_layout: s.recorded_layout.as_ref().map(|l| {
                let layout = seqsvr_core::store::SetLayout {
                    section_size: l.section_size,
                    uid_begin: l.uid_begin,
                    uid_end: l.uid_end,
                };
                layout.to_string()
            }),
        }
    }

    pub fn unreachable(set: u64, id: u64, addr: &str, error: &str) -> StoreMemberRow {
        StoreMemberRow {
            set,
            id,
            addr: addr.to_string(),
            role: UNREACHABLE.to_string(),
            member: None,
            term: None,
            leader_id: None,
            commit_index: None,
            applied_index: None,
            snapshot_index: None,
            lag: None,
            voters: None,
            learners: None,
            vote_blocked: None,
            commands_version: None,
            build_commands_version: None,
            error: Some(one_line(error)),
            first_index: None,
            last_index: None,
            section_begin: None,
            section_end: None,
            n_sections_advanced: None,
            lease_ms: None,
            lease_margin_ms: None,
            members: None,
            recorded_layout: None,
        }
    }

    pub fn is_unreachable(&self) -> bool {
        self.role == UNREACHABLE
    }
}

pub const UNREACHABLE: &str = "unreachable";

/// A member of the replicated membership (`match_index` and `lag` from the leader only).
#[derive(Debug, Clone, Serialize, Tabled)]
#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
pub struct MemberRow {
    pub id: u64,
    pub addr: String,
    pub learner: bool,
    pub match_index: u64,
    pub lag: u64,
}

impl Row for MemberRow {}

impl From<&pb::MemberInfo> for MemberRow {
    fn from(m: &pb::MemberInfo) -> MemberRow {
        MemberRow {
            id: m.id,
            addr: m.addr.clone(),
            learner: m.learner,
            match_index: m.match_index,
            lag: m.lag,
        }
    }
}

/// `store status`: the rows, and a note under the table when a member is vote-blocked.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct StoreStatus(pub Vec<StoreMemberRow>);

impl View for StoreStatus {
    fn text(&self) -> String {
        let mut text = render::table(&self.0);
        if self.0.iter().any(|r| r.vote_blocked == Some(true)) {
            text.push_str(VOTE_BLOCKED_NOTE);
        }
        if self.0.iter().any(StoreMemberRow::awaits_commands_version) {
            text.push_str(COMMANDS_VERSION_NOTE);
        }
        text
    }
}

impl StoreMemberRow {
    /// Its build applies a higher commands version than its set runs: a rolling upgrade is
    /// under way (or a member is down or of an older build, which holds the raise back).
    pub fn awaits_commands_version(&self) -> bool {
        matches!((self.commands_version, self.build_commands_version), (Some(set), Some(build)) if set < build)
    }
}

pub const COMMANDS_VERSION_NOTE: &str =
    "COMMANDS_VERSION below BUILD_COMMANDS_VERSION: the set holds back \
    the commands of the newer version until every member runs a build that applies them and was \
    heard from; the leader then raises it by itself (its log names the members it waits for)\n";

pub const VOTE_BLOCKED_NOTE: &str = "VOTE_BLOCKED true: started empty in an existing set; it \
    votes only once a membership change applied from its log made it a voter (add-learner, then \
    promote)\n";

impl StoreStatus {
    /// 0 when every member answered, 2 when none did, 1 in between.
    /// `N of M store members did not answer (...)`, for stderr.
    pub fn summary(&self) -> String {
        let down: Vec<String> = self
            .0
            .iter()
            .filter(|r| r.is_unreachable())
            .map(|r| format!("set {} member {} at {}", r.set, r.id, r.addr))
            .collect();
        format!(
            "{} of {} store members did not answer: {} (ERROR column)",
            down.len(),
            self.0.len(),
            down.join(", ")
        )
    }

    pub fn exit(&self) -> Exit {
        let down = self.0.iter().filter(|r| r.is_unreachable()).count();
        match down {
            0 => Exit::Ok,
            n if n == self.0.len() => Exit::NoAnswer,
            _ => Exit::Refused,
        }
    }
}

/// Every store member's own status; unreachable members get role `unreachable`. Members are the
/// cluster file's plus any the replicated membership names (added later), asked concurrently in
/// rounds until no new one turns up; `member` says what the leader's membership makes of each
/// (voter, learner, or `removed`), with its lag.
pub async fn store_rows(config: &ClusterConfig, deadline: Deadline) -> Vec<StoreMemberRow> {
    let sets = join_all(config.sets.iter().map(|set| set_rows(set, deadline))).await;
    sets.into_iter().flatten().collect()
}

async fn set_rows(set: &SetConfig, deadline: Deadline) -> Vec<StoreMemberRow> {
    let mut queue: Vec<(u64, String)> =
        set.stores.iter().map(|m| (m.id.0, m.addr.clone())).collect();
    let mut asked = BTreeSet::new();
    let mut rows = Vec::new();
    let mut leader_view: Option<Vec<pb::MemberInfo>> = None;
    while !queue.is_empty() {
        let round: Vec<(u64, String)> =
            queue.drain(..).filter(|(id, _)| asked.insert(*id)).collect();
        let answers = join_all(round.iter().map(|(_, addr)| async move {
            let left = deadline.left();
            if left.is_zero() {
                return Err(tonic::Status::deadline_exceeded(format!(
                    "not asked: --timeout-ms {} ran out",
                    deadline.total().as_millis()
                )));
            }
            member_status(addr, left).await
        }))
        .await;
        for ((id, addr), answer) in round.into_iter().zip(answers) {
            let row = match answer {
                Ok(s) => {
                    for m in &s.members {
                        if !asked.contains(&m.id) && !m.addr.is_empty() {
                            queue.push((m.id, m.addr.clone()));
                        }
                    }
                    if s.role == "leader" {
                        leader_view = Some(s.members.clone());
                    }
                    StoreMemberRow::answered(set.id.0, id, &addr, &s)
                }
                Err(status) => StoreMemberRow::unreachable(
                    set.id.0,
                    id,
                    &addr,
                    &describe(&status, deadline.total()),
                ),
            };
            rows.push(row);
        }
    }
    if let Some(view) = &leader_view {
        for row in &mut rows {
            let (member, lag) = match view.iter().find(|m| m.id == row.id) {
                Some(m) if m.learner => ("learner", Some(m.lag)),
                Some(m) => ("voter", Some(m.lag)),
                None => ("removed", None),
            };
            row.member = Some(member.to_string());
            row.lag = lag;
        }
    }
    rows.sort_by_key(|r| r.id);
    rows
}

pub async fn status(ctx: &Ctx) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let view = StoreStatus(store_rows(&config, ctx.deadline()).await);
    render::emit(ctx.json, &view)?;
    partial(view.exit(), view.summary(), ctx.timeout)
}

/// `SECTION MAX_SEQ` per line (`--json`: `[{"section": S, "max_seq": V}, ...]`).
#[derive(Debug, Serialize)]
pub struct SectionValue {
    pub section: u64,
    pub max_seq: u64,
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct SectionValues(pub Vec<SectionValue>);

impl View for SectionValues {
    fn text(&self) -> String {
        self.0.iter().map(|v| format!("{} {}\n", v.section, v.max_seq)).collect()
    }
}

pub async fn get(ctx: &Ctx, set: Option<u64>, sections: Vec<u64>) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let set = pick_set(&config, set)?;
    let client = store_client(set)?;
    let ids: Vec<SectionId> = sections.into_iter().map(SectionId).collect();
    let values = client.get(&ids, ctx.deadline().left()).await.map_err(|status| {
        CtlError::grpc("read sections' max_seq", &members_text(set), &status, ctx.timeout)
    })?;
    let view = SectionValues(
        values.into_iter().map(|(s, v)| SectionValue { section: s.0, max_seq: v }).collect(),
    );
    render::emit(ctx.json, &view)?;
    Ok(Exit::Ok)
}

pub async fn advance(
    ctx: &Ctx,
    set: Option<u64>,
    sections: Vec<(u64, u64)>,
) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let set = pick_set(&config, set)?;
    let client = store_client(set)?;
    let wanted: Vec<(SectionId, u64)> =
        sections.into_iter().map(|(s, v)| (SectionId(s), v)).collect();
    let values = client.advance(&wanted, ctx.deadline().left()).await.map_err(|status| {
        CtlError::grpc("raise sections' max_seq", &members_text(set), &status, ctx.timeout)
    })?;
    let view = SectionValues(
        values.into_iter().map(|(s, v)| SectionValue { section: s.0, max_seq: v }).collect(),
    );
    render::emit(ctx.json, &view)?;
    Ok(Exit::Ok)
}

#[derive(Debug, Serialize)]
pub struct TransferLeader {
    pub set: u64,
    pub target_id: u64,
}

pub async fn transfer_leader(ctx: &Ctx, set: Option<u64>, to: u64) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let set = pick_set(&config, set)?;
    let client = store_client(set)?;
    client.transfer_leader(NodeId(to), ctx.deadline().left()).await.map_err(|status| {
        CtlError::grpc(
            &format!("ask the leader to transfer leadership to member {to}"),
            &members_text(set),
            &status,
            ctx.timeout,
        )
    })?;
    let view = Done {
        sentence: format!(
            "set {}: asked the leader to transfer leadership to member {to} (`seqctl store \
             status` shows when it has)",
            set.id
        ),
        facts: TransferLeader { set: set.id.0, target_id: to },
    };
    render::emit(ctx.json, &view)?;
    Ok(Exit::Ok)
}

/// The membership after a change.
#[derive(Debug, Serialize)]
pub struct Membership {
    pub set: u64,
    pub change: String,
    pub applied_index: u64,
    pub members: Vec<MemberRow>,
}

impl View for Membership {
    fn text(&self) -> String {
        format!(
            "set {}: {} (applied at index {})\n{}",
            self.set,
            self.change,
            self.applied_index,
            render::table(&self.members)
        )
    }
}

pub enum MembershipChange {
    AddLearner { id: u64, addr: String },
    Promote { id: u64 },
    Remove { id: u64 },
}

pub async fn membership(
    ctx: &Ctx,
    set: Option<u64>,
    change: MembershipChange,
) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let set = pick_set(&config, set)?;
    let client = store_client(set)?;
    let left = ctx.deadline().left();
    let (asked, done, result) = match &change {
        MembershipChange::AddLearner { id, addr } => (
            format!("add member {id} at {addr} as a learner"),
            format!("member {id} at {addr} added as a learner"),
            client.add_learner(NodeId(*id), addr, left).await,
        ),
        MembershipChange::Promote { id } => (
            format!("promote learner {id} to voter"),
            format!("member {id} promoted to voter"),
            client.promote(NodeId(*id), left).await,
        ),
        MembershipChange::Remove { id } => (
            format!("remove member {id}"),
            format!("member {id} removed"),
            client.remove(NodeId(*id), left).await,
        ),
    };
    let response = result
        .map_err(|status| CtlError::grpc(&asked, &members_text(set), &status, ctx.timeout))?;
    let view = Membership {
        set: set.id.0,
        change: done,
        applied_index: response.applied_index,
        members: response.members.iter().map(MemberRow::from).collect(),
    };
    render::emit(ctx.json, &view)?;
    Ok(Exit::Ok)
}

#[derive(Debug, Serialize)]
pub struct LeaseTiming {
    pub set: u64,
    pub lease_ms: u64,
    pub lease_margin_ms: u64,
}

pub async fn set_lease(
    ctx: &Ctx,
    set: Option<u64>,
    lease_ms: u64,
    margin_ms: u64,
) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let set = pick_set(&config, set)?;
    let client = store_client(set)?;
    let r =
        client.set_lease(lease_ms, margin_ms, ctx.deadline().left()).await.map_err(|status| {
            CtlError::grpc(
                &format!("set the lease to {lease_ms} ms, margin {margin_ms} ms"),
                &members_text(set),
                &status,
                ctx.timeout,
            )
        })?;
    let view = Done {
        sentence: format!(
            "set {}: lease {} ms, margin {} ms (replicated; every leader uses it)",
            set.id, r.lease_ms, r.lease_margin_ms
        ),
        facts: LeaseTiming {
            set: set.id.0,
            lease_ms: r.lease_ms,
            lease_margin_ms: r.lease_margin_ms,
        },
    };
    render::emit(ctx.json, &view)?;
    Ok(Exit::Ok)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::render::assert_table_matches_json;

    pub fn leader_status() -> pb::StoreStatusResponse {
        pb::StoreStatusResponse {
            set_id: 0,
            id: 1,
            addr: "127.0.0.1:7101".into(),
            role: "leader".into(),
            term: 3,
            leader_id: 1,
            leader_addr: "127.0.0.1:7101".into(),
            commit_index: 120,
            applied_index: 119,
            first_index: 100,
            last_index: 120,
            snapshot_index: 99,
            voters: vec![1, 2, 3],
            learners: vec![4],
            section_begin: 0,
            section_end: 32768,
            n_sections_advanced: 7,
            members: vec![
                pb::MemberInfo {
                    id: 1,
                    addr: "127.0.0.1:7101".into(),
                    learner: false,
                    match_index: 120,
                    lag: 0,
                },
                pb::MemberInfo {
                    id: 4,
                    addr: "127.0.0.1:7104".into(),
                    learner: true,
                    match_index: 90,
                    lag: 30,
                },
            ],
            vote_blocked: false,
            lease_ms: 3000,
            lease_margin_ms: 300,
            commands_version: 2,
            build_commands_version: 2,
            recorded_layout: Some(pb::SetLayout {
                section_size: 100_000,
                uid_begin: 0,
                uid_end: 3_276_800_000,
            }),
        }
    }

    pub fn sample_rows() -> Vec<StoreMemberRow> {
        let mut leader = StoreMemberRow::answered(0, 1, "127.0.0.1:7101", &leader_status());
        leader.member = Some("voter".into());
        leader.lag = Some(0);
        let down = StoreMemberRow::unreachable(
            0,
            2,
            "127.0.0.1:7102",
            "tcp connect error: Connection refused (os error 111)\n  caused by",
        );
        vec![leader, down]
    }

    #[test]
    fn store_status_table_and_json_carry_the_same_columns_and_values() {
        assert_table_matches_json(&sample_rows());
        assert_table_matches_json(&sample_rows()[0].members.clone().unwrap());
    }

    #[test]
    fn store_status_json_keeps_its_stable_keys() {
        // The keys scripts and the cluster tests read (t10, t91).
        let json = serde_json::to_value(sample_rows()).unwrap();
        for row in json.as_array().unwrap() {
            for key in [
                "set",
                "id",
                "addr",
                "role",
                "term",
                "leader_id",
                "commit_index",
                "applied_index",
                "vote_blocked",
                "members",
            ] {
                assert!(row.get(key).is_some(), "{key} missing in {row}");
            }
        }
        assert_eq!(json[0]["members"][1]["learner"], true);
        assert_eq!(json[0]["members"][1]["match_index"], 90);
        assert_eq!(json[1]["role"], "unreachable");
        assert_eq!(json[1]["term"], serde_json::Value::Null);
        assert_eq!(
            json[1]["error"], "tcp connect error: Connection refused (os error 111) caused by",
            "one line"
        );
    }

    #[test]
    fn store_status_exit_code_counts_unreachable_members() {
        let rows = sample_rows();
        assert_eq!(StoreStatus(rows[..1].to_vec()).exit(), Exit::Ok);
        assert_eq!(StoreStatus(rows.clone()).exit(), Exit::Refused);
        assert_eq!(StoreStatus(rows[1..].to_vec()).exit(), Exit::NoAnswer);
    }

    #[test]
    fn a_set_below_its_builds_commands_version_gets_a_note() {
        let mut rows = sample_rows();
        assert!(!StoreStatus(rows.clone()).text().contains("COMMANDS_VERSION below"));
        rows[0].commands_version = Some(0);
        assert!(StoreStatus(rows).text().ends_with(COMMANDS_VERSION_NOTE));
    }

    #[test]
    fn a_vote_blocked_member_gets_a_note() {
        let mut rows = sample_rows();
        assert!(!StoreStatus(rows.clone()).text().contains("VOTE_BLOCKED true:"));
        rows[0].vote_blocked = Some(true);
        assert!(StoreStatus(rows).text().ends_with(VOTE_BLOCKED_NOTE));
    }

    #[test]
    fn an_action_prints_a_sentence_and_its_facts_as_json() {
        let view = Done {
            sentence: "set 0: asked".into(),
            facts: TransferLeader { set: 0, target_id: 3 },
        };
        assert_eq!(view.text(), "set 0: asked\n");
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            serde_json::json!({"set": 0, "target_id": 3})
        );
        assert_eq!(crate::render::list(&[1, 2]), "1,2");
    }
}
