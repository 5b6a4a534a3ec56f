//! One peer of the status page, copied out of its slot with its names.

use healthcheck_core::outlier::{Counters, View};
use healthcheck_core::reason::{Reason, REASONS};
use healthcheck_core::status::{Group, PeerRow, SharedRow};
use healthcheck_core::zone::{admin, Slot, Snapshot};

use crate::ffi::{str_bytes, unix_ms};
use healthcheck_core::ramp::Progress;

fn delay(v: u32) -> i64 {
    if v == u32::MAX {
        -1
    } else {
        i64::from(v)
    }
}

/// One peer as copied out: its slot and everything the page prints. Names
/// are copied too (into the page's names), so a page in progress never points
/// into a configuration that an in-place reload may free.
pub(crate) struct Row {
    pub(super) group: Group,
    index: u32,
    upstream: (u32, u32),
    name: (u32, u32),
    server: (u32, u32),
    backup: bool,
    weight: u32,
    check_type: &'static str,
    port: u16,
    period_ms: u64,
    pub(super) snap: Snapshot,
    /// `check_outlier` counters, for an upstream with it.
    outlier: Option<View>,
    /// A resolved address without a slot (its snapshot says up).
    unchecked: bool,
    /// Failures by reason: the first `nreasons`, those the check type can
    /// produce, are printed.
    reasons: [(&'static str, u64); REASONS],
    nreasons: u8,
    /// The other rows that share its probe (`crate::sharing`).
    pub(crate) shared: Vec<SharedRow>,
    /// Its `slow_start` ramp, while it ramps.
    ramp: Option<Progress>,
}

impl Row {
    /// Copy target `t` of `context` (of `group`): its slot's snapshot, and
    /// its names appended to `names`.
    pub(crate) fn copy(
        group: Group,
        context: &crate::worker::Context,
        t: &crate::target::Target,
        names: &mut Vec<u8>,
    ) -> Row {
        let snap = context
            .zone
            .as_ref()
            .and_then(|z| z.slot(t.index as usize))
            .map(Slot::snapshot)
            .unwrap_or_default();
        let mut name = |bytes: &[u8]| {
            let start = names.len() as u32;
            names.extend_from_slice(bytes);
            (start, names.len() as u32)
        };
        let upstream = name(t.upstream_bytes());
        let peer = name(t.peer.name_bytes());
        let server = name(t.peer.server_bytes());
        let outlier = t
            .check
            .outlier
            .and(context.zone.as_ref())
            .and_then(|z| z.counters(t.index as usize))
            .map(Counters::view);
        let active = t.check.conf.active;
        let kinds = if active {
            t.check.failure_reasons()
        } else {
            &[]
        };
        let mut reasons = [("", 0); REASONS];
        for (slot, r) in reasons.iter_mut().zip(kinds) {
            *slot = (r.name(), snap.failures[r.index()]);
        }
        Row {
            group,
            index: t.index,
            upstream,
            name: peer,
            server,
            backup: t.peer.backup,
            weight: t.peer.weight,
            check_type: if active {
                t.check.conf.check_type.as_str()
            } else {
                "none"
            },
            // A unix-socket server is checked on its own address.
            port: if t.peer.is_unix() {
                0
            } else {
                t.check.conf.port
            },
            period_ms: t.check.conf.period_ms(snap.up),
            ramp: Progress::at(snap.up_since, unix_ms(), t.check.conf.slow_start_ms)
                .filter(|_| snap.up && snap.admin & (admin::DISABLED | admin::EJECTED) == 0),
            snap,
            outlier,
            unchecked: false,
            reasons,
            nreasons: kinds.len() as u8,
            shared: Vec::new(),
        }
    }

    /// A resolved address of `r`'s upstream that found no room: listed
    /// `unchecked`, counted with the up peers (it takes traffic).
    pub(crate) fn unchecked(
        group: Group,
        index: u32,
        r: &crate::resolved::ResolveUps,
        u: &crate::resolved::Unchecked,
        names: &mut Vec<u8>,
    ) -> Row {
        let mut name = |bytes: &[u8]| {
            let start = names.len() as u32;
            names.extend_from_slice(bytes);
            (start, names.len() as u32)
        };
        // SAFETY: the upstream name lives in the cycle pool.
        let upstream = name(unsafe { str_bytes(&r.upstream) });
        let peer = name(&u.name);
        let server = name(&u.server);
        let snap = Snapshot {
            up: true,
            last_delay: u32::MAX,
            min_delay: u32::MAX,
            max_delay: u32::MAX,
            ..Snapshot::default()
        };
        Row {
            group,
            index,
            upstream,
            name: peer,
            server,
            backup: u.backup,
            weight: u.weight,
            check_type: r.check.conf.check_type.as_str(),
            port: r.check.conf.port,
            period_ms: r.check.conf.period_ms(true),
            snap,
            outlier: None,
            ramp: None,
            unchecked: true,
            reasons: [("", 0); REASONS],
            shared: Vec::new(),
            nreasons: 0,
        }
    }

    pub(crate) fn peer<'a>(&'a self, names: &'a [u8]) -> PeerRow<'a> {
        let s = &self.snap;
        let text = |(start, end): (u32, u32)| &names[start as usize..end as usize];
        // An ejected peer is down with reason `outlier`, whatever its check
        // says, since its ejection started.
        let ejected = s.admin & admin::EJECTED != 0 && self.outlier.is_some();
        let up = s.up && !ejected;
        let down_since = if ejected && s.up {
            self.outlier.and_then(|o| o.ejected_at_ms)
        } else {
            (!s.up && s.down_since != 0).then_some(s.down_since)
        };
        PeerRow {
            group: self.group,
            index: self.index,
            upstream: text(self.upstream),
            name: text(self.name),
            server: text(self.server),
            backup: self.backup,
            weight: self.weight,
            disabled: s.disabled(),
            fail_open: s.fail_open != 0,
            unchecked: self.unchecked,
            up,
            rise: s.rise,
            fall: s.fall,
            check_type: self.check_type,
            port: self.port,
            last_delay_ms: delay(s.last_delay),
            avg_delay_ms: s
                .delay_sum
                .checked_div(s.delay_count)
                .map_or(-1, |a| a as i64),
            min_delay_ms: delay(s.min_delay),
            max_delay_ms: delay(s.max_delay),
            checks: s.checks,
            fails_total: s.fails_total,
            failures_by_reason: &self.reasons[..usize::from(self.nreasons)],
            last_failure_reason: if ejected {
                Some("outlier")
            } else {
                s.last_reason().map(Reason::name)
            },
            last_change_ms: s.last_change,
            last_duration_ms: s.last_duration.into(),
            http_status: s.http_status(),
            tls_resumed: matches!(self.check_type, "https" | "tls" | "grpcs")
                .then_some(s.tls_resumed),
            grpc_status: s.grpc_status(),
            period_ms: self.period_ms,
            down_since_ms: down_since,
            duration_buckets: &s.buckets,
            duration_sum_ms: s.duration_sum,
            duration_count: s.buckets.iter().sum(),
            shared_with: &self.shared,
            ejected,
            checking: s.admin & admin::CHECKING != 0,
            outlier: self.outlier,
            draining: s.admin & admin::DRAINING != 0,
            slow_start_ms: self.ramp.map(Progress::left_ms),
            effective_weight_x100: self.ramp.map_or(u64::from(self.weight) * 100, |p| {
                (p.weight(self.weight) * 100.0) as u64
            }),
            connections: (s.admin & admin::DRAINING != 0).then_some(s.conns),
            sessions_shut: s.sessions_shut,
        }
    }
}

/// The other rows that share the probe of `row` (`crate::sharing`).
pub(crate) fn shared_rows(w: &crate::worker::Worker, row: crate::sharing::RowId) -> Vec<SharedRow> {
    w.sharing
        .shared_with(row)
        .into_iter()
        .filter_map(|(group, index)| {
            let t = w.context(group).targets.get(index as usize)?;
            Some(SharedRow {
                group,
                upstream: t.upstream_bytes().to_vec(),
                index,
            })
        })
        .collect()
}
