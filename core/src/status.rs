//! The `healthcheck_status` page (docs/status.md): query
//! parsing and rendering in HTML, CSV, JSON and Prometheus text format
//! 0.0.4.
//!
//! Pure formatting: the caller copies a consistent snapshot of every peer out
//! of shared memory into [`PeerRow`]s (no lock is held while we format), then
//! calls [`render_with`] (or [`render`]) once, or drives a [`Renderer`] over
//! the rows in pieces (the nginx handler does, a few hundred rows per
//! event-loop turn); either way the body is appended to one `Vec<u8>`
//! without per-row allocations. The time of the snapshot comes in as
//! [`Meta::now_ms`]; nothing here reads a clock.
//!
//! # Choices shared by every format
//!
//! - Rows are printed http first, then stream, each group in the order the
//!   rows are given (the caller passes them by `index`).
//! - `?status=up|down` filters the rows, and every total counts only the rows
//!   printed (JSON `total`/`up`/`down`, HTML headings, CSV rows,
//!   `nginx_upstream_count_*`).
//! - Names are raw bytes. Invalid UTF-8 is replaced the way
//!   [`String::from_utf8_lossy`] does it (one U+FFFD per maximal invalid
//!   sequence), so every format is valid UTF-8 and a consumer sees the same
//!   text in all of them.
//! - "Never changed" (`last_change_ms == 0`) is `null` in JSON, an empty cell
//!   in CSV, `never` in HTML and `0` in Prometheus (a sample must be a number).
//!   `down_since` is only shown while the peer is down (`null` / empty
//!   otherwise), whatever the caller put in it.
//! - "No HTTP status yet" ([`PeerRow::http_status`] `None`) is `null` in
//!   JSON, an empty cell in CSV and HTML and `0` in Prometheus, which has
//!   the series only for `http`/`https` peers and only on the full page.
//! - "No `check_outlier`" ([`PeerRow::outlier`] `None`) is `"ejections": 0`
//!   and `"outlier": null` in JSON, empty cells in CSV and HTML and no
//!   outlier series in Prometheus (which has them only on the full page).
//!   `ejected_until` is only shown while [`PeerRow::ejected`] (`null` /
//!   empty / `&ndash;` otherwise), whatever the view holds.
//!
//! See each format's module for its escaping rules: [`json`], [`csv`],
//! [`html`], [`prom`].

mod render;

pub mod c_shapes;
pub mod csv;
pub mod html;
pub mod json;
pub mod prom;
pub(crate) mod text;

pub use render::Renderer;

use crate::query;

#[cfg(test)]
mod tests;

/// Which `upstream {}` context, http or stream, a peer (or an upstream,
/// or a shared zone) belongs to. The nginx glue indexes per-context tables
/// with `group as usize`: http is 0, stream 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Group {
    #[default]
    Http = 0,
    Stream = 1,
}

impl Group {
    /// `"http"` or `"stream"`, as used in JSON keys, CSV `upstream_type` and
    /// the Prometheus `upstream_type` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Group::Http => "http",
            Group::Stream => "stream",
        }
    }
}

/// Output format of the status page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// The default when `healthcheck_status` has no argument.
    #[default]
    Html,
    Csv,
    Json,
    Prometheus,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Html, Format::Csv, Format::Json, Format::Prometheus];

    /// The name used by the directive argument and `?format=`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Format::Html => "html",
            Format::Csv => "csv",
            Format::Json => "json",
            Format::Prometheus => "prometheus",
        }
    }

    /// Exact (lowercase) match of a directive argument or `?format=` value.
    pub fn from_name(name: &[u8]) -> Option<Format> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str().as_bytes() == name)
    }
}

/// `?status=` filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Filter {
    Up,
    Down,
}

