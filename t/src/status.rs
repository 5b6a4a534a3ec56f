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

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use crate::client::http_get;
use crate::wait::try_wait_for;

/// Where tests put the status location.
pub const STATUS_PATH: &str = "/status";

/// `http` or `stream` section of the status output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
                   "stream": [{"index": 0, "upstream": "s", "name": "127.0.0.1:2", "status": "down"}]}}"#,
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
        let no_checks = std::panic::catch_unwind(|| s.checks(Kind::Http, "u", "127.0.0.1:1"));
        assert!(no_checks.is_err());
        let no_row = std::panic::catch_unwind(|| s.row(Kind::Http, "s", "127.0.0.1:2").clone());
        assert!(no_row.is_err());
    }
}
