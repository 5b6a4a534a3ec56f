//! JSON: the C module's shape with our additions (docs/status.md), one peer object per line.
//!
//! ```text
//! {"servers": {
//!   "total": 2, "up": 1, "down": 1, "generation": 3, "dropped_events": 0,
//!   "check_connections": 1,
//!   "http": [
//!     {"index": 0, "upstream": "web", "name": "127.0.0.1:8081", "status": "up", ...},
//!     ...
//!   ],
//!   "stream": []
//! },
//! "upstreams": [
//!   {"group": "http", "name": "web", "peers": 2, "up": 1, "down": 1,
//!    "disabled": 0, "selectable": 1, "fail_open": false, "ejected": 0}
//! ]}
//! ```
//!
//! Per peer, the C module's fields first (`index`, `upstream`, `name`,
//! `status`, `rise`, `fall`, `type`, `port`, `last_delay_ms`, `avg_delay_ms`,
//! `min_delay_ms`, `max_delay_ms`), then ours: `checks`, `fails_total`,
//! `last_failure_reason` (string or `null`), `http_status` (the last HTTP
//! status code the check got, a number, `null` before any and for a check
//! type without HTTP), `last_change` (unix ms, `null` when the peer never
//! changed state), `down_since` (unix ms while down, else `null`),
//! `server` (the `server` line as written), `backup` (bool), `weight`,
//! `admin` (`null`, or `"disabled"` while an operator keeps the peer out),
//! `tls_resumed`, `period_ms`, `grpc_status`, `shared_with`, then
//! `check_outlier`'s: `ejections` (0 without `check_outlier`),
//! `ejected_until` (unix ms while ejected, else `null`) and `outlier`
//! (`null` without `check_outlier`, else
//! `{"requests", "failures", "mean_response_ms", "requests_total",
//! "failures_total", "rule", "detail"}`: the last interval's counts and
//! mean (`null` without requests), the totals, and the last ejection's
//! rule name and detail, `null` before the first ejection); then the
//! transitions': `slow_start_ms` (the ramp's milliseconds left, `null`
//! when not ramping), `effective_weight` (the weight now, a ramp's part of
//! it, two decimals), `connections` (open proxied connections while
//! draining, else `null`) and `sessions_shut` (`check_shutdown_sessions`).
//! `admin` is `"draining"` while an operator drains the peer.
//!
//! `upstreams` has one summary per upstream ([`super::UpstreamSummary`]),
//! over all its peers whatever `?status=` prints; `ejected` comes last.
//!
//! Strings: `"` and `\` are backslash-escaped, `\n` `\r` `\t` `\b` `\f` use
//! their short escapes, other control characters (U+0000..U+001F, U+007F)
//! are `\u00XX`; valid UTF-8 is copied as is; each maximal invalid UTF-8
//! sequence becomes `\ufffd` (as [`String::from_utf8_lossy`] would).

use super::text::{lossy_runs, push_hundredths, push_i64, push_u64};
use super::{
    shown_down_since, shown_ejected_until, shown_last_change, Counts, Group, Meta, PeerRow,
};

/// The page's opening: totals and generation.
pub(super) fn head(meta: &Meta, counts: &Counts, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"servers\": {\n  \"total\": ");
    push_u64(out, counts.total());
    out.extend_from_slice(b", \"up\": ");
    push_u64(out, counts.up());
    out.extend_from_slice(b", \"down\": ");
    push_u64(out, counts.down());
    out.extend_from_slice(b", \"generation\": ");
    push_u64(out, meta.generation);
    out.extend_from_slice(b", \"dropped_events\": ");
    push_u64(out, meta.dropped_events);
    out.extend_from_slice(b", \"check_connections\": ");
    push_u64(out, meta.check_connections);
}

/// Open `group`'s array.
pub(super) fn open_group(group: Group, out: &mut Vec<u8>) {
    out.extend_from_slice(b",\n  \"");
    out.extend_from_slice(group.as_str().as_bytes());
    out.extend_from_slice(b"\": [");
}

/// One peer of the open group; `first` = no peer before it in the group.
pub(super) fn row(r: &PeerRow, first: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(if first { b"\n    " } else { b",\n    " });
    peer(r, out);
}

