//! Reading the `healthcheck_status` JSON output (docs/status.md):
//!
//! ```text
//! {"servers": {"total": 4, "up": 3, "down": 1, "generation": 2,
//!   "http":   [{"index": 0, "upstream": "web", "name": "127.0.0.1:8081",
//!               "status": "up", "rise": 2, "fall": 0, ...}],
//!   "stream": [...]}}
//! ```
//!
//! Tests configure the endpoint as `location /status { healthcheck_status; }`
//! (any format: the helpers ask for `?format=json`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::http_get;
use crate::wait::try_wait_for;

/// Where tests put the status location.
pub const STATUS_PATH: &str = "/status";

/// `http` or `stream` section of the status output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Peers of `http { upstream {} }`.
    Http,
    /// Peers of `stream { upstream {} }`.
    Stream,
}

impl Kind {
    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Kind::Http => "http",
            Kind::Stream => "stream",
        }
    }
}

/// One parsed status document.
#[derive(Clone, Debug, PartialEq)]
pub struct Status(pub Value);

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Status {
    fn servers(&self) -> &Value {
        &self.0["servers"]
    }

    /// `servers.total`.
    pub fn total(&self) -> Option<i64> {
        self.servers()["total"].as_i64()
    }

    /// `servers.up`.
    pub fn up(&self) -> Option<i64> {
        self.servers()["up"].as_i64()
    }

    /// `servers.down`.
    pub fn down(&self) -> Option<i64> {
        self.servers()["down"].as_i64()
    }

    /// `servers.generation`.
    pub fn generation(&self) -> Option<i64> {
        self.servers()["generation"].as_i64()
    }

    /// The peer rows of one section (empty if absent).
    pub fn peers(&self, kind: Kind) -> &[Value] {
        self.servers()[kind.key()]
            .as_array()
            .map_or(&[], Vec::as_slice)
    }

    /// The row of `name` (e.g. `127.0.0.1:8081`) in `upstream`.
    pub fn peer(&self, kind: Kind, upstream: &str, name: &str) -> Option<&Value> {
        self.peers(kind)
            .iter()
            .find(|p| p["upstream"] == upstream && p["name"] == name)
    }

    /// The `status` field (`up`/`down`) of that row.
    pub fn peer_status(&self, kind: Kind, upstream: &str, name: &str) -> Option<&str> {
        self.peer(kind, upstream, name)?["status"].as_str()
    }

    /// Whether that row exists and is `up`.
    pub fn is_up(&self, kind: Kind, upstream: &str, name: &str) -> bool {
        self.peer_status(kind, upstream, name) == Some("up")
    }

    /// Whether that row exists and is `down`.
    pub fn is_down(&self, kind: Kind, upstream: &str, name: &str) -> bool {
        self.peer_status(kind, upstream, name) == Some("down")
    }

    /// The row of `name` in `upstream`; panics with the document if there
    /// is none.
    pub fn row(&self, kind: Kind, upstream: &str, name: &str) -> &Value {
        self.peer(kind, upstream, name)
            .unwrap_or_else(|| panic!("no {kind:?} row {upstream} {name}: {self}"))
    }

    /// An integer field of that row, `None` if the row or the field is
    /// missing (or the field is not an integer).
    pub fn get_int(&self, kind: Kind, upstream: &str, name: &str, field: &str) -> Option<i64> {
        self.peer(kind, upstream, name)?[field].as_i64()
    }

    /// An integer field of that row; panics with the document if the row
    /// is missing or the field is not an integer.
    pub fn int(&self, kind: Kind, upstream: &str, name: &str, field: &str) -> i64 {
        self.row(kind, upstream, name)[field]
            .as_i64()
            .unwrap_or_else(|| panic!("{upstream} {name}: {field} is not an integer: {self}"))
    }

    /// `checks` (rounds run) of that row; panics like [`Status::int`].
    pub fn checks(&self, kind: Kind, upstream: &str, name: &str) -> i64 {
        self.int(kind, upstream, name, "checks")
    }

    /// `last_failure_reason` of that row (`timeout`, `refused`, ...):
    /// `None` while it is null (no round has failed) or if there is no
    /// such row.
    pub fn reason(&self, kind: Kind, upstream: &str, name: &str) -> Option<&str> {
        self.peer(kind, upstream, name)?["last_failure_reason"].as_str()
    }
}

/// Identifies one status row, for tests that follow several rows (maps
/// keyed by row, [`first_seen`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    /// The section.
    pub kind: Kind,
    /// The upstream's name.
    pub upstream: String,
    /// The peer's name (`127.0.0.1:8081`).
    pub name: String,
}

impl Row {
    /// The row of `name` in `upstream` of section `kind`.
    pub fn new(kind: Kind, upstream: &str, name: &str) -> Row {
        Row {
            kind,
            upstream: upstream.to_string(),
            name: name.to_string(),
        }
    }

    /// Its `status` (`up`/`down`) in `s`, `None` if it has no such row.
    pub fn status<'a>(&self, s: &'a Status) -> Option<&'a str> {
        s.peer_status(self.kind, &self.upstream, &self.name)
    }

    /// An integer field of the row (`checks`, `rise`, `fall`, ...); -1 if
    /// the row or the field is absent.
    pub fn int(&self, s: &Status, key: &str) -> i64 {
        s.get_int(self.kind, &self.upstream, &self.name, key)
            .unwrap_or(-1)
    }
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {} {}", self.kind, self.upstream, self.name)
    }
}

/// When a row was first seen holding, as durations since `since`: after
/// `after` (the request for the last page on which it did not hold yet; 0
/// if none did) and by `by` (the answer of the first page on which it did).
/// The two are a poll apart unless the test was slowed down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Not yet on the page requested then.
    pub after: Duration,
    /// On the page answered then.
    pub by: Duration,
}

