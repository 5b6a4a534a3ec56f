//! Prometheus text exposition format 0.0.4.
//!
//! Families (each with one `# HELP` and one `# TYPE`, samples contiguous):
//!
//! | metric | type | labels | page |
//! |---|---|---|---|
//! | `nginx_upstream_count_total` | untyped (a gauge by meaning) | | both |
//! | `nginx_upstream_count_up` | gauge | | both |
//! | `nginx_upstream_count_down` | gauge | | both |
//! | `nginx_upstream_count_generation` | gauge | | both |
//! | `nginx_upstream_peers_up` | gauge | upstream | both |
//! | `nginx_upstream_fail_open` | gauge (1 failing open) | upstream | both |
//! | `nginx_upstream_server_rise` | gauge | peer | full |
//! | `nginx_upstream_server_fall` | gauge | peer | full |
//! | `nginx_upstream_server_active` | gauge (1 up, 0 down) | peer | both |
//! | `nginx_upstream_server_checks_total` | counter | peer | both |
//! | `nginx_upstream_server_check_failures_total` | counter | peer, `reason` | both |
//! | `nginx_upstream_server_last_change_timestamp_seconds` | gauge (0 = never) | peer | full |
//! | `nginx_upstream_server_check_last_duration_seconds` | gauge | peer | both |
//! | `nginx_upstream_server_http_status` | gauge (0 = none yet) | peer | full, `http`/`https` peers only |
//! | `nginx_upstream_server_grpc_status` | gauge (-1 = none yet) | peer | full, `grpc`/`grpcs` peers only |
//! | `nginx_upstream_server_check_tls_resumed_total` | counter | peer | both, `https`/`tls`/`grpcs` peers only |
//! | `nginx_upstream_server_ejections_total` | counter | peer | full, `check_outlier` peers only |
//! | `nginx_upstream_server_ejected` | gauge (1 ejected, 0 not) | peer | full, `check_outlier` peers only |
//! | `nginx_upstream_server_outlier_requests_total` | counter | peer | full, `check_outlier` peers only |
//! | `nginx_upstream_server_outlier_failures_total` | counter | peer | full, `check_outlier` peers only |
//! | `nginx_upstream_server_effective_weight` | gauge | peer | full |
//! | `nginx_upstream_server_slow_start_remaining_seconds` | gauge (0 = not ramping) | peer | full |
//! | `nginx_upstream_server_draining` | gauge (1 draining, 0 not) | peer | full |
//! | `nginx_upstream_server_sessions_shut_total` | counter | peer | full |
//! | `nginx_upstream_server_check_duration_seconds` | histogram | peer (+ `le`) | full |
//!
//! The default page carries the families marked "both"; the full page
//! (`?histogram=on`, or `histogram=on` on the directive) all of them.
//! `check_failures_total` has one series per reason the peer's check type
//! can produce (the caller passes those in [`PeerRow::failures_by_reason`]),
//! so a tcp peer costs 3 + 6 = 9 series and a udp peer 3 + 1 = 4 on the
//! default page.
//!
//! `http_status` is the last HTTP status code the peer's check got
//! ([`PeerRow::http_status`], `0` before the first). Only peers whose
//! `type` is `http` or `https` have the series, from the first scrape on
//! (a peer's type never changes, so neither does its set of series); other
//! check types never get an HTTP status, and no series stands for them.
//! The family's `# HELP` and `# TYPE` come with its first sample, so a page
//! without such a peer carries no empty family.
//!
//! The `check_outlier` families ([`PeerRow::outlier`]) exist only for the
//! peers of an upstream with `check_outlier`, on the full page, and like
//! `http_status` are left out of a page with no such printed peer:
//! ejections since the peer was configured, whether it is ejected now, and
//! the proxied attempts and failures `check_outlier` counted.
//!
//! The upstream families have one series per upstream, labelled
//! `upstream_type` and `upstream`, over all its peers whatever `?status=`
//! prints (as [`super::UpstreamSummary`]); `peers_up` counts the peers
//! whose check says up.
//!
//! The peer labels are the C module's `index`, `upstream_type` (`http` or
//! `stream`), `upstream`, `name`, `type`, `port`, then `server` (the
//! `server` line as written) when it is not the address itself: a server
//! written as `10.0.0.1:80` would only repeat `name` on every series (26
//! bytes a line, 9 lines a peer), so its series have no `server` label
//! (PromQL reads a missing label as `""`). `upstream_type` + `index`
//! identify a peer, so series stay unique when an http and a stream
//! upstream share a name or a server appears twice. No label changes with
//! the peer's state.
//!
//! `nginx_upstream_count_total` keeps the C module's name for existing
//! dashboards, but `promtool check metrics` rejects a *gauge* whose name ends
//! in `_total` (that suffix is reserved for counters), so it is declared
//! `untyped`, which Prometheus stores exactly like a gauge.
//!
//! The `nginx_upstream_count_*` values count the printed rows (after
//! `?status=`). With no printed rows, the per-peer families are left out.
//!
//! Label values: `\` -> `\\`, `"` -> `\"`, LF -> `\n`; invalid UTF-8 becomes
//! U+FFFD (as [`String::from_utf8_lossy`]); everything else is copied.

