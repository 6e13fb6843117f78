//! The arbiter of the current leader term (`seqsvr-core::arbiter`): its planning rounds, the
//! grants that answer heartbeats, lease changes, the leases view, and what it learns at apply.

use super::api::{AllocLeaseView, Grant, LeasesView, Reply, RequestError, RouteView};
use super::replies::ProposalReply;
use super::{Driver, PENDING_PROPOSALS_MAX};
use crate::leader_state::SlotChange;
use raft::StateRole;
use seqsvr_core::arbiter::{grant_for, Arbiter, LeaseChangeError, LeaseConfig};
use seqsvr_core::ids::{AllocId, RouteVersion};
use seqsvr_core::store::{Applied, Command, Rejected, SchemeRecord, SetLayout};

impl Driver {
    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// A lease change (seqctl store set-lease): the arbiter decides whether one may be made now.
    pub(super) fn set_lease(&mut self, lease: LeaseConfig, reply: Reply<LeaseConfig>) {
        let now = self.now_ms();
        let term = self.node.raft.term;
        if let Err(e) = self.check_can_serve(self.proposals.len(), PENDING_PROPOSALS_MAX) {
            let _ = reply.send(Err(e));
            return;
        }
        if self.current_arbiter().is_none() {
            let _ = reply.send(Err(RequestError::NotLeader { leader: self.leader_hint() }));
            return;
        }
        let control = self.node.store().state().control();
        let Some(arbiter) = self.arbiter.get_mut_of_term(term) else { return };
        match arbiter.lease_change(now, control, lease) {
            Ok(command) => {
                tracing::info!(?lease, "lease change proposed");
                self.propose(command, ProposalReply::Lease(reply));
            }
            Err(LeaseChangeError::Invalid(e)) => {
                let _ = reply.send(Err(RequestError::Invalid(e.to_string())));
            }
            Err(e @ LeaseChangeError::NotBootstrapped) => {
                let _ = reply.send(Err(RequestError::Dropped(e.to_string())));
            }
            Err(e @ LeaseChangeError::TooSoon { .. }) => {
                let _ = reply.send(Err(RequestError::Precondition(e.to_string())));
            }
        }
    }

    /// The arbiter of the current term while leader (a new one whenever the term changed, even
    /// if this member led the term before: it does not know what the leader in between granted).
    fn current_arbiter(&mut self) -> Option<&mut Arbiter> {
        if self.node.raft.state != StateRole::Leader {
            if self.arbiter.clear() {
                tracing::info!("lost leadership: arbiter stopped");
            }
            return None;
        }
        let now = self.now_ms();
        let lease = self.config.lease;
        let term = self.node.raft.term;
        let control = self.node.store().state().control();
        let wait_ms = control.longest_hold_ms().unwrap_or(lease.hold_ms());
        let (arbiter, change) = self.arbiter.get(term, || Arbiter::new(now, lease));
        match change {
            SlotChange::Kept => {}
            SlotChange::Started => tracing::info!(
                term,
                wait_ms,
                "became leader: arbiter starts; no section moves for one lease"
            ),
            SlotChange::Replaced { old_term } => {
                tracing::info!(
                term, old_term, wait_ms,
                "leader again in a new term: new arbiter (the leader in between may have granted \
                 leases); no section moves for one lease"
            )
            }
        }
        Some(arbiter)
    }