impl Filter {
    pub const fn as_str(self) -> &'static str {
        match self {
            Filter::Up => "up",
            Filter::Down => "down",
        }
    }

    /// Case-insensitive match of a `?status=` value.
    pub fn from_name(name: &[u8]) -> Option<Filter> {
        if name.eq_ignore_ascii_case(b"up") {
            Some(Filter::Up)
        } else if name.eq_ignore_ascii_case(b"down") {
            Some(Filter::Down)
        } else {
            None
        }
    }

    /// Whether a peer in state `up` is printed under this filter.
    #[inline]
    pub const fn keeps(self, up: bool) -> bool {
        match self {
            Filter::Up => up,
            Filter::Down => !up,
        }
    }
}

#[inline]
fn keeps(filter: Option<Filter>, up: bool) -> bool {
    match filter {
        None => true,
        Some(f) => f.keeps(up),
    }
}

/// What the query string asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Query {
    /// `?format=`; `None` means "use the directive's format".
    pub format: Option<Format>,
    /// `?status=`; `None` means every peer.
    pub filter: Option<Filter>,
    /// `?refresh=N`: the HTML page reloads itself every N seconds
    /// (`<meta http-equiv="refresh">`). Only used by HTML. Whole seconds,
    /// clamped to 1..=3600; `0` or an unparsable value means off (this
    /// argument is ours, not the C module's, so a bad value is ignored, not
    /// a 400).
    pub refresh: Option<u32>,
    /// `?histogram=on|off`: Prometheus prints the full page (rise, fall and
    /// the duration histogram too). `None` means "use the directive's".
    pub histogram: Option<bool>,
    /// The page is `check_status`'s: html, csv and json in the C modules'
    /// shapes ([`c_shapes`]). Set by the directive, not the query.
    pub c_shapes: bool,
}

/// Longest refresh period the HTML page accepts, in seconds.
pub const MAX_REFRESH_S: u32 = 3600;

/// Parse the raw query string (the bytes after `?`; may be empty).
///
/// Arguments are split on `&`, each into key and value at the first `=`
/// (a bare key has an empty value); keys and values are percent-decoded
/// (`%XX`, `+` = space; a malformed `%` is kept literally). Known keys are
/// `format` (exact lowercase match), `status` (case-insensitive) and
/// `refresh`; others are ignored. When a key repeats, the last one wins and
/// only it is validated. An unknown `format` or `status` value, including an
/// empty one, is an error whose text is one printable ASCII line suitable
/// for a 400 body (the offending value is escaped and truncated).
pub fn parse_query(q: &[u8]) -> Result<Query, String> {
    let mut format: Option<&[u8]> = None;
    let mut status: Option<&[u8]> = None;
    let mut refresh: Option<&[u8]> = None;
    let mut histogram: Option<&[u8]> = None;
    for (key, value) in query::pairs(q) {
        // Names in any case, as nginx's $arg_ and the C modules match them.
        let key = key.to_ascii_lowercase();
        match key.as_slice() {
            b"format" => format = Some(value),
            b"status" => status = Some(value),
            b"refresh" => refresh = Some(value),
            b"histogram" => histogram = Some(value),
            _ => {}
        }
    }
    let mut query = Query::default();
    if let Some(raw) = format {
        let value = query::percent_decode(raw);
        query.format = Some(Format::from_name(&value).ok_or_else(|| {
            format!(
                "unknown format \"{}\": use html, csv, json or prometheus",
                query::shown(&value)
            )
        })?);
    }
    if let Some(raw) = status {
        let value = query::percent_decode(raw);
        query.filter = Some(Filter::from_name(&value).ok_or_else(|| {
            format!(
                "unknown status \"{}\": use up or down",
                query::shown(&value)
            )
        })?);
    }
    if let Some(raw) = refresh {
        query.refresh = parse_refresh(&query::percent_decode(raw));
    }
    if let Some(raw) = histogram {
        let value = query::percent_decode(raw);
        query.histogram = Some(match value.as_slice() {
            b"on" => true,
            b"off" => false,
            _ => {
                return Err(format!(
                    "unknown histogram \"{}\": use on or off",
                    query::shown(&value)
                ))
            }
        });
    }
    Ok(query)
}