/// Close the open group; `empty` = it printed no peer.
pub(super) fn close_group(empty: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(if empty { b"]" } else { b"\n  ]" });
}

/// The `upstreams` list, as [`tail`] appends it.
pub(super) fn upstreams(list: &[super::UpstreamSummary], out: &mut Vec<u8>) {
    out.extend_from_slice(b",\n\"upstreams\": [");
    for (i, u) in list.iter().enumerate() {
        out.extend_from_slice(if i == 0 { b"\n  " } else { b",\n  " });
        out.extend_from_slice(b"{\"group\": ");
        string(out, u.group.as_str().as_bytes());
        out.extend_from_slice(b", \"name\": ");
        string(out, u.name);
        for (key, v) in [
            (&b", \"peers\": "[..], u.peers),
            (b", \"up\": ", u.up),
            (b", \"down\": ", u.down),
            (b", \"disabled\": ", u.disabled),
            (b", \"selectable\": ", u.selectable),
        ] {
            out.extend_from_slice(key);
            push_u64(out, v);
        }
        out.extend_from_slice(if u.fail_open {
            b", \"fail_open\": true, \"ejected\": "
        } else {
            b", \"fail_open\": false, \"ejected\": "
        });
        push_u64(out, u.ejected);
        out.extend_from_slice(b", \"checking\": ");
        push_u64(out, u.checking);
        out.extend_from_slice(b", \"draining\": ");
        push_u64(out, u.draining);
        out.push(b'}');
    }
    out.extend_from_slice(if list.is_empty() { b"]" } else { b"\n]" });
}

/// The page's end: `servers` closes, then `upstreams` (as [`upstreams`]
/// rendered it).
pub(super) fn tail(upstreams: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"\n}");
    out.extend_from_slice(upstreams);
    out.extend_from_slice(b"}\n");
}

fn peer(r: &PeerRow, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"index\": ");
    push_u64(out, r.index.into());
    out.extend_from_slice(b", \"upstream\": ");
    string(out, r.upstream);
    out.extend_from_slice(b", \"name\": ");
    string(out, r.name);
    out.extend_from_slice(b", \"status\": \"");
    out.extend_from_slice(r.status_word());
    out.extend_from_slice(b"\", \"rise\": ");
    push_u64(out, r.rise.into());
    out.extend_from_slice(b", \"fall\": ");
    push_u64(out, r.fall.into());
    out.extend_from_slice(b", \"type\": ");
    string(out, r.check_type.as_bytes());
    out.extend_from_slice(b", \"port\": ");
    push_u64(out, r.port.into());
    out.extend_from_slice(b", \"last_delay_ms\": ");
    push_i64(out, r.last_delay_ms);
    out.extend_from_slice(b", \"avg_delay_ms\": ");
    push_i64(out, r.avg_delay_ms);
    out.extend_from_slice(b", \"min_delay_ms\": ");
    push_i64(out, r.min_delay_ms);
    out.extend_from_slice(b", \"max_delay_ms\": ");
    push_i64(out, r.max_delay_ms);
    out.extend_from_slice(b", \"checks\": ");
    push_u64(out, r.checks);
    out.extend_from_slice(b", \"fails_total\": ");
    push_u64(out, r.fails_total);
    out.extend_from_slice(b", \"last_failure_reason\": ");
    match r.last_failure_reason {
        Some(reason) => string(out, reason.as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b", \"http_status\": ");
    opt_u64(out, r.http_status.map(u64::from));
    out.extend_from_slice(b", \"last_change\": ");
    opt_u64(out, shown_last_change(r));
    out.extend_from_slice(b", \"down_since\": ");
    opt_u64(out, shown_down_since(r));
    out.extend_from_slice(b", \"server\": ");
    string(out, r.server);
    out.extend_from_slice(if r.backup {
        b", \"backup\": true, \"weight\": "
    } else {
        b", \"backup\": false, \"weight\": "
    });
    push_u64(out, r.weight.into());
    out.extend_from_slice(if r.disabled {
        b", \"admin\": \"disabled\""
    } else if r.draining {
        b", \"admin\": \"draining\""
    } else {
        b", \"admin\": null"
    });
    out.extend_from_slice(b", \"tls_resumed\": ");
    opt_u64(out, r.tls_resumed);
    out.extend_from_slice(b", \"period_ms\": ");
    push_u64(out, r.period_ms);
    out.extend_from_slice(b", \"grpc_status\": ");
    opt_u64(out, r.grpc_status.map(u64::from));
    out.extend_from_slice(b", \"shared_with\": [");
    for (i, o) in r.shared_with.iter().enumerate() {
        out.extend_from_slice(if i == 0 { b"{" } else { b", {" });
        out.extend_from_slice(b"\"upstream_type\": \"");
        out.extend_from_slice(o.group.as_str().as_bytes());
        out.extend_from_slice(b"\", \"upstream\": ");
        string(out, &o.upstream);
        out.extend_from_slice(b", \"index\": ");
        push_u64(out, o.index.into());
        out.push(b'}');
    }
    out.extend_from_slice(b"], \"ejections\": ");
    push_u64(out, r.outlier.map_or(0, |o| o.ejections));
    out.extend_from_slice(b", \"ejected_until\": ");
    opt_u64(out, shown_ejected_until(r));
    out.extend_from_slice(b", \"outlier\": ");
    match &r.outlier {
        None => out.extend_from_slice(b"null"),
        Some(o) => {
            for (key, v) in [
                (&b"{\"requests\": "[..], Some(o.requests)),
                (b", \"failures\": ", Some(o.failures)),
                (b", \"mean_response_ms\": ", o.mean_ms),
                (b", \"requests_total\": ", Some(o.requests_total)),
                (b", \"failures_total\": ", Some(o.failures_total)),
            ] {
                out.extend_from_slice(key);
                opt_u64(out, v);
            }
            match o.rule {
                Some(rule) => {
                    out.extend_from_slice(b", \"rule\": ");
                    string(out, rule.name().as_bytes());
                    out.extend_from_slice(b", \"detail\": ");
                    string(out, rule.detail().as_bytes());
                }
                None => out.extend_from_slice(b", \"rule\": null, \"detail\": null"),
            }
            out.push(b'}');
        }
    }
    out.extend_from_slice(b", \"slow_start_ms\": ");
    opt_u64(out, r.slow_start_ms.map(u64::from));
    out.extend_from_slice(b", \"effective_weight\": ");
    push_hundredths(out, r.effective_weight_x100);
    out.extend_from_slice(b", \"connections\": ");
    opt_u64(out, r.connections.map(u64::from));
    out.extend_from_slice(b", \"sessions_shut\": ");
    push_u64(out, r.sessions_shut.into());
    out.push(b'}');
}

