//! Process inspection through `/proc`: children, titles, open descriptors.

use std::fs;
use std::io;
use std::thread;
use std::time::Duration;

/// Pids whose parent is `ppid` (scans `/proc/*/stat`; kernels here lack
/// `/proc/<pid>/task/*/children`).
pub fn children(ppid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|s| s.ppid == ppid && s.state != 'Z'))
        .collect();
    pids.sort_unstable();
    pids
}

/// The fields of `/proc/<pid>/stat` the harness uses.
#[derive(Clone, Copy, Debug)]
pub struct Stat {
    /// Process state letter (`R`, `S`, `Z`, …).
    pub state: char,
    /// Parent pid.
    pub ppid: u32,
}

/// Read `/proc/<pid>/stat`; `None` if the process is gone.
pub fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything: the
    // fixed fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(Stat { state, ppid })
}

/// Whether `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|s| s.state != 'Z')
}

/// The process title (`/proc/<pid>/cmdline` with NULs as spaces, trimmed);
/// nginx rewrites it to e.g. `nginx: worker process`.
pub fn title(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text = String::from_utf8_lossy(&raw).replace('\0', " ");
    Some(text.trim().to_string())
}

/// Send `sig` (e.g. `libc::SIGKILL`) to `pid`.
pub fn signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    crate::sys::kill(pid, sig)
}

/// Number of open file descriptors of `pid`.
pub fn fd_count(pid: u32) -> io::Result<usize> {
    Ok(fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// The smallest of a few fd counts of `pid` taken 25 ms apart: a round in
/// flight holds a socket for a moment, a leaked one stays. Panics if `pid`
/// is gone.
pub fn resting_fds(pid: u32) -> usize {
    (0..8)
        .map(|_| {
            thread::sleep(Duration::from_millis(25));
            fd_count(pid).expect("fd count")
        })
        .min()
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn sees_own_child() {
        let mut child = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let me = std::process::id();
        assert!(children(me).contains(&child.id()));
        assert!(is_alive(child.id()));
        // spawn() returns once the child is forked, maybe before it has
        // exec'd `sleep`: until then its title is this test binary's.
        let exec_deadline = std::time::Duration::from_secs(10);
        crate::wait::wait_until(exec_deadline, "the child to exec sleep", || {
            title(child.id()).is_some_and(|t| t.starts_with("sleep"))
        });
        assert!(fd_count(child.id()).unwrap() >= 1);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_alive(child.id()));
    }
}