use super::text::{lossy_runs, push_hundredths, push_ms_as_seconds, push_u64, REPLACEMENT};
use super::{shown_last_change, Counts, Meta, PeerRow, UpstreamSummary, DURATION_BUCKETS_MS};

/// The page-wide families, then the per-upstream ones.
pub(super) fn head(meta: &Meta, counts: &Counts, upstreams: &[UpstreamSummary], out: &mut Vec<u8>) {
    let page = [
        (
            "nginx_upstream_count_total",
            "Checked peers shown on this page (after the status filter).",
            "untyped",
            counts.total(),
        ),
        (
            "nginx_upstream_count_up",
            "Shown checked peers that are up.",
            "gauge",
            counts.up(),
        ),
        (
            "nginx_upstream_count_down",
            "Shown checked peers that are down.",
            "gauge",
            counts.down(),
        ),
        (
            "nginx_upstream_count_generation",
            "Configuration generation: 1 after start, +1 per successful reload.",
            "gauge",
            meta.generation,
        ),
    ];
    for (name, help, kind, value) in page {
        header(out, name, help, kind);
        out.extend_from_slice(name.as_bytes());
        out.push(b' ');
        push_u64(out, value);
        out.push(b'\n');
    }
    if upstreams.is_empty() {
        return;
    }
    type Value = fn(&UpstreamSummary) -> u64;
    let families: [(&str, &str, Value); 2] = [
        (
            "nginx_upstream_peers_up",
            "Checked peers of the upstream whose health check says up.",
            |u| u.up,
        ),
        (
            "nginx_upstream_fail_open",
            "1 while the upstream fails open (its down peers may be selected), else 0.",
            |u| u64::from(u.fail_open),
        ),
    ];
    // Label sets, once per upstream; two names that differ only in
    // invalid UTF-8 escape alike, and only the first is printed (a series
    // must be unique).
    let mut seen = std::collections::HashSet::new();
    let sets: Vec<(Vec<u8>, &UpstreamSummary)> = upstreams
        .iter()
        .filter_map(|u| {
            let mut set = b"{upstream_type=\"".to_vec();
            set.extend_from_slice(u.group.as_str().as_bytes());
            set.extend_from_slice(b"\",upstream=\"");
            label_value(&mut set, u.name);
            set.extend_from_slice(b"\"} ");
            seen.insert(set.clone()).then_some((set, u))
        })
        .collect();
    for (name, help, value) in families {
        header(out, name, help, "gauge");
        for (set, u) in &sets {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(set);
            push_u64(out, value(u));
            out.push(b'\n');
        }
    }
}

/// A per-peer family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Rise,
    Fall,
    Active,
    Checks,
    Failures,
    LastChange,
    LastDuration,
    HttpStatus,
    GrpcStatus,
    TlsResumed,
    Ejections,
    Ejected,
    OutlierRequests,
    OutlierFailures,
    EffectiveWeight,
    SlowStart,
    Draining,
    SessionsShut,
    Histogram,
}

/// The default page's per-peer families, in the order printed: 3 + (the
/// reasons of the check type) series per peer (docs/operations.md, Cardinality).
const LEAN: [Family; 5] = [
    Family::Active,
    Family::Checks,
    Family::Failures,
    Family::LastDuration,
    Family::TlsResumed,
];

/// The full page's (`?histogram=on`): the lean families, `rise`, `fall`,
/// the last change's time, the last HTTP status (http/https peers), the
/// last gRPC status (gRPC peers), `check_outlier`'s (its peers), the
/// transitions' (effective weight, slow start left, draining, sessions
/// shut) and the duration histogram.
const FULL: [Family; 19] = [
    Family::Rise,
    Family::Fall,
    Family::Active,
    Family::Checks,
    Family::Failures,
    Family::LastChange,
    Family::LastDuration,
    Family::HttpStatus,
    Family::GrpcStatus,
    Family::TlsResumed,
    Family::Ejections,
    Family::Ejected,
    Family::OutlierRequests,
    Family::OutlierFailures,
    Family::EffectiveWeight,
    Family::SlowStart,
    Family::Draining,
    Family::SessionsShut,
    Family::Histogram,
];