fn parse_refresh(v: &[u8]) -> Option<u32> {
    if v.is_empty() || v.len() > 10 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = v.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    match n {
        0 => None,
        n => Some(n.min(u64::from(MAX_REFRESH_S)) as u32),
    }
}

/// Upper bounds, in ms, of the check-duration histogram buckets; a last,
/// implicit bucket (`+Inf`) takes everything longer.
pub const DURATION_BUCKETS_MS: [u64; 12] =
    [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

/// Number of slots in [`PeerRow::duration_buckets`]: one per bound plus `+Inf`.
pub const DURATION_SLOTS: usize = DURATION_BUCKETS_MS.len() + 1;

/// The slot of [`PeerRow::duration_buckets`] a round of `ms` milliseconds
/// counts in: the first bucket whose bound is `>= ms`, else the `+Inf` slot.
pub fn duration_bucket(ms: u64) -> usize {
    DURATION_BUCKETS_MS
        .iter()
        .position(|&bound| ms <= bound)
        .unwrap_or(DURATION_BUCKETS_MS.len())
}

/// One peer's consistent snapshot (the caller copies it out of shared memory).
#[derive(Clone, Copy, Debug)]
pub struct PeerRow<'a> {
    pub group: Group,
    /// Counts from 0 separately in http and stream; with `group` it is unique.
    pub index: u32,
    /// Upstream name, raw bytes (may be hostile, non-UTF-8, long).
    pub upstream: &'a [u8],
    /// Peer address as nginx shows it (`127.0.0.1:8081`, `[::1]:80`, `unix:/x`).
    pub name: &'a [u8],
    /// The `server` line's name as written (`backend.test:8080`), raw bytes.
    pub server: &'a [u8],
    /// A `backup` server.
    pub backup: bool,
    /// The server's `weight`.
    pub weight: u32,
    /// Kept out of selection by an operator (`healthcheck_admin`
    /// `action=disable`) until enabled again; its checks go on.
    pub disabled: bool,
    /// Its upstream fails open (every peer of an upstream carries the
    /// same value): a down peer may be selected.
    pub fail_open: bool,
    /// A resolved address that found no room in the zone: nginx selects it
    /// as it would without checks; listed with status `unchecked` (and
    /// counted, and filtered, with the up peers, which also take traffic).
    /// Prometheus leaves it out: it has no check series.
    pub unchecked: bool,
    pub up: bool,
    /// Current consecutive successes.
    pub rise: u32,
    /// Current consecutive failures.
    pub fall: u32,
    /// `"tcp"`, `"udp"` or `"http"` (as [`crate::conf::CheckType::as_str`]).
    pub check_type: &'static str,
    /// Configured check port, 0 = the server's own.
    pub port: u16,
    /// Delays of successful rounds in whole ms, `-1` before the first success.
    pub last_delay_ms: i64,
    pub avg_delay_ms: i64,
    pub min_delay_ms: i64,
    pub max_delay_ms: i64,
    /// Rounds run.
    pub checks: u64,
    /// Failed rounds.
    pub fails_total: u64,
    /// Failed rounds by reason, for `nginx_upstream_server_check_failures_total`.
    /// Pass every reason the peer's check type can produce, zeros
    /// included, so each series exists from the first scrape; a reason
    /// listed twice is summed.
    pub failures_by_reason: &'a [(&'static str, u64)],
    /// `refused`, `timeout`, `reset`, `closed`, `icmp-unreachable`, `error`.
    pub last_failure_reason: Option<&'static str>,
    /// The status code of the last HTTP response the peer's check received
    /// (`type=http`), whether that round passed or not; `None` before the
    /// first one and always for a check type that speaks no HTTP (`tcp`,
    /// `udp`). JSON `null`, an empty CSV and HTML cell; Prometheus prints
    /// it (as `0` while `None`) only for `http` and `https` peers, on the
    /// full page.
    pub http_status: Option<u16>,
    /// The longest time between the starts of two of its rounds, ms: its
    /// interval, or its timeout when that is longer (a round still in
    /// flight delays the next).
    pub period_ms: u64,
    /// TLS checks (`https`, `tls`): rounds whose handshake resumed a
    /// session; `None` for other types (JSON `null`; Prometheus prints the
    /// counter only for TLS peers).
    pub tls_resumed: Option<u64>,
    /// gRPC checks (`grpc`, `grpcs`): the last `grpc-status` the check
    /// got; `None` before the first and for other types (JSON `null`, an
    /// empty CSV and HTML cell; Prometheus prints it, as `-1` while `None`,
    /// only for gRPC peers, on the full page).
    pub grpc_status: Option<u32>,
    /// Unix ms of the last up/down flip, 0 = never.
    pub last_change_ms: u64,
    /// Duration of the last round, ms (0 before the first).
    pub last_duration_ms: u64,
    /// Unix ms since which the peer is down; only shown while `up` is false.
    pub down_since_ms: Option<u64>,
    /// Check-duration histogram, **not cumulative**: slot `i` counts rounds
    /// with `DURATION_BUCKETS_MS[i-1] < ms <= DURATION_BUCKETS_MS[i]` (see
    /// [`duration_bucket`]), the last slot rounds longer than the last
    /// bound. Length [`DURATION_SLOTS`]; missing slots count as 0.
    pub duration_buckets: &'a [u64],
    /// Sum of the durations counted in `duration_buckets`, ms.
    pub duration_sum_ms: u64,
    /// Number of rounds counted in `duration_buckets` (their sum). Printed
    /// as both `_count` and the `+Inf` bucket; if a torn snapshot makes the
    /// slots add up to more, the cumulative buckets are clamped to it so the
    /// histogram stays monotonic.
    pub duration_count: u64,
    /// The other rows its probe is shared with (empty: its own probe).
    /// JSON only.
    pub shared_with: &'a [SharedRow],
    /// Ejected by `check_outlier` (then `up` is false and the last
    /// failure reason is `outlier`, whatever its check says).
    pub ejected: bool,
    /// `mandatory`: new, its first round still to come (then `up` is
    /// false); status word `checking`.
    pub checking: bool,
    /// Its upstream's `check_outlier` counters; `None` without
    /// `check_outlier`.
    pub outlier: Option<crate::outlier::View>,
    /// Drained by an operator (admin `drain`): no new sessions; status
    /// word `draining` while its check says up.
    pub draining: bool,
    /// `slow_start`: the ramp's milliseconds left, `None` when the peer is
    /// not ramping.
    pub slow_start_ms: Option<u32>,
    /// The weight the peer has now, in hundredths: its weight, or the
    /// part of it a ramp has reached.
    pub effective_weight_x100: u64,
    /// Open proxied connections as the workers last counted them, while
    /// the peer is draining (`None` otherwise).
    pub connections: Option<u32>,
    /// Proxied connections ended because the peer went down
    /// (`check_shutdown_sessions`).
    pub sessions_shut: u32,
}

