//! The end of a round: its outcome, recording it in the peer's slot, the
//! state-change and local-error log lines, and the next look at the
//! schedule.

use core::ffi::c_int;
use core::sync::atomic::{AtomicU64, Ordering};

use healthcheck_core::health::Transition;
use healthcheck_core::reason::Reason;
use healthcheck_core::schedule;
use healthcheck_core::zone::{Flip, RoundResult};
use ngx::ffi::{NGX_LOG_DEBUG, NGX_LOG_NOTICE, NGX_LOG_WARN};

use super::{connect, kept, Probe, ProbeKind};
use crate::ffi::{self, exiting, monotonic_ms, unix_ms};

/// A resource this host ran out of.
#[derive(Clone, Copy, Debug)]
pub enum Local {
    /// `socket()`/`connect()` failed with this errno.
    Errno(c_int),
    /// nginx had no free connection (`worker_connections`).
    NoConnection,
    /// No memory for the TLS connection.
    NoMemory,
}

/// The end of a round.
#[derive(Clone, Copy, Debug)]
pub enum Outcome {
    Up {
        delay_ms: u64,
    },
    Down(Reason),
    /// A local resource problem; counters stay as they are.
    Local(Local),
}

/// Where a probe kind's handler left the round.
pub enum Step {
    /// Waiting for an event or a timer.
    Pending,
    /// Over.
    Done(Outcome),
}

/// End the round: keep or close its connection, record the outcome, free
/// the lease and look at the schedule again when the next round is due.
pub fn finish(p: &mut Probe, outcome: Outcome) {
    if let Some(c) = p.conn {
        // A session ticket the round's reads brought.
        super::tls::collect_session(p, c);
    }
    if p.keep && matches!(outcome, Outcome::Up { .. }) && p.kind.may_keep() {
        kept::keep(p);
    }
    connect::close(p);
    let Some(s) = p.slot() else { return };
    let result = match outcome {
        Outcome::Local(err) => {
            local_error(p, err);
            None
        }
        Outcome::Up { delay_ms } => Some(RoundResult::Up { delay_ms }),
        Outcome::Down(r) => Some(RoundResult::Down(r)),
    };
    if let Some(result) = result {
        let conf = &p.check.conf;
        let flip = s.record(
            result,
            p.round.elapsed_ms(),
            (conf.rise, conf.fall),
            unix_ms(),
            p.kind.http_status(),
        );
        if super::tls::resumed(p) {
            s.tls_resumed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(flip) = flip {
            p.zone.header().note_change();
            log_flip(p, flip, result);
            crate::worker::update_fail_open(&p.zone, &p.check, p.log);
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
    // The interval in force after this round's verdict: `down_interval`
    // for a peer it left down. The lattice goes on from this round's point
    // with that spacing (README: How rounds are scheduled).
    let interval = p.interval_now(s);
    s.last_start.store(p.round.start_msec, Ordering::Relaxed);
    let next = schedule::next_lattice(p.round.lattice, p.round.due, p.round.start_msec, interval);
    s.next_due.store(next, Ordering::Release);
    s.lease.store(0, Ordering::Release);
    if !exiting() {
        let due = schedule::due_at(next, p.jitter_seed(s), p.check.conf.jitter_ms);
        p.arm(if p.peer.owner { due } else { due + interval });
    }
}

fn log_flip(p: &Probe, flip: Flip, result: RoundResult) {
    let (ups, name) = (p.peer.upstream_name(), p.peer.name());
    let (proto, check) = (p.peer.proto.as_str(), p.check.conf.check_type.as_str());
    match flip.transition {
        Transition::WentDown => {
            let reason = match (result, p.kind.http_status()) {
                (RoundResult::Down(Reason::Status), Some(code)) => format!("HTTP {code}"),
                // The handshake's failure in nginx's and OpenSSL's words;
                // a verification failure says what it is itself.
                (RoundResult::Down(r @ Reason::Tls), _) => match super::tls::detail(p) {
                    Some(d) => format!("{}: {d}", r.describe()),
                    None => r.describe().to_string(),
                },
                (RoundResult::Down(r @ Reason::TlsVerify), _) => {
                    super::tls::detail(p).map_or_else(|| r.describe().to_string(), str::to_string)
                }
                (RoundResult::Down(r), _) => r.describe().to_string(),
                (RoundResult::Up { .. }, _) => "failed".to_string(),
            };
            ffi::log(
                NGX_LOG_WARN,
                p.log,
                format_args!(
                    "upstream {ups} peer {name} is down after {} failures: {reason} ({proto} {check} check)",
                    flip.health.fall,
                ),
            )
        }
        Transition::WentUp => ffi::log(
            NGX_LOG_NOTICE,
            p.log,
            format_args!(
                "upstream {ups} peer {name} is up after {} successes ({proto} {check} check)",
                flip.health.rise,
            ),
        ),
    }
}

/// Local errors are logged at most once per 10 s per worker.
static LAST_LOCAL_LOG: AtomicU64 = AtomicU64::new(0);
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
const LOCAL_LOG_EVERY_MS: u64 = 10_000;

fn local_error(p: &Probe, cause: Local) {
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
        p.log,
        format_args!(
            "health check of peer {} not run: {}; counters unchanged ({} similar messages suppressed)",
            p.peer.name(),
            why,
            skipped
        ),
    );
}

/// A round's progress at `debug`.
pub fn debug(p: &Probe, what: &str) {
    // SAFETY: the cycle's log, valid for the process.
    if unsafe { (*p.log).log_level } < NGX_LOG_DEBUG as usize {
        return;
    }
    ffi::log(
        NGX_LOG_DEBUG,
        p.log,
        format_args!(
            "healthcheck {} peer {} #{}: round {} after {} ms",
            p.peer.proto.as_str(),
            p.peer.name(),
            p.peer.index,
            what,
            p.round.elapsed_ms()
        ),
    );
}
