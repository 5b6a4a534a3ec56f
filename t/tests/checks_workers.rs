//! Checks across worker processes (docs/design.md, How checks work): one
//! round per peer per interval for the whole instance, takeover when a
//! worker is killed, no descriptor leaks, prompt exit on reload and quit.

use std::thread;
use std::time::{Duration, Instant};

use healthcheck_t::conf::web_conf;
use healthcheck_t::workers::{freeze, holder, kill_between_rounds, sockets_to, thaw};
use healthcheck_t::{
    first_seen, free_port, ms, poll_status_json, process, status_json, wait_until, Backend, Kind,
    Mode, Nginx, Row,
};

const LONG: Duration = Duration::from_secs(10);

fn rows(backends: &[Backend]) -> Vec<Row> {
    backends
        .iter()
        .map(|b| Row::new(Kind::Http, "web", &b.addr()))
        .collect()
}

/// Wait until every peer ran at least `n` rounds.
fn wait_rounds(port: u16, rows: &[Row], n: i64) {
    first_seen(
        port,
        Instant::now(),
        LONG,
        format!("{n} rounds").as_str(),
        rows,
        |r, s| r.int(s, "checks") >= n,
    );
}

/// Accepts of `b` in `[from, to)`.
fn accepts_between(b: &Backend, from: Instant, to: Instant) -> usize {
    b.accept_times()
        .iter()
        .filter(|&&t| t >= from && t < to)
        .count()
}

/// Let `d` pass: a measurement window, not a wait for a condition. Returns
/// its start and end, `d` apart: the test may wake up later than the end,
/// and what it counts by timestamps must not include that.
fn window(d: Duration) -> (Instant, Instant) {
    let (from, end) = (Instant::now(), Instant::now() + d);
    wait_until(d + Duration::from_secs(1), "window end", || {
        Instant::now() >= end
    });
    (from, end)
}

/// Rounds counted between two status pages, the first read within
/// `first`, the second within `second`: `[min, max]` rounds at one per
/// `interval`, give or take one for the phase.
fn rounds_bounds(
    first: (Instant, Instant),
    second: (Instant, Instant),
    interval: u64,
) -> (i64, i64) {
    let per = |d: Duration| (d.as_millis() / u128::from(interval)) as i64;
    (
        per(second.0.saturating_duration_since(first.1)) - 1,
        per(second.1.saturating_duration_since(first.0)) + 1,
    )
}

// worker_processes 4: every peer is probed once per interval by the whole
// instance, not once per worker.
#[test]
fn one_probe_per_peer_per_interval_with_four_workers() {
    const INTERVAL: u64 = 200;
    const K: usize = 10;
    let backends: Vec<Backend> = (0..6).map(|_| Backend::start()).collect();
    let (_ng, port) = Nginx::builder().workers(4).start_with(|| {
        let port = free_port();
        (
            web_conf(
                port,
                &backends,
                &format!("check interval={INTERVAL} rise=1 fall=1;"),
            ),
            port,
        )
    });
    let rows = rows(&backends);
    wait_rounds(port, &rows, 2);

    let t0 = Instant::now();
    let before = status_json(port).expect("status");
    let t1 = Instant::now();
    let (from, to) = window(ms(INTERVAL * K as u64));
    let t2 = Instant::now();
    let after = status_json(port).expect("status");
    let t3 = Instant::now();
    // K intervals, unless the test woke up late or a status page was slow.
    let (lo, hi) = rounds_bounds((t0, t1), (t2, t3), INTERVAL);
    for (b, r) in backends.iter().zip(&rows) {
        let n = accepts_between(b, from, to);
        assert!(
            (K - 1..=K + 1).contains(&n),
            "{r}: {n} probes in {K} intervals (expected {K} +- 1)"
        );
        let rounds = r.int(&after, "checks") - r.int(&before, "checks");
        assert!(
            (lo..=hi).contains(&rounds),
            "{r}: {rounds} rounds counted between the pages, {lo}..={hi} expected \
             ({K} intervals but for late wake-ups: {:?})",
            t3 - t0
        );
    }
}

