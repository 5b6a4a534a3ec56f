//! A round's verdict recorded in the peer's slot, and the log lines of
//! state changes, local errors and (at `debug`) each round's progress.

use core::sync::atomic::{AtomicU64, Ordering};

use healthcheck_core::events::{By, State};
use healthcheck_core::health::Transition;
use healthcheck_core::reason::Reason;
use healthcheck_core::zone::{Flip, RoundResult};
use ngx::ffi::{NGX_LOG_DEBUG, NGX_LOG_NOTICE, NGX_LOG_WARN};

use super::outcome::Local;
use super::probe::Probe;
use std::rc::Rc;

use healthcheck_core::status::Group;
use healthcheck_core::zone::Slot;

use crate::ffi::{self, monotonic_ms, unix_ms};
use crate::shm::Zone;
use crate::target::UpstreamCheck;

/// A row a round is recorded in: the probe's own, or a follower's.
struct Row<'a> {
    slot: &'a Slot,
    zone: &'a Zone,
    check: &'a Rc<UpstreamCheck>,
    proto: Group,
    upstream: &'a [u8],
    /// The peer's name and `server` line.
    names: (&'a [u8], &'a [u8]),
}

/// Record `result` in the probe's slot and in those of the rows that
/// share its probe (`crate::sharing`): counters, the state change and its
/// log line, fail-open.
pub fn record(p: &Probe, result: RoundResult) {
    let Some(s) = p.slot() else { return };
    let peer = p.peer();
    // SAFETY: the upstream name lives in the cycle pool.
    let upstream = unsafe { ffi::str_bytes(&peer.upstream) };
    let own = Row {
        slot: s,
        zone: p.zone(),
        check: p.check(),
        proto: peer.proto,
        upstream,
        names: peer.names(),
    };
    record_row(p, &own, result);
    for f in p.followers() {
        let Some(slot) = f.slot() else { continue };
        let row = Row {
            slot,
            zone: &f.zone,
            check: &f.target.check,
            proto: f.proto,
            upstream: f.target.upstream_bytes(),
            names: (f.target.peer.name_bytes(), f.target.peer.server_bytes()),
        };
        record_row(p, &row, result);
    }
    debug(
        p,
        if matches!(result, RoundResult::Up { .. }) {
            "success"
        } else {
            "failure"
        },
    );
}

