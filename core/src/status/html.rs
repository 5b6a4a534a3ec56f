//! HTML: one standalone page (inline CSS, no scripts, no external assets).
//!
//! - A summary line (generation, printed peers up/down, filter, snapshot
//!   time), links to filter (`all`/`up`/`down`), to reload, to turn
//!   auto-refresh on (`?refresh=N`, a `<meta http-equiv="refresh">`) or
//!   off, and to the other formats; the links keep the current filter and
//!   refresh.
//! - An "Upstreams" table: one line per upstream (peers, up, down,
//!   disabled, ejected, selectable, failing open), over all its peers
//!   whatever the filter; an upstream with no selectable peer has class `bad` and says
//!   "no selectable peer".
//! - Per group (`http`, `stream`) a heading with its printed counts and a
//!   table; down rows have class `down` and a red background; an empty group
//!   says so instead of an empty table.
//! - A value not known yet is `&ndash;` (delays, last failure, down for) or
//!   `never` (last change); the `HTTP` column (the last HTTP status code
//!   the check got) is an empty cell when there is none, as it always is
//!   for a check type without HTTP; so is the `gRPC` column (the last
//!   `grpc-status`) but for gRPC checks.
//! - The last five columns are `check_outlier`'s: ejections, the end of
//!   the current ejection (`in 25s`, the time in its title; `&ndash;`
//!   while not ejected), and the last interval's proxied requests, failed
//!   requests and mean response time (`&ndash;` without requests); all
//!   five are empty cells for a peer whose upstream has no `check_outlier`.
//! - Then the transitions' columns: the `slow_start` ramp's time left
//!   (`&ndash;` when not ramping), the effective weight (two decimals), the
//!   open proxied connections while draining (`&ndash;` otherwise) and the
//!   sessions `check_shutdown_sessions` ended. The admin column says
//!   `draining` while an operator drains the peer.
//! - Text is escaped: `&` `<` `>` `"` `'` as entities; invalid UTF-8, C0
//!   controls other than TAB/LF/CR, DEL and C1 controls (U+0080..U+009F)
//!   become U+FFFD. The page is valid UTF-8.

use super::text::{
    lossy_runs, push_age, push_hundredths, push_i64, push_u64, push_utc, REPLACEMENT,
};
use super::{
    shown_down_since, shown_ejected_until, shown_last_change, Counts, Filter, Group, Meta, PeerRow,
    Query, UpstreamSummary,
};

