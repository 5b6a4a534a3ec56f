//! Catching nginx workers at a chosen moment of their rounds: which worker
//! holds a probe connection, freezing and thawing workers (SIGSTOP,
//! SIGCONT), and killing one between two of its rounds.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use crate::process;
use crate::wait::wait_until;

/// How long [`freeze`] waits for the processes to stop.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(10);

/// Socket inodes of TCP connections (any state but TIME_WAIT) whose remote
/// port is `port`, from /proc/net/tcp: nginx's side of probe connections.
pub fn sockets_to(port: u16) -> Vec<String> {
    let text = fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let rport = u16::from_str_radix(f.get(2)?.rsplit(':').next()?, 16).ok()?;
            let inode = *f.get(9)?;
            (rport == port && *f.get(3)? != "06" && inode != "0").then(|| inode.to_string())
        })
        .collect()
}

/// The process among `pids` holding one of the socket `inodes`.
pub fn holder(pids: &[u32], inodes: &[String]) -> Option<u32> {
    pids.iter().copied().find(|pid| {
        fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| fs::read_link(e.path()).ok())
            .any(|l| {
                let l = l.to_string_lossy();
                inodes.iter().any(|i| l == format!("socket:[{i}]"))
            })
    })
}

/// SIGSTOP `pids` and wait until all are stopped: a stopped worker can
/// neither start nor finish a round, so its sockets can be inspected.
pub fn freeze(pids: &[u32]) {
    for &p in pids {
        process::signal(p, libc::SIGSTOP).expect("SIGSTOP worker");
    }
    let deadline = Instant::now() + FREEZE_TIMEOUT;
    while !pids
        .iter()
        .all(|&p| process::stat(p).is_some_and(|s| s.state == 'T'))
    {
        assert!(Instant::now() < deadline, "workers {pids:?} did not stop");
        thread::sleep(Duration::from_millis(1));
    }
}

/// SIGCONT `pids` (those still there).
pub fn thaw(pids: &[u32]) {
    for &p in pids {
        let _ = process::signal(p, libc::SIGCONT);
    }
}

/// SIGKILL the worker `victim` between two of its rounds: frozen while it
/// holds no connection to any of `peer_ports` (the checked peers' ports).
/// It runs freely while a round is in flight, so the round can finish; a
/// worker never caught between rounds within `timeout` fails the test.
/// Returns when the signal was sent, once the worker is gone (waiting up
/// to `timeout` more): until then a connection could wake only the dying
/// worker (EPOLLEXCLUSIVE) and sit in the listen queue. Stop the master
/// first (SIGSTOP) if it must not respawn the worker.
pub fn kill_between_rounds(victim: u32, peer_ports: &[u16], timeout: Duration) -> Instant {
    let probing = || {
        let inodes: Vec<String> = peer_ports.iter().flat_map(|&p| sockets_to(p)).collect();
        holder(&[victim], &inodes).is_some()
    };
    let deadline = Instant::now() + timeout;
    loop {
        wait_until(timeout, "the worker between rounds", || !probing());
        freeze(&[victim]);
        if !probing() {
            break;
        }
        thaw(&[victim]);
        assert!(
            Instant::now() < deadline,
            "never caught the worker between rounds"
        );
    }
    process::signal(victim, libc::SIGKILL).expect("kill worker");
    let killed = Instant::now();
    wait_until(timeout, "killed worker gone", || !process::is_alive(victim));
    killed
}