fn opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => push_u64(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// Append `s` as a JSON string literal (rules in the module docs).
pub fn string(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    lossy_runs(out, s, b"\\ufffd", |out, run| {
        let plain = |b: u8| b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f;
        let mut start = 0;
        for (i, &b) in run.iter().enumerate() {
            if plain(b) {
                continue;
            }
            out.extend_from_slice(&run[start..i]);
            start = i + 1;
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                _ => out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ]),
            }
        }
        out.extend_from_slice(&run[start..]);
    });
    out.push(b'"');
}

/// The `healthcheck_admin` answer: the action and, per peer it applied
/// to, whether it changed anything and the peer's row as the status page
/// prints it (after the action), with its `group` first:
///
/// ```text
/// {"action": "disable", "changed": 1, "peers": [
///   {"group": "http", "changed": true, "index": 0, "upstream": "web", ...}
/// ]}
/// ```
pub fn admin_answer(action: &str, peers: &[(PeerRow, bool)], out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"action\": ");
    string(out, action.as_bytes());
    out.extend_from_slice(b", \"changed\": ");
    push_u64(out, peers.iter().filter(|(_, c)| *c).count() as u64);
    out.extend_from_slice(b", \"peers\": [");
    for (i, (r, changed)) in peers.iter().enumerate() {
        out.extend_from_slice(if i == 0 { b"\n  " } else { b",\n  " });
        out.extend_from_slice(b"{\"group\": ");
        string(out, r.group.as_str().as_bytes());
        out.extend_from_slice(if *changed {
            b", \"changed\": true, "
        } else {
            b", \"changed\": false, "
        });
        // The row object without its opening brace.
        let start = out.len();
        peer(r, out);
        out.remove(start);
    }
    out.extend_from_slice(if peers.is_empty() { b"]}\n" } else { b"\n]}\n" });
}