fn record_row(p: &Probe, row: &Row, result: RoundResult) {
    let conf = p.conf();
    let flip = row.slot.record(
        result,
        p.round().elapsed_ms(),
        (conf.rise, conf.fall),
        unix_ms(),
        p.http_status(),
    );
    if p.tls_resumed() {
        row.slot.tls_resumed.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(code) = p.grpc_status() {
        row.slot.record_grpc_status(code);
    }
    if let Some(flip) = flip {
        row.zone.header().note_change();
        log_flip(p, row, flip, result);
        row.check.update_fail_open(row.zone, p.log());
    }
}

fn log_flip(p: &Probe, row: &Row, flip: Flip, result: RoundResult) {
    let ups = String::from_utf8_lossy(row.upstream);
    let name = String::from_utf8_lossy(row.names.0);
    let (proto, check) = (row.proto.as_str(), p.conf().check_type.as_str());
    match flip.transition {
        Transition::WentDown => {
            let reason = match (result, p.http_status()) {
                // HTTP/2's failures say they are (docs/directives.md,
                // type=grpc and type=grpcs), then what broke.
                (RoundResult::Down(r @ Reason::Protocol), _) if p.kind_detail().is_some() => {
                    format!("{}: {}", r.describe(), p.kind_detail().unwrap_or_default())
                }
                // The answer's own words (a MySQL error, a FastCGI status).
                (RoundResult::Down(_), _) if p.kind_detail().is_some() => {
                    p.kind_detail().unwrap_or_default().to_string()
                }
                (RoundResult::Down(Reason::Status), Some(code)) => format!("HTTP {code}"),
                // The handshake's failure in nginx's and OpenSSL's words;
                // a verification failure says what it is itself.
                (RoundResult::Down(r @ Reason::Tls), _) => match p.tls_detail() {
                    Some(d) => format!("{}: {d}", r.describe()),
                    None => r.describe().to_string(),
                },
                // ALPN not h2 (a TLS transport's finding).
                (RoundResult::Down(r @ Reason::Protocol), _) => match p.tls_detail() {
                    Some(d) => format!("{}: {d}", r.describe()),
                    None => r.describe().to_string(),
                },
                (RoundResult::Down(r @ Reason::TlsVerify), _) => p
                    .tls_detail()
                    .map_or_else(|| r.describe().to_string(), str::to_string),
                (RoundResult::Down(r), _) => r.describe().to_string(),
                (RoundResult::Up { .. }, _) => "failed".to_string(),
            };
            let code = match result {
                RoundResult::Down(r) => r.name(),
                RoundResult::Up { .. } => "failed",
            };
            let from = if flip.first {
                State::Checking
            } else {
                State::Up
            };
            event(row, (from, State::Down), Some(code), Some(&reason));
            if flip.first {
                ffi::log(
                    NGX_LOG_WARN,
                    p.log(),
                    format_args!(
                        "upstream {ups} peer {name} is down after its first round: {reason} \
                         ({proto} {check} check, mandatory)",
                    ),
                )
            } else {
                ffi::log(
                    NGX_LOG_WARN,
                    p.log(),
                    format_args!(
                        "upstream {ups} peer {name} is down after {} failures: {reason} ({proto} {check} check)",
                        flip.health.fall,
                    ),
                )
            }
        }
        Transition::WentUp if flip.first => {
            event(row, (State::Checking, State::Up), None, None);
            ffi::log(
                NGX_LOG_NOTICE,
                p.log(),
                format_args!(
                    "upstream {ups} peer {name} is up after its first round ({proto} {check} \
                     check, mandatory)",
                ),
            )
        }
        Transition::WentUp => {
            event(row, (State::Down, State::Up), None, None);
            ffi::log(
                NGX_LOG_NOTICE,
                p.log(),
                format_args!(
                    "upstream {ups} peer {name} is up after {} successes ({proto} {check} check)",
                    flip.health.rise,
                ),
            )
        }
    }
}

/// The transition in `check_log`.
fn event(row: &Row, states: (State, State), reason: Option<&str>, detail: Option<&str>) {
    let check = row.check;
    if check.events.is_none() {
        return;
    }
    let mut ev = check.event(Some(row.names), states, By::Check);
    ev.reason = reason;
    ev.detail = detail;
    ev.checks = Some(row.slot.checks.load(Ordering::Relaxed));
    check.emit(row.zone, &ev);
}

/// Local errors are logged at most once per 10 s per worker.
static LAST_LOCAL_LOG: AtomicU64 = AtomicU64::new(0);
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
const LOCAL_LOG_EVERY_MS: u64 = 10_000;

/// A round this host could not run (`cause`): logged, rate-limited.
pub fn local_error(p: &Probe, cause: Local) {
    let now = monotonic_ms();
    let last = LAST_LOCAL_LOG.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < LOCAL_LOG_EVERY_MS {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    LAST_LOCAL_LOG.store(now.max(1), Ordering::Relaxed);
    let skipped = SUPPRESSED.swap(0, Ordering::Relaxed);
    let why = match cause {
        Local::Errno(err) => format!(
            "local error {} ({})",
            err,
            std::io::Error::from_raw_os_error(err)
        ),
        Local::NoConnection => String::from(
            "local error: no free nginx connection (worker_connections are not enough)",
        ),
        Local::NoMemory => String::from("local error: no memory for the TLS connection"),
    };
    ffi::log(
        NGX_LOG_WARN,
        p.log(),
        format_args!(
            "health check of peer {} not run: {}; counters unchanged ({} similar messages suppressed)",
            p.peer().name(),
            why,
            skipped
        ),
    );
}

/// A round's progress at `debug`.
pub fn debug(p: &Probe, what: &str) {
    // SAFETY: the cycle's log, valid for the process.
    if unsafe { (*p.log()).log_level } < NGX_LOG_DEBUG as usize {
        return;
    }
    let peer = p.peer();
    ffi::log(
        NGX_LOG_DEBUG,
        p.log(),
        format_args!(
            "healthcheck {} peer {} #{}: round {} after {} ms",
            peer.proto.as_str(),
            peer.name(),
            peer.index,
            what,
            p.round().elapsed_ms()
        ),
    );
}