impl PeerRow<'_> {
    /// The row's status word: `unchecked`, `up` or `down`.
    pub fn status_word(&self) -> &'static [u8] {
        if self.unchecked {
            b"unchecked"
        } else if self.checking && !self.up {
            b"checking"
        } else if self.draining && self.up {
            b"draining"
        } else if self.up {
            b"up"
        } else {
            b"down"
        }
    }
}

/// One upstream's summary: JSON `upstreams`, the HTML page's upstream
/// lines and the per-upstream Prometheus families. It counts **all** the
/// upstream's checked peers, whatever `?status=` prints: an upstream left
/// with no selectable peer must show as such on a filtered page too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamSummary<'a> {
    pub group: Group,
    pub name: &'a [u8],
    /// Checked peers (primary and backup).
    pub peers: u64,
    /// Peers whose check says up (disabled ones included).
    pub up: u64,
    pub down: u64,
    /// Peers an operator disabled.
    pub disabled: u64,
    /// Peers `check_outlier` ejects (their `up` is false: counted in
    /// `down`, and selectable only while the upstream fails open).
    pub ejected: u64,
    /// Peers `checking` (`mandatory`: new, before their first round;
    /// counted in `down`).
    pub checking: u64,
    /// Peers an operator drains (admin `drain`; not selectable).
    pub draining: u64,
    /// Peers selection may pick: not disabled or draining, and up or
    /// failing open.
    pub selectable: u64,
    /// The upstream fails open (a down peer may be selected).
    pub fail_open: bool,
}

