//! CSV (docs/status.md): the C module's header, then our
//! columns, one record per printed peer, http rows first.
//!
//! - Header: [`HEADER`]. Our columns after the C module's: `checks`,
//!   `fails_total`, `last_failure_reason` (empty when none), `last_change`
//!   (unix ms, empty when never), `down_since` (unix ms while down, else
//!   empty), `http_status` (the last HTTP status code the check got, empty
//!   before any and for a check type without HTTP), `server` (the `server`
//!   line as written, a text cell), `backup` (`true`/`false`), `weight`,
//!   `admin` (empty, or `disabled`), `period_ms`, `grpc_status` (the last
//!   `grpc-status`, empty before any and for a check type without gRPC),
//!   then `check_outlier`'s: `ejections`, `ejected_until` (unix ms while
//!   ejected, else empty), `outlier_requests`, `outlier_failures` and
//!   `outlier_mean_ms` (the last interval's proxied attempts, failures and
//!   mean response time, empty without requests); all five are empty for
//!   a peer whose upstream has no `check_outlier`; then `slow_start_ms`
//!   (the ramp's milliseconds left, empty when not ramping),
//!   `effective_weight` (two decimals), `connections` (open proxied
//!   connections while draining, else empty) and `sessions_shut`. `admin`
//!   is `draining` while an operator drains the peer. New columns are only
//!   ever appended, so a reader that goes by position keeps working.
//! - Records end with `\n` (LF, as the C module prints; RFC 4180 readers
//!   accept it). No trailing data after the last record.
//! - RFC 4180 quoting: a cell containing `,`, `"`, CR or LF is wrapped in
//!   `"` with inner `"` doubled; other cells are bare.
//! - Formula injection: a *text* cell (`upstream_type`, `upstream_name`,
//!   `host`, `check_type`, `status`, `last_failure_reason`, `server`) whose first
//!   character is `=`, `+`, `-`, `@`, TAB or CR gets a `'` prepended, so a
//!   spreadsheet shows it as text; the `'` is part of the cell's value.
//!   Numeric cells are never touched, so `-1` stays `-1`.
//! - Invalid UTF-8 becomes U+FFFD (as [`String::from_utf8_lossy`]): the body
//!   is valid UTF-8, as the `charset=utf-8` Content-Type promises.

use super::text::{lossy_runs, push_hundredths, push_i64, push_u64, REPLACEMENT};
use super::{shown_down_since, shown_ejected_until, shown_last_change, PeerRow};

/// The header line, without its line end.
pub const HEADER: &str = "index,upstream_type,upstream_name,host,rise,fall,check_type,check_port,\
last_delay,avg_delay,min_delay,max_delay,status,\
checks,fails_total,last_failure_reason,last_change,down_since,http_status,\
server,backup,weight,admin,period_ms,grpc_status,\
ejections,ejected_until,outlier_requests,outlier_failures,outlier_mean_ms,\
slow_start_ms,effective_weight,connections,sessions_shut";

/// The header line.
pub(super) fn head(out: &mut Vec<u8>) {
    out.extend_from_slice(HEADER.as_bytes());
    out.push(b'\n');
}

/// One record.
pub(super) fn row(r: &PeerRow, out: &mut Vec<u8>) {
    {
        push_u64(out, r.index.into());
        out.push(b',');
        text(out, r.group.as_str().as_bytes());
        out.push(b',');
        text(out, r.upstream);
        out.push(b',');
        text(out, r.name);
        out.push(b',');
        push_u64(out, r.rise.into());
        out.push(b',');
        push_u64(out, r.fall.into());
        out.push(b',');
        text(out, r.check_type.as_bytes());
        out.push(b',');
        push_u64(out, r.port.into());
        for d in [
            r.last_delay_ms,
            r.avg_delay_ms,
            r.min_delay_ms,
            r.max_delay_ms,
        ] {
            out.push(b',');
            push_i64(out, d);
        }
        out.push(b',');
        out.extend_from_slice(r.status_word());
        out.push(b',');
        push_u64(out, r.checks);
        out.push(b',');
        push_u64(out, r.fails_total);
        out.push(b',');
        if let Some(reason) = r.last_failure_reason {
            text(out, reason.as_bytes());
        }
        out.push(b',');
        if let Some(t) = shown_last_change(r) {
            push_u64(out, t);
        }
        out.push(b',');
        if let Some(t) = shown_down_since(r) {
            push_u64(out, t);
        }
        out.push(b',');
        if let Some(code) = r.http_status {
            push_u64(out, code.into());
        }
        out.push(b',');
        text(out, r.server);
        out.extend_from_slice(if r.backup { b",true," } else { b",false," });
        push_u64(out, r.weight.into());
        out.extend_from_slice(if r.disabled {
            b",disabled,"
        } else if r.draining {
            b",draining,"
        } else {
            b",,"
        });
        push_u64(out, r.period_ms);
        out.push(b',');
        if let Some(code) = r.grpc_status {
            push_u64(out, code.into());
        }
        out.push(b',');
        if let Some(o) = &r.outlier {
            push_u64(out, o.ejections);
        }
        out.push(b',');
        if let Some(t) = shown_ejected_until(r) {
            push_u64(out, t);
        }
        out.push(b',');
        if let Some(o) = &r.outlier {
            push_u64(out, o.requests);
            out.push(b',');
            push_u64(out, o.failures);
            out.push(b',');
            if let Some(mean) = o.mean_ms {
                push_u64(out, mean);
            }
        } else {
            out.extend_from_slice(b",,");
        }
        out.push(b',');
        if let Some(ms) = r.slow_start_ms {
            push_u64(out, ms.into());
        }
        out.push(b',');
        push_hundredths(out, r.effective_weight_x100);
        out.push(b',');
        if let Some(n) = r.connections {
            push_u64(out, n.into());
        }
        out.push(b',');
        push_u64(out, r.sessions_shut.into());
        out.push(b'\n');
    }
}

/// Append a text cell (rules in the module docs).
pub fn text(out: &mut Vec<u8>, s: &[u8]) {
    let quote = s.iter().any(|&b| matches!(b, b',' | b'"' | b'\r' | b'\n'));
    let inert = matches!(s.first(), Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r'));
    if quote {
        out.push(b'"');
    }
    if inert {
        out.push(b'\'');
    }
    lossy_runs(out, s, REPLACEMENT, |out, run| {
        if !quote {
            out.extend_from_slice(run);
            return;
        }
        for part in run.split_inclusive(|&b| b == b'"') {
            out.extend_from_slice(part);
            if part.last() == Some(&b'"') {
                out.push(b'"');
            }
        }
    });
    if quote {
        out.push(b'"');
    }
}