/// Poll the status page until `pred` has held for every row in `rows`;
/// returns, per row, when after `since` it was first seen holding.
/// Panics after `timeout` with the rows still waiting and the last page.
pub fn first_seen(
    port: u16,
    since: Instant,
    timeout: Duration,
    what: &str,
    rows: &[Row],
    mut pred: impl FnMut(&Row, &Status) -> bool,
) -> BTreeMap<Row, Seen> {
    let mut seen = BTreeMap::new();
    let mut not_yet = Duration::ZERO;
    let mut last = String::from("no status yet");
    let done = try_wait_for(timeout, || {
        let asked = since.elapsed();
        match status_json(port) {
            Ok(s) => {
                let by = since.elapsed();
                for r in rows {
                    if !seen.contains_key(r) && pred(r, &s) {
                        seen.insert(r.clone(), Seen { after: not_yet, by });
                    }
                }
                not_yet = asked;
                last = s.to_string();
            }
            Err(e) => last = e,
        }
        (seen.len() == rows.len()).then_some(())
    });
    if done.is_none() {
        let waiting: Vec<String> = rows
            .iter()
            .filter(|r| !seen.contains_key(*r))
            .map(Row::to_string)
            .collect();
        panic!("timed out after {timeout:?} waiting for {what}: still waiting for {waiting:?}; last status: {last}");
    }
    seen
}

/// Assert that what was first seen at `at` happened within `[lo, hi]`:
/// fails only when the pages prove it came earlier (seen by `at.by < lo`)
/// or later (not yet after `at.after > hi`).
pub fn assert_within(at: Seen, lo: Duration, hi: Duration, what: impl fmt::Display) {
    assert!(
        at.by >= lo && at.after <= hi,
        "{what}: observed after {:?} and by {:?}, expected within [{lo:?}, {hi:?}]",
        at.after,
        at.by
    );
}

/// GET `path` and parse the body as JSON; `Err` says what went wrong
/// (connection, status code, or the body that failed to parse).
pub fn get_json(port: u16, path: &str) -> Result<Value, String> {
    let r = http_get(port, path).map_err(|e| format!("GET {path} on port {port}: {e}"))?;
    if r.status != 200 {
        return Err(format!(
            "GET {path}: status {} body {:?}",
            r.status,
            r.text()
        ));
    }
    serde_json::from_slice(&r.body)
        .map_err(|e| format!("GET {path}: invalid JSON ({e}): {:?}", r.text()))
}

/// The status document from `/status?format=json` on `port`.
pub fn status_json(port: u16) -> Result<Status, String> {
    get_json(port, &format!("{STATUS_PATH}?format=json")).map(Status)
}

/// Poll the status document until `pred` holds, for at most `timeout`.
/// Returns the matching document; on timeout, panics with `what` and the
/// last document (or the last error) seen.
pub fn poll_status_json(
    port: u16,
    timeout: Duration,
    what: impl fmt::Display,
    mut pred: impl FnMut(&Status) -> bool,
) -> Status {
    let mut last = Err("no attempt".to_string());
    let found = try_wait_for(timeout, || {
        last = status_json(port);
        match &last {
            Ok(s) if pred(s) => Some(s.clone()),
            _ => None,
        }
    });
    found.unwrap_or_else(|| match last {
        Ok(s) => panic!("timed out after {timeout:?} waiting for {what}; last status: {s}"),
        Err(e) => panic!("timed out after {timeout:?} waiting for {what}; last error: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_spec_shape() {
        let s = Status(
            serde_json::from_str(
                r#"{"servers": {"total": 2, "up": 1, "down": 1, "generation": 1,
                   "http": [{"index": 0, "upstream": "u", "name": "127.0.0.1:1", "status": "up"}],
                   "stream": [{"index": 0, "upstream": "s", "name": "127.0.0.1:2", "status": "down",
                               "last_failure_reason": "refused"}]}}"#,
            )
            .unwrap(),
        );
        assert_eq!(
            (s.total(), s.up(), s.down(), s.generation()),
            (Some(2), Some(1), Some(1), Some(1))
        );
        assert!(s.is_up(Kind::Http, "u", "127.0.0.1:1"));
        assert!(s.is_down(Kind::Stream, "s", "127.0.0.1:2"));
        assert!(s.peer(Kind::Http, "s", "127.0.0.1:2").is_none());
        assert_eq!(s.peers(Kind::Stream).len(), 1);
        assert_eq!(s.row(Kind::Http, "u", "127.0.0.1:1")["index"], 0);
        assert_eq!(s.int(Kind::Stream, "s", "127.0.0.1:2", "index"), 0);
        assert_eq!(s.get_int(Kind::Stream, "s", "127.0.0.1:2", "checks"), None);
        assert_eq!(s.get_int(Kind::Http, "s", "127.0.0.1:2", "index"), None);
        assert_eq!(s.reason(Kind::Http, "u", "127.0.0.1:1"), None);
        assert_eq!(s.reason(Kind::Http, "s", "127.0.0.1:2"), None);
        assert_eq!(s.reason(Kind::Stream, "s", "127.0.0.1:2"), Some("refused"));
        let r = Row::new(Kind::Stream, "s", "127.0.0.1:2");
        assert_eq!(
            (r.status(&s), r.int(&s, "index"), r.int(&s, "checks")),
            (Some("down"), 0, -1)
        );
        let no_checks = std::panic::catch_unwind(|| s.checks(Kind::Http, "u", "127.0.0.1:1"));
        assert!(no_checks.is_err());
        let no_row = std::panic::catch_unwind(|| s.row(Kind::Http, "s", "127.0.0.1:2").clone());
        assert!(no_row.is_err());
    }
}