    /// Leader only, every tick: one planning round at a time (of this term: rounds proposed in
    /// an earlier term never hold up this one).
    pub(super) fn arbitrate(&mut self) {
        if self.current_arbiter().is_none() {
            return;
        }
        let now = self.now_ms();
        let term = self.node.raft.term;
        if self.proposals.arbiter_in_flight(term) > 0 {
            return;
        }
        let disputed = self.log_layout_dispute();
        let unrecorded = self.node.store().state().control().layout.is_none();
        let agreed = match self.config.layout {
            Some(ours) if unrecorded && !disputed && self.commands_cover(2) => {
                self.layout_agreed(&ours)
            }
            _ => false,
        };
        let control = self.node.store().state().control();
        let record_layout = (self.config.layout)
            .filter(|_| agreed && control.lease.is_some())
            .map(|layout| Command::RecordLayout { layout });
        let Some(arbiter) = self.arbiter.get_mut_of_term(term) else { return };
        let mut commands = arbiter.plan(now, control, self.config.sections);
        if disputed {
            // No section starts being served by anyone: see `layout_dispute`.
            commands.retain(|c| !matches!(c, Command::Assign { .. } | Command::Settle { .. }));
        }
        // First of the round: the layout every grant of the set is made under.
        commands.splice(0..0, record_layout);
        // Records need version 1: a member of an older build would stop on them. Until the set
        // raises its version, a set is as safe as before the records (a changed split is
        // refused only by the sets that leased under the old one).
        if control.lease.is_some() && self.commands_cover(1) {
            // Every scheme of the config is recorded as soon as the set runs, before anyone
            // leases or reserves: so that every set refuses a later change of a layout, of a
            // session uid range or of the worker split, not only the sets that served the
            // scheme (a set that never leased would take a new share of worker ids that can
            // overlap ids another set still issues).
            let missing: Vec<(String, SchemeRecord)> = self
                .config
                .scheme_records
                .iter()
                .filter(|(name, _)| !control.schemes.contains_key(*name))
                // A new name for a recorded shape stays unrecorded: it is refused (a rename).
                .filter(|(name, _)| self.renamed_from(name).is_none())
                .map(|(name, record)| (name.clone(), record.clone()))
                .collect();
            if !missing.is_empty() {
                commands.push(Command::RecordSchemePools { schemes: missing });
            }
        }
        commands.extend(self.commands_version_raise());
        for command in commands {
            tracing::info!(?command, "arbiter proposes");
            self.propose(command, ProposalReply::Arbiter);
        }
        self.log_changed_schemes();
    }

    /// Whether every member lately reported `ours` as its file's layout: the record is made
    /// only then. Never while a membership change is pending: a member being added is not in
    /// the applied configuration yet, so it would not be waited for (as
    /// `commands_version_raise`).
    fn layout_agreed(&self, ours: &SetLayout) -> bool {
        !self.node.raft.has_pending_conf()
            && self.members_with_another_layout(ours, std::time::Instant::now()).is_empty()
    }

    /// Leader only, while the set has recorded no layout: the members that lately reported a
    /// cluster file mapping uids otherwise than this leader's, with their layouts. Empty once a
    /// layout is recorded (a member whose file differs then stops: `ready.rs`), and for a
    /// member that reported nothing lately or runs a build that reports none: unknown is not
    /// a disagreement (an older build must not stop its set's failover during an upgrade).
    ///
    /// While this is not empty the arbiter makes no section servable by anyone: no `Assign`
    /// (orphans, rebalancing, `seqctl store move`) and no `Settle`. The files disagree, so two
    /// leaders in turn would each grant under their own file; a uid served from section `s_Y`
    /// under one could be served from `s_X`, with a lower `max_seq`, under the other (I1).
    /// Current holders keep renewing what they hold: every AllocSvr checks the grant's layout
    /// (this leader's file, until recorded) against its own file on every heartbeat and stops
    /// on a difference, so a holder that renews maps uids as this leader does, and takes what
    /// it holds no further. Stopping renewals too would take the whole set down and prevent
    /// nothing more.
    pub(super) fn layout_dispute(&self) -> Vec<(u64, SetLayout)> {
        let Some(ours) = self.config.layout else { return Vec::new() };
        if self.node.store().state().control().layout.is_some() {
            return Vec::new();
        }
        (self.members_with_another_layout(&ours, std::time::Instant::now()).into_iter())
            .filter_map(|(m, reported)| Some((m, reported?)))
            .collect()
    }

    /// Whether the set's layout is disputed ([`Self::layout_dispute`]); logged once per change
    /// of who disputes it and how, and once when the dispute is over.
    fn log_layout_dispute(&mut self) -> bool {
        let differing = describe_dispute(&self.layout_dispute());
        if differing.is_empty() {
            if self.layout_wait_logged.take().is_some() {
                tracing::info!(
                    "every member that reports a layout reports this leader's: \
                    sections are assigned again"
                );
            }
            return false;
        }
        if self.layout_wait_logged.as_ref() != Some(&differing) {
            let ours = self.config.layout.map(|l| l.to_string()).unwrap_or_default();
            tracing::error!(%ours, ?differing,
                "members' cluster files map uids otherwise than this leader's: no section is \
                 assigned or settled, and the set's layout is not recorded, until every \
                 member's file agrees (fix the files; values served under two layouts could \
                 repeat). AllocSvrs keep what they hold while their files agree with this \
                 leader's");
            self.layout_wait_logged = Some(differing);
        }
        true
    }

