//! What `ss` (iproute2) shows about TCP connections on loopback. `ss` asks
//! the kernel (sock_diag, filtered there): `/proc/net/tcp` lists every
//! socket of the host, which takes seconds with many in TIME_WAIT.

use std::process::{Command, Stdio};
use std::time::Duration;

/// `ss <args>`; its output. Panics unless it ran and succeeded.
pub fn ss(args: &[&str]) -> String {
    let out = Command::new("ss")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ss (iproute2)");
    assert!(out.status.success(), "ss {args:?} failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ss -tno` lines of established connections to `127.0.0.1:port`.
pub fn established_lines(port: u16) -> Vec<String> {
    ss(&[
        "-tnoH",
        "state",
        "established",
        "dst",
        &format!("127.0.0.1:{port}"),
    ])
    .lines()
    .filter(|l| !l.trim().is_empty())
    .map(str::to_string)
    .collect()
}

/// Socket inodes of established connections to `127.0.0.1:port` (on
/// loopback: the client side of connections to a server on `port`).
pub fn established_inodes(port: u16) -> Vec<u64> {
    ss(&[
        "-tneH",
        "state",
        "established",
        "dst",
        &format!("127.0.0.1:{port}"),
    ])
    .split_whitespace()
    .filter_map(|w| w.strip_prefix("ino:")?.parse().ok())
    .filter(|&ino| ino != 0)
    .collect()
}

/// Remaining time of the `timer:(keepalive,...)` in an `ss -o` line.
/// ss prints e.g. `4.688ms` (4 s 688 ms), `996ms`, `12sec`, `1min39sec`.
pub fn keepalive_timer(line: &str) -> Option<Duration> {
    let rest = &line[line.find("timer:(keepalive,")? + "timer:(keepalive,".len()..];
    let mut t = &rest[..rest.find(',')?];
    let mut ms: u64 = 0;
    if let Some(i) = t.find("min") {
        ms += t[..i].parse::<u64>().ok()? * 60_000;
        t = &t[i + 3..];
    }
    if let Some(s) = t.strip_suffix("sec") {
        ms += s.parse::<u64>().ok()? * 1000;
    } else if let Some(m) = t.strip_suffix("ms") {
        match m.split_once('.') {
            Some((s, m)) => ms += s.parse::<u64>().ok()? * 1000 + m.parse::<u64>().ok()?,
            None => ms += m.parse::<u64>().ok()?,
        }
    } else if !t.is_empty() {
        return None;
    }
    Some(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_timer_parsing() {
        let t = |s: &str| keepalive_timer(&format!("x timer:(keepalive,{s},0) y"));
        assert_eq!(t("4.688ms"), Some(Duration::from_millis(4688)));
        assert_eq!(t("996ms"), Some(Duration::from_millis(996)));
        assert_eq!(t("12sec"), Some(Duration::from_secs(12)));
        assert_eq!(t("1min39sec"), Some(Duration::from_secs(99)));
        assert_eq!(t("2min"), Some(Duration::from_secs(120)));
        assert_eq!(keepalive_timer("no timer"), None);
    }
}