/// The summaries of the upstreams of `rows`, in the order each upstream
/// first appears (the status page passes rows http first, each upstream's
/// peers together).
pub fn summarize<'a>(rows: &[PeerRow<'a>]) -> Vec<UpstreamSummary<'a>> {
    let mut out: Vec<UpstreamSummary<'a>> = Vec::new();
    let mut at: std::collections::HashMap<(Group, &'a [u8]), usize> =
        std::collections::HashMap::new();
    for r in rows {
        let last = out.len().checked_sub(1);
        let i = match last.filter(|&i| out[i].group == r.group && out[i].name == r.upstream) {
            Some(i) => i,
            None => *at.entry((r.group, r.upstream)).or_insert_with(|| {
                out.push(UpstreamSummary {
                    group: r.group,
                    name: r.upstream,
                    peers: 0,
                    up: 0,
                    down: 0,
                    disabled: 0,
                    ejected: 0,
                    checking: 0,
                    draining: 0,
                    selectable: 0,
                    fail_open: false,
                });
                out.len() - 1
            }),
        };
        let u = &mut out[i];
        u.peers += 1;
        if r.up {
            u.up += 1;
        } else {
            u.down += 1;
        }
        u.disabled += u64::from(r.disabled);
        u.ejected += u64::from(r.ejected);
        u.checking += u64::from(r.checking && !r.up);
        u.draining += u64::from(r.draining);
        u.selectable += u64::from(!r.disabled && !r.draining && (r.up || r.fail_open));
        u.fail_open |= r.fail_open;
    }
    out
}

/// Another row that shares a peer's probe (JSON's `shared_with`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedRow {
    pub group: Group,
    /// Its upstream's name, raw bytes.
    pub upstream: Vec<u8>,
    pub index: u32,
}

/// Page-wide values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// 1 after the first start, +1 per successful configuration load.
    pub generation: u64,
    /// Unix ms of the snapshot (HTML shows it and the "for 3m 12s" ages).
    pub now_ms: u64,
    /// `check_log` lines not written, both zones (JSON's `dropped_events`).
    pub dropped_events: u64,
    /// Connections the checks of the worker rendering the page hold (JSON's
    /// `check_connections`).
    pub check_connections: u64,
}

/// Append the whole response body to `out` (HTML without auto-refresh).
///
/// Same as [`render_with`] with a [`Query`] holding only `filter`.
pub fn render(
    format: Format,
    filter: Option<Filter>,
    meta: &Meta,
    rows: &[PeerRow],
    out: &mut Vec<u8>,
) {
    let query = Query {
        format: Some(format),
        filter,
        ..Query::default()
    };
    render_with(format, &query, meta, rows, out);
}

/// Append the whole response body to `out`.
///
/// `format` is the effective format (`query.format` or the directive's);
/// `query.filter` filters rows and totals; `query.refresh` turns on the HTML
/// page's auto-refresh and is kept in its links. Same output as driving a
/// [`Renderer`] over `rows` in one piece.
pub fn render_with(
    format: Format,
    query: &Query,
    meta: &Meta,
    rows: &[PeerRow],
    out: &mut Vec<u8>,
) {
    let counts = Counts::of(rows, query.filter);
    let upstreams = summarize(rows);
    out.reserve(estimate(format, rows));
    let mut page = Renderer::new(format, query, meta, counts, &upstreams, out);
    for pass in 0..page.passes() {
        page.rows(pass, printed_all(rows, None), out);
    }
    page.finish(out);
}