    /// The recorded scheme that `scheme` of this member's config would issue the ids of: one
    /// of the same shape (`seqsvr_core::idscheme::shape_of_fingerprint`: bit fields, epochs and
    /// session ranges aside) recorded under another name. Its worker ids and session marks are
    /// kept under the old name, so the new name would start below them and reissue its ids.
    pub(super) fn renamed_from(&self, scheme: &str) -> Option<String> {
        use seqsvr_core::idscheme::shape_of_fingerprint;
        let control = self.node.store().state().control();
        if control.schemes.contains_key(scheme) {
            return None;
        }
        let ours = shape_of_fingerprint(&self.config.scheme_records.get(scheme)?.layout);
        (control.schemes.iter())
            .find(|(name, r)| *name != scheme && shape_of_fingerprint(&r.layout) == ours)
            .map(|(name, _)| name.clone())
    }

    /// Refuses `scheme` if it is a new name for a recorded scheme ([`Self::renamed_from`]).
    pub(super) fn check_not_renamed(&self, scheme: &str) -> Result<(), RequestError> {
        match self.renamed_from(scheme) {
            None => Ok(()),
            Some(old) => Err(RequestError::Invalid(format!(
                "id scheme {scheme:?} has the layout this set recorded for scheme {old:?}: a \
                 renamed scheme would start below {old:?}'s worker-id marks and session marks \
                 and reissue its ids; serve it under its recorded name {old:?}"
            ))),
        }
    }

    /// Logs, once per scheme, a config whose scheme differs from what the set recorded: every
    /// lease and reservation under it is refused, and the operator should know why at once.
    fn log_changed_schemes(&mut self) {
        let control = self.node.store().state().control();
        let changed: Vec<(String, String, String)> = self
            .config
            .scheme_records
            .iter()
            .filter(|(name, _)| !self.changed_schemes_logged.contains(*name))
            .filter_map(|(name, ours)| {
                let recorded = control.schemes.get(name).filter(|r| *r != ours)?;
                Some((name.clone(), recorded.describe(), ours.describe()))
            })
            .collect();
        let renamed: Vec<(String, String)> = (self.config.scheme_records.keys())
            .filter(|name| !self.changed_schemes_logged.contains(*name))
            .filter_map(|name| Some((name.clone(), self.renamed_from(name)?)))
            .collect();
        for (name, old) in renamed {
            tracing::error!(scheme = %name, recorded_as = %old,
                "id scheme {name:?} of this member's cluster config has the layout this set \
                 recorded for scheme {old:?} (a rename): its worker leases and time \
                 reservations are refused, as they would reissue {old:?}'s ids; serve it under \
                 its recorded name");
            self.changed_schemes_logged.insert(name);
        }
        for (name, recorded, ours) in changed {
            tracing::error!(scheme = %name, %recorded, config = %ours,
                "this set recorded id scheme {name:?} differently from this member's cluster \
                 config: its worker leases and time reservations are refused; restore the \
                 recorded layout and split, or serve the new one under a new scheme name");
            self.changed_schemes_logged.insert(name);
        }
    }

    /// Answers a heartbeat: leadership was confirmed by ReadIndex after it arrived.
    pub(super) fn grant(
        &mut self,
        alloc: AllocId,
        route_version: RouteVersion,
        identity: Option<&str>,
    ) -> Result<Grant, RequestError> {
        let now = self.now_ms();
        if self.current_arbiter().is_none() {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        }
        let term = self.node.raft.term;
        let control = self.node.store().state().control();
        let Some(arbiter) = self.arbiter.get_mut_of_term(term) else {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        };
        // After the ReadIndex this member has applied every registration committed before the
        // heartbeat arrived: an unknown alloc is really unknown.
        if !control.allocs.contains_key(&alloc) {
            return Err(RequestError::UnknownAlloc(alloc));
        }
        control.check_holder(alloc, identity).map_err(RequestError::NotTheHolder)?;
        let Some(lease) = control.lease else {
            return Err(RequestError::Dropped(
                "this set's lease timing is not committed yet (a new leader is committing it)"
                    .into(),
            ));
        };
        if !arbiter.may_grant(control, alloc) {
            return Err(RequestError::AllocExpired(alloc));
        }
        arbiter.on_granted(alloc, now);
        let route = (route_version < control.route_version).then(|| RouteView {
            version: control.route_version,
            entries: control.route_entries(),
        });
        let workers = control
            .workers_of(alloc)
            .map(|(s, w, r)| (s.to_string(), w, r.high_water_ms))
            .collect();
        // The record when there is one (a leader whose file differs has stopped), else our
        // file, as the route table's split is.
        let layout = (control.layout.map(|l| (l, true))).or(self.config.layout.map(|l| (l, false)));
        Ok(Grant { runs: grant_for(control, alloc), lease, route, workers, layout })
    }