fn families(full: bool) -> &'static [Family] {
    if full {
        &FULL
    } else {
        &LEAN
    }
}

/// Passes over the printed rows: one per family (samples of a family must
/// be contiguous).
pub(super) fn passes(full: bool) -> usize {
    families(full).len()
}

/// Append `r`'s label set, escaped, without braces:
/// `index="0",upstream_type="http",...,port="0"`. Computed once per peer
/// and reused by every family.
pub(super) fn label_set(r: &PeerRow, labels: &mut Vec<u8>) {
    labels.extend_from_slice(b"index=\"");
    push_u64(labels, r.index.into());
    labels.extend_from_slice(b"\",upstream_type=\"");
    labels.extend_from_slice(r.group.as_str().as_bytes());
    labels.extend_from_slice(b"\",upstream=\"");
    label_value(labels, r.upstream);
    labels.extend_from_slice(b"\",name=\"");
    label_value(labels, r.name);
    labels.extend_from_slice(b"\",type=\"");
    label_value(labels, r.check_type.as_bytes());
    labels.extend_from_slice(b"\",port=\"");
    push_u64(labels, r.port.into());
    labels.push(b'"');
    if r.server != r.name {
        labels.extend_from_slice(b",server=\"");
        label_value(labels, r.server);
        labels.push(b'"');
    }
}

/// Whether `check_type` speaks HTTP, so the peer has an HTTP status series.
fn speaks_http(check_type: &str) -> bool {
    matches!(check_type, "http" | "https")
}

/// Whether pass `pass`'s family has samples for `r` (every checked peer
/// has one in every family but those of some check types and
/// `check_outlier`'s).
pub(super) fn has_samples(pass: usize, full: bool, r: &PeerRow) -> bool {
    if r.unchecked {
        return false;
    }
    match families(full).get(pass) {
        Some(Family::HttpStatus) => speaks_http(r.check_type),
        Some(Family::GrpcStatus) => matches!(r.check_type, "grpc" | "grpcs"),
        Some(Family::TlsResumed) => r.tls_resumed.is_some(),
        Some(
            Family::Ejections | Family::Ejected | Family::OutlierRequests | Family::OutlierFailures,
        ) => r.outlier.is_some(),
        Some(_) => true,
        None => false,
    }
}

/// Whether pass `pass`'s family's header waits for its first sample
/// ([`pass_header`] then comes just before it) instead of opening the pass:
/// a family only some peers have is left out when no printed peer has it.
pub(super) fn header_waits(pass: usize, full: bool) -> bool {
    matches!(
        families(full).get(pass),
        Some(
            Family::HttpStatus
                | Family::GrpcStatus
                | Family::TlsResumed
                | Family::Ejections
                | Family::Ejected
                | Family::OutlierRequests
                | Family::OutlierFailures
        )
    )
}

/// `# HELP` and `# TYPE` of pass `pass`'s family.
pub(super) fn pass_header(pass: usize, full: bool, out: &mut Vec<u8>) {
    let Some(&family) = families(full).get(pass) else {
        return;
    };
    match family {
        Family::Failures => header(
            out,
            FAILURES,
            "Failed health check rounds by reason (the reasons the check type can produce).",
            "counter",
        ),
        Family::Histogram => header(
            out,
            DURATIONS,
            "Duration of health check rounds.",
            "histogram",
        ),
        f => per_peer(f).header(out),
    }
}

/// `r`'s samples in pass `pass`'s family, if it has any there (see
/// [`has_samples`]); `set` is its [`label_set`].
pub(super) fn pass_row(pass: usize, full: bool, r: &PeerRow, set: &[u8], out: &mut Vec<u8>) {
    let Some(&family) = families(full).get(pass) else {
        return;
    };
    if !has_samples(pass, full, r) {
        return;
    }
    match family {
        Family::Failures => failures(r, set, out),
        Family::Histogram => durations(r, set, out),
        f => per_peer(f).sample(r, set, out),
    }
}

fn per_peer(f: Family) -> &'static PerPeer {
    match f {
        Family::Rise => &PER_PEER[0],
        Family::Fall => &PER_PEER[1],
        Family::Active => &PER_PEER[2],
        Family::Checks => &PER_PEER[3],
        Family::LastChange => &PER_PEER[4],
        Family::HttpStatus => &PER_PEER[6],
        Family::TlsResumed => &PER_PEER[7],
        Family::GrpcStatus => &PER_PEER[8],
        Family::Ejections => &PER_PEER[9],
        Family::Ejected => &PER_PEER[10],
        Family::OutlierRequests => &PER_PEER[11],
        Family::OutlierFailures => &PER_PEER[12],
        Family::EffectiveWeight => &PER_PEER[13],
        Family::SlowStart => &PER_PEER[14],
        Family::Draining => &PER_PEER[15],
        Family::SessionsShut => &PER_PEER[16],
        // LastDuration; Failures and Histogram have their own writers.
        _ => &PER_PEER[5],
    }
}