/// The Content-Type header value for `format`.
pub const fn content_type(format: Format) -> &'static str {
    match format {
        Format::Html => "text/html; charset=utf-8",
        Format::Csv => "text/csv; charset=utf-8",
        Format::Json => "application/json",
        Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
    }
}

/// A rough size guess so `out` grows once or twice, not log2(n) times.
fn estimate(format: Format, rows: &[PeerRow]) -> usize {
    let names: usize = rows.iter().map(|r| r.upstream.len() + r.name.len()).sum();
    size_hint(format, rows.len(), names)
}

/// A rough guess of a page's size, to reserve its buffer once: `rows`
/// printed rows whose upstream and server names add up to `name_bytes`.
pub fn size_hint(format: Format, rows: usize, name_bytes: usize) -> usize {
    let (per_row, name_copies) = match format {
        Format::Html => (600, 1),
        Format::Csv => (120, 1),
        Format::Json => (400, 1),
        // 26 samples per peer, each repeating the peer's label set.
        Format::Prometheus => (3600, 26),
    };
    2048usize
        .saturating_add(rows.saturating_mul(per_row))
        .saturating_add(name_bytes.saturating_mul(name_copies))
}

/// Rows printed under a filter, per group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCounts {
    pub total: u64,
    pub up: u64,
    pub down: u64,
}

/// Totals of the printed rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub http: GroupCounts,
    pub stream: GroupCounts,
}

impl Counts {
    /// Count the rows `filter` keeps.
    pub fn of(rows: &[PeerRow], filter: Option<Filter>) -> Counts {
        let mut c = Counts::default();
        for r in rows {
            c.count(filter, r.group, r.up);
        }
        c
    }

    /// Count one peer of `group` if `filter` keeps it.
    pub fn count(&mut self, filter: Option<Filter>, group: Group, up: bool) {
        if !keeps(filter, up) {
            return;
        }
        let g = match group {
            Group::Http => &mut self.http,
            Group::Stream => &mut self.stream,
        };
        g.total += 1;
        if up {
            g.up += 1;
        } else {
            g.down += 1;
        }
    }

    pub fn group(&self, group: Group) -> GroupCounts {
        match group {
            Group::Http => self.http,
            Group::Stream => self.stream,
        }
    }

    pub fn total(&self) -> u64 {
        self.http.total + self.stream.total
    }

    pub fn up(&self) -> u64 {
        self.http.up + self.stream.up
    }

    pub fn down(&self) -> u64 {
        self.http.down + self.stream.down
    }
}

/// The printed rows of one group, in the order given.
fn printed<'r, 'a>(
    rows: &'r [PeerRow<'a>],
    group: Group,
    filter: Option<Filter>,
) -> impl Iterator<Item = &'r PeerRow<'a>> + 'r {
    rows.iter()
        .filter(move |r| r.group == group && keeps(filter, r.up))
}

/// Printed rows, http first, then stream.
fn printed_all<'r, 'a>(
    rows: &'r [PeerRow<'a>],
    filter: Option<Filter>,
) -> impl Iterator<Item = &'r PeerRow<'a>> + 'r {
    printed(rows, Group::Http, filter).chain(printed(rows, Group::Stream, filter))
}

/// `down_since` as shown: only while down.
#[inline]
fn shown_down_since(r: &PeerRow) -> Option<u64> {
    if r.up {
        None
    } else {
        r.down_since_ms
    }
}

/// `ejected_until` as shown: only while ejected, and only with
/// `check_outlier`'s view.
#[inline]
fn shown_ejected_until(r: &PeerRow) -> Option<u64> {
    if r.ejected {
        r.outlier.and_then(|o| o.ejected_until_ms)
    } else {
        None
    }
}

/// `last_change` as shown: `None` = never.
#[inline]
fn shown_last_change(r: &PeerRow) -> Option<u64> {
    (r.last_change_ms != 0).then_some(r.last_change_ms)
}