/// SIGSTOPs the nginx master so it does not respawn a killed worker;
/// SIGCONT when dropped (also when the test fails).
struct MasterStopped(u32);

impl MasterStopped {
    fn new(ng: &Nginx) -> Self {
        ng.signal(libc::SIGSTOP);
        MasterStopped(ng.pid())
    }
}

impl Drop for MasterStopped {
    fn drop(&mut self) {
        let _ = process::signal(self.0, libc::SIGCONT);
    }
}

/// Longest gap between consecutive accepts of `b` from the last accept
/// before `since` on.
fn longest_gap_since(b: &Backend, since: Instant) -> Duration {
    let times = b.accept_times();
    let first = times.iter().rposition(|&t| t < since).unwrap_or(0);
    times[first..]
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

// A worker killed between rounds: the survivors take its peers over within
// two intervals, rounds keep being counted, a failing peer still goes down.
// The master is stopped meanwhile, so the dead worker is not respawned
// (takeover, not respawn, keeps the checks going). After it resumes and
// respawns the worker, each peer is again probed once per interval.
#[test]
fn killed_worker_between_rounds_does_not_stop_checks() {
    const INTERVAL: u64 = 300;
    let backends: Vec<Backend> = (0..4).map(|_| Backend::with_mode(Mode::Hang)).collect();
    let (ng, port) = Nginx::builder().workers(2).start_with(|| {
        let port = free_port();
        (
            web_conf(
                port,
                &backends,
                &format!("check interval={INTERVAL} timeout=200 rise=1 fall=2;"),
            ),
            port,
        )
    });
    ng.allow_log("exited on signal 9");
    let rows = rows(&backends);
    wait_rounds(port, &rows, 2);

    let stopped = MasterStopped::new(&ng);
    let victim = ng.workers()[0];
    let ports: Vec<u16> = backends.iter().map(Backend::port).collect();
    let killed = kill_between_rounds(victim, &ports, LONG);
    let before = status_json(port).expect("status from the surviving worker");

    window(ms(INTERVAL * 6));
    for (b, r) in backends.iter().zip(&rows) {
        let gap = longest_gap_since(b, killed);
        assert!(
            gap <= ms(2 * INTERVAL + 150),
            "{r}: {gap:?} without a probe after its worker was killed (takeover within 2 intervals)"
        );
    }
    // A taken-over peer is run when overdue by an interval, i.e. every
    // second interval while its owner is gone: at least 2 rounds in 6.
    let after = status_json(port).expect("status");
    for r in &rows {
        assert!(
            r.int(&after, "checks") >= r.int(&before, "checks") + 2,
            "{r}: rounds stopped being counted: {before} -> {after}"
        );
    }

    // Peers 0 and 1 belong to different worker slots: both go down.
    backends[0].set_mode(Mode::Refuse);
    backends[1].set_mode(Mode::Refuse);
    first_seen(
        port,
        Instant::now(),
        LONG,
        "refusing peers down",
        &rows[..2],
        |r, s| r.status(s) == Some("down"),
    );

    drop(stopped);
    wait_until(LONG, "worker respawned", || {
        let w = ng.workers();
        w.len() == 2 && !w.contains(&victim)
    });
    const K: u64 = 8;
    let (from, to) = window(ms(INTERVAL * K));
    for (b, r) in backends[2..].iter().zip(&rows[2..]) {
        let n = accepts_between(b, from, to) as u64;
        assert!(
            (K - 1..=K + 1).contains(&n),
            "{r}: {n} probes in {K} intervals after the respawn"
        );
    }
}

// A worker killed in the middle of a round (its probe connection open):
// the round it leaves unfinished must not block the peer for longer than
// the takeover rule allows (docs/design.md, How rounds are scheduled: if
// the worker that owns a peer dies or stalls, another takes the peer over
// within 2 intervals).
#[test]
fn killed_worker_mid_round_is_taken_over_within_two_intervals() {
    const INTERVAL: u64 = 500;
    // Hang: the probe connects, then watches a silent connection for the
    // settle window (timeout / 4 = 100 ms) before closing it.
    let backends = vec![Backend::with_mode(Mode::Hang), Backend::start()];
    let (ng, port) = Nginx::builder().workers(2).start_with(|| {
        let port = free_port();
        (
            web_conf(
                port,
                &backends,
                &format!("check interval={INTERVAL} timeout=400 rise=1 fall=2;"),
            ),
            port,
        )
    });
    ng.allow_log("exited on signal 9");
    wait_rounds(port, &rows(&backends), 2);
    let _stopped = MasterStopped::new(&ng);
    let hang = &backends[0];
    let workers = ng.workers();

    // Catch a round in flight: on a fresh probe, freeze both workers; the
    // one holding the probe connection is mid-round. Kill it.
    let deadline = Instant::now() + LONG;
    let (victim, round_start) = loop {
        let seen = hang.accepted();
        while hang.accepted() == seen {
            assert!(Instant::now() < deadline, "no probe caught in flight");
            thread::sleep(ms(1));
        }
        let started = *hang.accept_times().last().unwrap();
        freeze(&workers);
        let found = holder(&workers, &sockets_to(hang.port()));
        if let Some(pid) = found {
            process::signal(pid, libc::SIGKILL).expect("kill worker");
        }
        thaw(&workers);
        if let Some(pid) = found {
            break (pid, started);
        }
    };

    wait_until(LONG, "next probe", || {
        hang.accept_times().iter().any(|&t| t > round_start)
    });
    let next = *hang
        .accept_times()
        .iter()
        .find(|&&t| t > round_start)
        .unwrap();
    let gap = next - round_start;
    assert!(
        gap <= ms(2 * INTERVAL + 200),
        "worker {victim} killed mid-round: next probe {gap:?} after the abandoned round started \
         (interval {INTERVAL} ms, expected within 2 intervals)"
    );
}

/// The fewest open descriptors seen in `samples` looks at `pid`: probe
/// sockets come and go, the baseline is what remains between rounds.
fn baseline_fds(pid: u32, samples: usize) -> usize {
    (0..samples)
        .map(|_| {
            let n = process::fd_count(pid).expect("fd count");
            thread::sleep(ms(3));
            n
        })
        .min()
        .unwrap()
}

// After 200 rounds per worker against every kind of server, each worker's
// descriptor count is where it started, give or take its spare sockets
// (at most one per peer it checks).
#[test]
fn fd_count_flat_after_200_rounds_per_worker() {
    let modes = [
        Mode::Serve,
        Mode::Refuse,
        Mode::Hang,
        Mode::Rst,
        Mode::Fin,
        Mode::Silent,
    ];
    let backends: Vec<Backend> = modes
        .iter()
        .chain(&modes)
        .map(|&m| Backend::with_mode(m))
        .collect();
    // timeout 40: a settle window of 10 ms, so probe sockets are rarely
    // open when the descriptors are counted.
    let (ng, port) = Nginx::builder().workers(2).start_with(|| {
        let port = free_port();
        (
            web_conf(
                port,
                &backends,
                "check interval=100 timeout=40 rise=1 fall=1;",
            ),
            port,
        )
    });
    let rows = rows(&backends);
    wait_rounds(port, &rows, 2);
    let workers = ng.workers();
    let before: Vec<usize> = workers.iter().map(|&p| baseline_fds(p, 60)).collect();
    let start = status_json(port).expect("status");
    let total = |s: &healthcheck_t::Status| rows.iter().map(|r| r.int(s, "checks")).sum::<i64>();
    let target = total(&start) + 200 * workers.len() as i64;
    poll_status_json(
        port,
        Duration::from_secs(20),
        "200 rounds per worker",
        |s| total(s) >= target,
    );
    assert_eq!(ng.workers(), workers, "workers changed");
    let after: Vec<usize> = workers.iter().map(|&p| baseline_fds(p, 60)).collect();
    // A worker keeps the sockets of finished rounds as spares for its next
    // rounds: between rounds it may hold up to one per peer it checks
    // (as many as it ever had rounds in flight at once), no more. A socket
    // lost per round would show as 200.
    let per_worker = backends.len().div_ceil(workers.len());
    for (i, (&a, &b)) in after.iter().zip(&before).enumerate() {
        assert!(
            a <= b + per_worker,
            "worker {}: {b} descriptors before 200 rounds, {a} after (bound {b} + {per_worker} spares); \
             all workers {workers:?}: before {before:?}, after {after:?}",
            workers[i]
        );
    }
}

// Old workers exit at once after a reload, and nginx quits at once: the
// probe timers are cancelable and the check connections are closed. The
// interval (4 s) is far longer than the deadline, so a worker waiting for
// its next probe timer would be caught.
#[test]
fn old_workers_exit_promptly_on_reload_and_quit() {
    const TIMEOUT: u64 = 500;
    let backends: Vec<Backend> = [Mode::Hang, Mode::Serve, Mode::Silent, Mode::Refuse]
        .into_iter()
        .map(Backend::with_mode)
        .collect();
    let check = format!("check interval=4000 timeout={TIMEOUT} rise=1 fall=1;");
    let (mut ng, port) = Nginx::builder().workers(2).start_with(|| {
        let port = free_port();
        (web_conf(port, &backends, &check), port)
    });
    let rows = rows(&backends);
    wait_rounds(port, &rows, 1);
    let deadline = ms(TIMEOUT + 1000);

    let old = ng.workers();
    let reloaded = Instant::now();
    ng.reload();
    ng.wait_workers_gone(&old, deadline);
    eprintln!("old workers gone {:?} after SIGHUP", reloaded.elapsed());
    let s = poll_status_json(port, LONG, "generation 2", |s| s.generation() == Some(2));
    assert_eq!(s.total(), Some(backends.len() as i64), "{s}");

    let quitting = Instant::now();
    ng.quit();
    assert!(
        quitting.elapsed() <= deadline,
        "nginx took {:?} to quit",
        quitting.elapsed()
    );
}

// A down peer's rounds run at down_interval, and so does the takeover
// (docs/design.md, How rounds are scheduled): with the owner killed, another worker
// probes each down peer within two down_intervals, not two intervals (ten
// times as long here). An http check fails every round on a hanging
// backend, whose accepts still show each probe.
#[test]
fn killed_owner_of_down_peers_is_replaced_within_two_down_intervals() {
    const INTERVAL: u64 = 3000;
    const DOWN: u64 = 300;
    // One peer per worker: the victim is between rounds two thirds of
    // the time.
    let backends: Vec<Backend> = (0..2).map(|_| Backend::with_mode(Mode::Hang)).collect();
    let (ng, port) = Nginx::builder().workers(2).start_with(|| {
        let port = free_port();
        (
            web_conf(
                port,
                &backends,
                &format!(
                    "check type=http interval={INTERVAL} down_interval={DOWN} timeout=100 \
                     default_down=true rise=1 fall=1;"
                ),
            ),
            port,
        )
    });
    ng.allow_log("exited on signal 9");
    let rows = rows(&backends);
    wait_rounds(port, &rows, 2);
    let s = status_json(port).expect("status");
    for r in &rows {
        assert_eq!(r.status(&s), Some("down"), "{r}: {s}");
    }

    let stopped = MasterStopped::new(&ng);
    let victim = ng.workers()[0];
    let ports: Vec<u16> = backends.iter().map(Backend::port).collect();
    let killed = kill_between_rounds(victim, &ports, LONG);

    let (_, end) = window(ms(DOWN * 8));
    for (b, r) in backends.iter().zip(&rows) {
        // From the last probe before the kill to the window's end: the
        // time from the last probe to the end counts as a gap too.
        let mut times = b.accept_times();
        let from = times.iter().rposition(|&t| t < killed).unwrap_or(0);
        times.retain(|&t| t < end);
        times.push(end);
        let gap = times[from..]
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default();
        assert!(
            gap <= ms(2 * DOWN + 150),
            "{r}: {gap:?} without a probe after its worker was killed (takeover within \
             2 down_intervals of {DOWN} ms; interval is {INTERVAL} ms)"
        );
    }
    drop(stopped);
}