const STYLE: &str = "\
body{font:14px/1.45 system-ui,-apple-system,\"Segoe UI\",Roboto,sans-serif;margin:1.2em 1.5em;color:#1d1d1f;background:#fff}\
h1{font-size:1.35em;margin:0 0 .3em}\
h2{font-size:1.1em;margin:1.4em 0 .4em}\
p,nav{margin:.3em 0;color:#444}\
nav a,nav strong{margin:0 .15em}\
a{color:#0550ae}\
.bad{color:#b00020;font-weight:600}\
.good{color:#1a7f37;font-weight:600}\
table{border-collapse:collapse;min-width:60%}\
th,td{border:1px solid #d0d7de;padding:.2em .5em;text-align:left;vertical-align:top}\
th{background:#f3f4f6;position:sticky;top:0;white-space:nowrap}\
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
td.w{word-break:break-all;max-width:28em}\
td.s{font-weight:600;color:#1a7f37}\
tr.down td{background:#ffe3e3}\
tr.stranded td{background:#ffe3e3}\
tr.down td.s{color:#b00020}\
tbody tr:hover td{background:#f6f8fa}\
tr.down:hover td{background:#ffd0d0}";

pub(super) const COLUMNS: &[&str] = &[
    "#",
    "upstream",
    "server",
    "status",
    "rise",
    "fall",
    "type",
    "port",
    "last ms",
    "avg ms",
    "min ms",
    "max ms",
    "checks",
    "failures",
    "last failure",
    "HTTP",
    "gRPC",
    "last change",
    "down for",
    "server line",
    "weight",
    "backup",
    "admin",
    "ejections",
    "ejected until",
    "requests",
    "request failures",
    "mean ms",
    "slow start",
    "effective weight",
    "connections",
    "sessions shut",
];

/// Columns of the upstreams table.
pub(super) const UPSTREAM_COLUMNS: &[&str] = &[
    "type",
    "upstream",
    "peers",
    "up",
    "down",
    "disabled",
    "ejected",
    "selectable",
    "fail open",
];

/// Everything before the first group.
pub(super) fn head(
    query: &Query,
    meta: &Meta,
    counts: &Counts,
    upstreams: &[UpstreamSummary],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(
        b"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
    );
    if let Some(n) = query.refresh {
        out.extend_from_slice(b"<meta http-equiv=\"refresh\" content=\"");
        push_u64(out, n.into());
        out.extend_from_slice(b"\">\n");
    }
    out.extend_from_slice(b"<title>Upstream health: ");
    if counts.total() == 0 {
        out.extend_from_slice(b"no peers");
    } else if counts.down() == 0 {
        push_u64(out, counts.up());
        out.extend_from_slice(b" up");
    } else {
        push_u64(out, counts.down());
        out.extend_from_slice(b" down");
    }
    out.extend_from_slice(b"</title>\n<style>");
    out.extend_from_slice(STYLE.as_bytes());
    out.extend_from_slice(b"</style>\n</head>\n<body>\n<h1>Upstream health</h1>\n<p>");
    out.extend_from_slice(b"Generation ");
    push_u64(out, meta.generation);
    out.extend_from_slice(b" &middot; ");
    summary(counts.total(), counts.up(), counts.down(), out);
    out.extend_from_slice(match query.filter {
        None => b" &middot; showing all peers".as_slice(),
        Some(Filter::Up) => b" &middot; showing up peers only",
        Some(Filter::Down) => b" &middot; showing down peers only",
    });
    out.extend_from_slice(b" &middot; at ");
    push_utc(out, meta.now_ms);
    out.extend_from_slice(b"</p>\n");
    nav(query, out);
    upstream_table(upstreams, out);
}

/// One line per upstream; one with no selectable peer is flagged.
fn upstream_table(upstreams: &[UpstreamSummary], out: &mut Vec<u8>) {
    if upstreams.is_empty() {
        return;
    }
    let stranded = upstreams.iter().filter(|u| u.selectable == 0).count();
    out.extend_from_slice(b"<h2 id=\"upstreams\">Upstreams: ");
    push_u64(out, upstreams.len() as u64);
    if stranded > 0 {
        out.extend_from_slice(b", <span class=\"bad\">");
        push_u64(out, stranded as u64);
        out.extend_from_slice(b" with no selectable peer</span>");
    }
    out.extend_from_slice(b"</h2>\n<table>\n<thead><tr>");
    for col in UPSTREAM_COLUMNS {
        out.extend_from_slice(b"<th>");
        out.extend_from_slice(col.as_bytes());
        out.extend_from_slice(b"</th>");
    }
    out.extend_from_slice(b"</tr></thead>\n<tbody>\n");
    for u in upstreams {
        out.extend_from_slice(if u.selectable == 0 {
            b"<tr class=\"upstream stranded\"><td>"
        } else {
            b"<tr class=\"upstream\"><td>"
        });
        out.extend_from_slice(u.group.as_str().as_bytes());
        out.extend_from_slice(b"</td><td class=\"w\">");
        text(out, u.name);
        for v in [u.peers, u.up, u.down, u.disabled, u.ejected] {
            out.extend_from_slice(b"</td><td class=\"n\">");
            push_u64(out, v);
        }
        if u.selectable == 0 {
            out.extend_from_slice(b"</td><td class=\"n bad\">0: no selectable peer");
        } else {
            out.extend_from_slice(b"</td><td class=\"n\">");
            push_u64(out, u.selectable);
        }
        out.extend_from_slice(if u.fail_open {
            b"</td><td class=\"bad\">yes</td></tr>\n"
        } else {
            b"</td><td>no</td></tr>\n"
        });
    }
    out.extend_from_slice(b"</tbody>\n</table>\n");
}

/// A group's heading, then its table's head, or "No peers." when it
/// prints none.
pub(super) fn open_group(group: Group, query: &Query, counts: &Counts, out: &mut Vec<u8>) {
    let c = counts.group(group);
    out.extend_from_slice(b"<h2 id=\"");
    out.extend_from_slice(group.as_str().as_bytes());
    out.extend_from_slice(b"\">");
    out.extend_from_slice(group.as_str().as_bytes());
    out.extend_from_slice(b": ");
    summary(c.total, c.up, c.down, out);
    out.extend_from_slice(b"</h2>\n");
    if c.total == 0 {
        out.extend_from_slice(b"<p>No ");
        if let Some(f) = query.filter {
            out.extend_from_slice(f.as_str().as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(b"peers.</p>\n");
        return;
    }
    out.extend_from_slice(b"<table>\n<thead><tr>");
    for col in COLUMNS {
        out.extend_from_slice(b"<th>");
        out.extend_from_slice(col.as_bytes());
        out.extend_from_slice(b"</th>");
    }
    out.extend_from_slice(b"</tr></thead>\n<tbody>\n");
}

/// Close a group opened by [`open_group`].
pub(super) fn close_group(group: Group, counts: &Counts, out: &mut Vec<u8>) {
    if counts.group(group).total != 0 {
        out.extend_from_slice(b"</tbody>\n</table>\n");
    }
}

/// The page's end.
pub(super) fn tail(out: &mut Vec<u8>) {
    out.extend_from_slice(b"</body>\n</html>\n");
}

/// `4 peers: 3 up, 1 down` with the down count highlighted when non-zero.
fn summary(total: u64, up: u64, down: u64, out: &mut Vec<u8>) {
    push_u64(out, total);
    out.extend_from_slice(if total == 1 { b" peer: " } else { b" peers: " });
    push_u64(out, up);
    out.extend_from_slice(b" up, ");
    if down > 0 {
        out.extend_from_slice(b"<span class=\"bad\">");
        push_u64(out, down);
        out.extend_from_slice(b" down</span>");
    } else {
        out.extend_from_slice(b"0 down");
    }
}

fn nav(query: &Query, out: &mut Vec<u8>) {
    out.extend_from_slice(b"<nav>Show:");
    let filters: [(Option<Filter>, &[u8]); 3] = [
        (None, b"all"),
        (Some(Filter::Up), b"up"),
        (Some(Filter::Down), b"down"),
    ];
    for (f, label) in filters {
        link(out, "html", f, query.refresh, label, f == query.filter);
    }
    out.extend_from_slice(b" &middot;");
    link(out, "html", query.filter, query.refresh, b"reload", false);
    out.extend_from_slice(b" &middot; Auto-refresh:");
    link(
        out,
        "html",
        query.filter,
        None,
        b"off",
        query.refresh.is_none(),
    );
    let mut shown_current = query.refresh.is_none();
    for n in [5u32, 30] {
        let label = if n == 5 { b"5 s".as_slice() } else { b"30 s" };
        shown_current |= query.refresh == Some(n);
        link(
            out,
            "html",
            query.filter,
            Some(n),
            label,
            query.refresh == Some(n),
        );
    }
    if !shown_current {
        if let Some(n) = query.refresh {
            out.extend_from_slice(b" <strong>");
            push_u64(out, n.into());
            out.extend_from_slice(b" s</strong>");
        }
    }
    out.extend_from_slice(b" &middot; As:");
    for f in ["csv", "json", "prometheus"] {
        link(out, f, query.filter, None, f.as_bytes(), false);
    }
    out.extend_from_slice(b"</nav>\n");
}

/// A relative link to this page with other arguments; `current` prints the
/// label in bold instead of a link.
fn link(
    out: &mut Vec<u8>,
    format: &str,
    filter: Option<Filter>,
    refresh: Option<u32>,
    label: &[u8],
    current: bool,
) {
    if current {
        out.extend_from_slice(b" <strong>");
        out.extend_from_slice(label);
        out.extend_from_slice(b"</strong>");
        return;
    }
    out.extend_from_slice(b" <a href=\"?format=");
    out.extend_from_slice(format.as_bytes());
    if let Some(f) = filter {
        out.extend_from_slice(b"&amp;status=");
        out.extend_from_slice(f.as_str().as_bytes());
    }
    if let Some(n) = refresh {
        out.extend_from_slice(b"&amp;refresh=");
        push_u64(out, n.into());
    }
    out.extend_from_slice(b"\">");
    out.extend_from_slice(label);
    out.extend_from_slice(b"</a>");
}

pub(super) fn row(r: &PeerRow, now_ms: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(if r.up {
        b"<tr><td class=\"n\">"
    } else {
        b"<tr class=\"down\"><td class=\"n\">"
    });
    push_u64(out, r.index.into());
    out.extend_from_slice(b"</td><td class=\"w\">");
    text(out, r.upstream);
    out.extend_from_slice(b"</td><td class=\"w\">");
    text(out, r.name);
    out.extend_from_slice(b"</td><td class=\"s\">");
    out.extend_from_slice(r.status_word());
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_u64(out, r.rise.into());
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_u64(out, r.fall.into());
    out.extend_from_slice(b"</td><td>");
    text(out, r.check_type.as_bytes());
    out.extend_from_slice(b"</td><td class=\"n\">");
    if r.port == 0 {
        out.extend_from_slice(b"own");
    } else {
        push_u64(out, r.port.into());
    }
    for d in [
        r.last_delay_ms,
        r.avg_delay_ms,
        r.min_delay_ms,
        r.max_delay_ms,
    ] {
        out.extend_from_slice(b"</td><td class=\"n\">");
        if d < 0 {
            out.extend_from_slice(b"&ndash;");
        } else {
            push_i64(out, d);
        }
    }
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_u64(out, r.checks);
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_u64(out, r.fails_total);
    out.extend_from_slice(b"</td><td>");
    match r.last_failure_reason {
        Some(reason) => text(out, reason.as_bytes()),
        None => out.extend_from_slice(b"&ndash;"),
    }
    // Empty, not a dash, when there is none: most checks speak no HTTP.
    out.extend_from_slice(b"</td><td class=\"n\">");
    if let Some(code) = r.http_status {
        push_u64(out, code.into());
    }
    out.extend_from_slice(b"</td><td class=\"n\">");
    if let Some(code) = r.grpc_status {
        push_u64(out, code.into());
    }
    out.extend_from_slice(b"</td><td>");
    match shown_last_change(r) {
        Some(t) => {
            out.extend_from_slice(b"<span title=\"");
            push_utc(out, t);
            out.extend_from_slice(b"\">");
            push_age(out, now_ms.saturating_sub(t));
            out.extend_from_slice(b" ago</span>");
        }
        None => out.extend_from_slice(b"never"),
    }
    out.extend_from_slice(b"</td><td>");
    match shown_down_since(r) {
        Some(t) => {
            out.extend_from_slice(b"<span class=\"bad\" title=\"since ");
            push_utc(out, t);
            out.extend_from_slice(b"\">");
            push_age(out, now_ms.saturating_sub(t));
            out.extend_from_slice(b"</span>");
        }
        None => out.extend_from_slice(b"&ndash;"),
    }
    out.extend_from_slice(b"</td><td class=\"w\">");
    text(out, r.server);
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_u64(out, r.weight.into());
    out.extend_from_slice(if r.backup {
        b"</td><td>backup"
    } else {
        b"</td><td>"
    });
    out.extend_from_slice(if r.disabled {
        b"</td><td class=\"bad\">disabled"
    } else if r.draining {
        b"</td><td class=\"bad\">draining"
    } else {
        b"</td><td>"
    });
    outlier(r, now_ms, out);
    out.extend_from_slice(b"</td><td>");
    match r.slow_start_ms {
        Some(ms) => {
            push_age(out, ms.into());
            out.extend_from_slice(b" left");
        }
        None => out.extend_from_slice(b"&ndash;"),
    }
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_hundredths(out, r.effective_weight_x100);
    out.extend_from_slice(b"</td><td class=\"n\">");
    match r.connections {
        Some(n) => push_u64(out, n.into()),
        None => out.extend_from_slice(b"&ndash;"),
    }
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_u64(out, r.sessions_shut.into());
    out.extend_from_slice(b"</td></tr>\n");
}

/// `check_outlier`'s cells, each opened here (the caller closes the last).
fn outlier(r: &PeerRow, now_ms: u64, out: &mut Vec<u8>) {
    let Some(o) = &r.outlier else {
        // No check_outlier: empty cells, as HTTP for a check without HTTP.
        out.extend_from_slice(
            b"</td><td class=\"n\"></td><td></td><td class=\"n\"></td>\
<td class=\"n\"></td><td class=\"n\">",
        );
        return;
    };
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_u64(out, o.ejections);
    out.extend_from_slice(b"</td><td>");
    match shown_ejected_until(r) {
        Some(t) => {
            out.extend_from_slice(b"<span class=\"bad\" title=\"");
            push_utc(out, t);
            out.extend_from_slice(b"\">in ");
            push_age(out, t.saturating_sub(now_ms));
            out.extend_from_slice(b"</span>");
        }
        None => out.extend_from_slice(b"&ndash;"),
    }
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_u64(out, o.requests);
    out.extend_from_slice(b"</td><td class=\"n\">");
    push_u64(out, o.failures);
    out.extend_from_slice(b"</td><td class=\"n\">");
    match o.mean_ms {
        Some(ms) => push_u64(out, ms),
        None => out.extend_from_slice(b"&ndash;"),
    }
}

/// Append `s` as HTML text or attribute value (rules in the module docs).
pub fn text(out: &mut Vec<u8>, s: &[u8]) {
    lossy_runs(out, s, REPLACEMENT, |out, run| {
        let mut start = 0;
        let mut i = 0;
        while i < run.len() {
            let b = run[i];
            let (rep, len): (&[u8], usize) = match b {
                b'&' => (b"&amp;", 1),
                b'<' => (b"&lt;", 1),
                b'>' => (b"&gt;", 1),
                b'"' => (b"&quot;", 1),
                b'\'' => (b"&#39;", 1),
                b'\t' | b'\n' | b'\r' => {
                    i += 1;
                    continue;
                }
                0..=0x1f | 0x7f => (REPLACEMENT, 1),
                // U+0080..U+009F are 0xC2 0x80..=0x9F in valid UTF-8.
                0xc2 if matches!(run.get(i + 1), Some(0x80..=0x9f)) => (REPLACEMENT, 2),
                _ => {
                    i += 1;
                    continue;
                }
            };
            out.extend_from_slice(&run[start..i]);
            out.extend_from_slice(rep);
            i += len;
            start = i;
        }
        out.extend_from_slice(&run[start..]);
    });
}