/// A family with one sample per peer and no extra label.
struct PerPeer {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    value: fn(&PeerRow, &mut Vec<u8>),
}

const PER_PEER: [PerPeer; 17] = [
    PerPeer {
        name: "nginx_upstream_server_rise",
        help: "Current consecutive successful checks.",
        kind: "gauge",
        value: |r, out| push_u64(out, r.rise.into()),
    },
    PerPeer {
        name: "nginx_upstream_server_fall",
        help: "Current consecutive failed checks.",
        kind: "gauge",
        value: |r, out| push_u64(out, r.fall.into()),
    },
    PerPeer {
        name: "nginx_upstream_server_active",
        help: "1 if the health check considers the peer up, 0 if down.",
        kind: "gauge",
        value: |r, out| out.push(if r.up { b'1' } else { b'0' }),
    },
    PerPeer {
        name: "nginx_upstream_server_checks_total",
        help: "Health check rounds run.",
        kind: "counter",
        value: |r, out| push_u64(out, r.checks),
    },
    PerPeer {
        name: "nginx_upstream_server_last_change_timestamp_seconds",
        help: "Unix time of the peer's last up/down change, 0 if it never changed.",
        kind: "gauge",
        value: |r, out| push_ms_as_seconds(out, shown_last_change(r).unwrap_or(0)),
    },
    PerPeer {
        name: "nginx_upstream_server_check_last_duration_seconds",
        help: "Duration of the peer's last health check round, 0 before the first.",
        kind: "gauge",
        value: |r, out| push_ms_as_seconds(out, r.last_duration_ms),
    },
    PerPeer {
        name: "nginx_upstream_server_http_status",
        help: "Last HTTP status code of the peer's check, 0 before any.",
        kind: "gauge",
        value: |r, out| push_u64(out, r.http_status.map_or(0, u64::from)),
    },
    PerPeer {
        name: "nginx_upstream_server_check_tls_resumed_total",
        help: "TLS check rounds whose handshake resumed a session.",
        kind: "counter",
        value: |r, out| push_u64(out, r.tls_resumed.unwrap_or(0)),
    },
    PerPeer {
        name: "nginx_upstream_server_grpc_status",
        help: "Last grpc-status of the peer's gRPC health check, -1 before any.",
        kind: "gauge",
        value: |r, out| match r.grpc_status {
            Some(code) => push_u64(out, code.into()),
            None => out.extend_from_slice(b"-1"),
        },
    },
    PerPeer {
        name: "nginx_upstream_server_ejections_total",
        help: "Times check_outlier ejected the peer.",
        kind: "counter",
        value: |r, out| push_u64(out, r.outlier.map_or(0, |o| o.ejections)),
    },
    PerPeer {
        name: "nginx_upstream_server_ejected",
        help: "1 while check_outlier ejects the peer, else 0.",
        kind: "gauge",
        value: |r, out| out.push(if r.ejected { b'1' } else { b'0' }),
    },
    PerPeer {
        name: "nginx_upstream_server_outlier_requests_total",
        help: "Proxied attempts to the peer that check_outlier counted.",
        kind: "counter",
        value: |r, out| push_u64(out, r.outlier.map_or(0, |o| o.requests_total)),
    },
    PerPeer {
        name: "nginx_upstream_server_outlier_failures_total",
        help: "Proxied attempts to the peer that check_outlier counted as failures \
(5xx, errors, timeouts, invalid or slow answers).",
        kind: "counter",
        value: |r, out| push_u64(out, r.outlier.map_or(0, |o| o.failures_total)),
    },
    PerPeer {
        name: "nginx_upstream_server_effective_weight",
        help: "The peer's weight now: its weight, or the part a slow_start ramp reached.",
        kind: "gauge",
        value: |r, out| push_hundredths(out, r.effective_weight_x100),
    },
    PerPeer {
        name: "nginx_upstream_server_slow_start_remaining_seconds",
        help: "Seconds left of the peer's slow_start ramp, 0 when not ramping.",
        kind: "gauge",
        value: |r, out| push_ms_as_seconds(out, r.slow_start_ms.map_or(0, u64::from)),
    },
    PerPeer {
        name: "nginx_upstream_server_draining",
        help: "1 while an operator drains the peer, else 0.",
        kind: "gauge",
        value: |r, out| out.push(if r.draining { b'1' } else { b'0' }),
    },
    PerPeer {
        name: "nginx_upstream_server_sessions_shut_total",
        help: "Proxied connections ended because the peer went down (check_shutdown_sessions).",
        kind: "counter",
        value: |r, out| push_u64(out, r.sessions_shut.into()),
    },
];