    /// Whether `alloc` may lease a worker id now: this member leads and its arbiter would grant
    /// `alloc` a lease (never to one it found dead: that one's worker ids are being freed).
    pub(super) fn check_may_lease_worker(&mut self, alloc: AllocId) -> Result<(), RequestError> {
        if self.current_arbiter().is_none() {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        }
        let term = self.node.raft.term;
        let control = self.node.store().state().control();
        let Some(arbiter) = self.arbiter.get_mut_of_term(term) else {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        };
        if arbiter.may_grant(control, alloc) {
            Ok(())
        } else {
            Err(RequestError::AllocExpired(alloc))
        }
    }

    pub(super) fn leases(&self) -> Result<LeasesView, RequestError> {
        let leader = self.node.raft.state == StateRole::Leader;
        let Some(arbiter) = self.arbiter.of_term(self.node.raft.term).filter(|_| leader) else {
            return Err(RequestError::NotLeader { leader: self.leader_hint() });
        };
        let now = self.now_ms();
        let control = self.node.store().state().control();
        let load = control.assignment.load();
        let lease = control.lease.unwrap_or(self.config.lease);
        let allocs = control
            .allocs
            .iter()
            .map(|(&id, r)| {
                let last = arbiter.last_grant_ms(id);
                AllocLeaseView {
                    alloc: id,
                    addr: r.addr.clone(),
                    draining: r.draining,
                    replaced: r.replaced,
                    released: r.released,
                    identity: r.identity.clone(),
                    expired: arbiter.is_expired(id),
                    ms_since_grant: last.map(|t| now.saturating_sub(t)),
                    lease_left_ms: last.map_or(0, |t| (t + lease.lease_ms).saturating_sub(now)),
                    n_sections: load.get(&id).copied().unwrap_or(0),
                }
            })
            .collect();
        Ok(LeasesView {
            lease,
            allocs,
            runs: control.assignment.runs().collect(),
            route_version: control.route_version,
            workers: control
                .workers
                .iter()
                .flat_map(|(scheme, ws)| {
                    ws.iter().map(move |(&w, r)| (scheme.clone(), w, r.holder, r.high_water_ms))
                })
                .collect(),
        })
    }

    /// The leader's arbiter learns what applied: fences start at apply time.
    pub(super) fn tell_arbiter(&mut self, command: &Command, result: &Result<Applied, Rejected>) {
        let now = self.now_ms();
        let term = self.node.raft.term;
        let Some(arbiter) = self.arbiter.get_mut_of_term(term) else { return };
        match (command, result) {
            (Command::Assign { settled, moves }, Ok(Applied::Assigned { lease_epoch })) => {
                tracing::info!(lease_epoch = lease_epoch.0, settled, ?moves, "sections assigned");
                arbiter.on_assigned(*lease_epoch, *settled, now);
            }
            (Command::SetLease { lease, .. }, Ok(Applied::LeaseChanged { lease_changes })) => {
                tracing::info!(?lease, lease_changes, "lease timing changed (replicated)");
                arbiter.on_lease_changed(now);
            }
            (Command::RemoveAlloc { alloc }, Ok(_)) => {
                tracing::info!(%alloc, "alloc registration removed");
                arbiter.forget(*alloc);
            }
            (Command::RegisterAlloc { addr, identity }, Ok(Applied::Registered(id))) => {
                tracing::info!(alloc = %id, %addr, ?identity, "alloc registered");
            }
            _ => {}
        }
    }
}

/// A layout dispute ([`Driver::layout_dispute`]) as logs and refusals name it.
pub(super) fn describe_dispute(dispute: &[(u64, SetLayout)]) -> Vec<String> {
    dispute.iter().map(|(m, l)| format!("member {m}: {l}")).collect()
}