impl PerPeer {
    fn header(&self, out: &mut Vec<u8>) {
        header(out, self.name, self.help, self.kind);
    }

    fn sample(&self, r: &PeerRow, set: &[u8], out: &mut Vec<u8>) {
        sample_start(out, self.name, set);
        out.extend_from_slice(b"} ");
        (self.value)(r, out);
        out.push(b'\n');
    }
}

const FAILURES: &str = "nginx_upstream_server_check_failures_total";
const DURATIONS: &str = "nginx_upstream_server_check_duration_seconds";

fn failures(r: &PeerRow, set: &[u8], out: &mut Vec<u8>) {
    let reasons = r.failures_by_reason;
    for (i, &(reason, _)) in reasons.iter().enumerate() {
        // A reason listed twice is one series: print it at its first
        // occurrence with the sum.
        if reasons[..i].iter().any(|&(seen, _)| seen == reason) {
            continue;
        }
        let total = reasons[i..]
            .iter()
            .filter(|&&(other, _)| other == reason)
            .fold(0u64, |sum, &(_, n)| sum.saturating_add(n));
        sample_start(out, FAILURES, set);
        out.extend_from_slice(b",reason=\"");
        label_value(out, reason.as_bytes());
        out.extend_from_slice(b"\"} ");
        push_u64(out, total);
        out.push(b'\n');
    }
}

fn durations(r: &PeerRow, set: &[u8], out: &mut Vec<u8>) {
    const NAME: &str = DURATIONS;
    // Slots are per bucket; Prometheus buckets are cumulative and may
    // not exceed `_count` (see `PeerRow::duration_count`).
    let count = r.duration_count;
    let mut cumulative = 0u64;
    for (i, &bound) in DURATION_BUCKETS_MS.iter().enumerate() {
        cumulative = cumulative.saturating_add(r.duration_buckets.get(i).copied().unwrap_or(0));
        bucket_start(out, NAME, set);
        push_ms_as_seconds(out, bound);
        out.extend_from_slice(b"\"} ");
        push_u64(out, cumulative.min(count));
        out.push(b'\n');
    }
    bucket_start(out, NAME, set);
    out.extend_from_slice(b"+Inf\"} ");
    push_u64(out, count);
    out.push(b'\n');

    out.extend_from_slice(NAME.as_bytes());
    out.extend_from_slice(b"_sum{");
    out.extend_from_slice(set);
    out.extend_from_slice(b"} ");
    push_ms_as_seconds(out, r.duration_sum_ms);
    out.push(b'\n');

    out.extend_from_slice(NAME.as_bytes());
    out.extend_from_slice(b"_count{");
    out.extend_from_slice(set);
    out.extend_from_slice(b"} ");
    push_u64(out, count);
    out.push(b'\n');
}

/// `name_bucket{labels,le="` (the caller writes the bound and closes).
fn bucket_start(out: &mut Vec<u8>, name: &str, set: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"_bucket{");
    out.extend_from_slice(set);
    out.extend_from_slice(b",le=\"");
}

fn header(out: &mut Vec<u8>, name: &str, help: &str, kind: &str) {
    out.extend_from_slice(b"# HELP ");
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    out.extend_from_slice(help.as_bytes());
    out.extend_from_slice(b"\n# TYPE ");
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    out.extend_from_slice(kind.as_bytes());
    out.push(b'\n');
}

/// `name{labels` (the caller closes the brace).
fn sample_start(out: &mut Vec<u8>, name: &str, set: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.push(b'{');
    out.extend_from_slice(set);
}

/// Append `s` escaped for a label value (rules in the module docs).
pub fn label_value(out: &mut Vec<u8>, s: &[u8]) {
    lossy_runs(out, s, REPLACEMENT, |out, run| {
        let mut start = 0;
        for (i, &b) in run.iter().enumerate() {
            let rep: &[u8] = match b {
                b'\\' => b"\\\\",
                b'"' => b"\\\"",
                b'\n' => b"\\n",
                _ => continue,
            };
            out.extend_from_slice(&run[start..i]);
            out.extend_from_slice(rep);
            start = i + 1;
        }
        out.extend_from_slice(&run[start..]);
    });
}
