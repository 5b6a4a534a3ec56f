//! What a TCP check decides and what operators see (docs/directives.md, check; docs/design.md, How checks work):
//! rise/fall with a flapping peer, `default_down`, `port=`, how each kind
//! of misbehaving server is classified, IPv6 and unix peers, `down` and
//! `backup` servers, the state-change log lines, and no TIME_WAIT.

use std::net::{Ipv6Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use healthcheck_t::peers::{Peers, Role, Switch, UnixServer};
use healthcheck_t::{
    assert_within, first_seen, free_port, free_ports, http_get, ms, poll_status_json, status_json,
    stream_roundtrip, Backend, Kind, Mode, Nginx, Row, Status,
};

/// Generous bound for "eventually" waits; the precise windows are asserted
/// separately.
const LONG: Duration = Duration::from_secs(10);

fn http_only(port: u16, upstreams: &str, locations: &str) -> String {
    healthcheck_t::conf::http_conf_with(port, upstreams, locations)
}

/// Wait for the next committed round of `row` after `after` checks; the
/// status page of that moment, or `Err` if more than one round passed (the
/// test then lost its lockstep with the rounds).
fn next_round(port: u16, row: &Row, after: i64, interval: u64) -> Result<Status, String> {
    let s = poll_status_json(
        port,
        ms(interval * 3),
        format!("round {}", after + 1),
        |s| row.int(s, "checks") > after,
    );
    if row.int(&s, "checks") != after + 1 {
        return Err(format!(
            "a round after round {after} passed unobserved: {s}"
        ));
    }
    Ok(s)
}

/// Switch `b` to `mode` between round `done` (committed, `accepted` the
/// backend's accept count when it was seen) and the next; `Err` if the
/// switch came too late, after the next round had started: a round that
/// connected before a switch to Refuse was accepted, and one that was
/// refused before a switch to Serve is counted at once.
fn switch(
    port: u16,
    b: &Backend,
    row: &Row,
    mode: Mode,
    done: i64,
    accepted: usize,
) -> Result<(), String> {
    b.set_mode(mode);
    let late = match mode {
        Mode::Refuse => b.accepted() > accepted,
        _ => row.int(&status_json(port).expect("status"), "checks") > done,
    };
    if late {
        return Err(format!(
            "the switch to {mode:?} after round {done} came after the next round started"
        ));
    }
    Ok(())
}

/// Alternate the backend's mode after every round, starting with `first`,
/// for `rounds` rounds; the peer must stay `state` throughout. `Err` when
/// the test lost its lockstep with the rounds (it reacted to a round later
/// than the next one started): the sequence then proves nothing either way.
fn alternate(
    port: u16,
    b: &Backend,
    row: &Row,
    state: &str,
    first: Mode,
    rounds: usize,
) -> Result<(), String> {
    const INTERVAL: u64 = 200;
    // Start right after a round was committed, as every later switch does
    // (rounds of a peer are serial: the next one has not started then).
    let now = row.int(&status_json(port).expect("status"), "checks");
    let s = poll_status_json(port, ms(INTERVAL * 3), "a round", |s| {
        row.int(s, "checks") > now
    });
    let accepted = b.accepted();
    let start = row.int(&s, "checks");
    let mut mode = first;
    switch(port, b, row, mode, start, accepted)?;
    for n in 0..rounds {
        let s = next_round(port, row, start + n as i64, INTERVAL)?;
        let accepted = b.accepted();
        let (rise, fall) = (row.int(&s, "rise"), row.int(&s, "fall"));
        assert_eq!(
            row.status(&s),
            Some(state),
            "{row} flipped in round {n}: {s}"
        );
        match mode {
            Mode::Serve => assert!(rise >= 1 && fall == 0, "round {n} should pass: {s}"),
            _ => assert!(fall >= 1 && rise == 0, "round {n} should fail: {s}"),
        }
        if n > 0 {
            assert!(rise <= 1 && fall <= 1, "round {n} did not alternate: {s}");
        }
        mode = if mode == Mode::Serve {
            Mode::Refuse
        } else {
            Mode::Serve
        };
        switch(port, b, row, mode, start + n as i64 + 1, accepted)?;
    }
    Ok(())
}

/// [`alternate`] from `state` (first set up by serving for "up", refusing
/// for "down", until a round confirmed it); a lost lockstep starts the
/// phase again, up to 3 times.
fn alternate_from(port: u16, b: &Backend, row: &Row, state: &str, first: Mode, rounds: usize) {
    let (settle, counter) = if state == "up" {
        (Mode::Serve, "rise")
    } else {
        (Mode::Refuse, "fall")
    };
    for attempt in 1..=3 {
        b.set_mode(settle);
        poll_status_json(port, LONG, format!("{row} {state}"), |s| {
            row.status(s) == Some(state) && row.int(s, counter) >= 1
        });
        match alternate(port, b, row, state, first, rounds) {
            Ok(()) => return,
            Err(why) => eprintln!("note: attempt {attempt} lost its lockstep: {why}"),
        }
    }
    panic!("{row}: lost the lockstep with the rounds 3 times");
}

// rise=fall=2 and results alternating every round: never two in a row, so
// the state never changes, from up and from down. The test switches the
// backend right after each round is committed (seen through `checks`), so
// the sequence is exact; a switch that came after the next round started
// (a slow test on a loaded machine) is detected and the phase run again.
#[test]
fn flapping_peer_never_flips() {
    let b = Backend::start();
    let (_ng, port) = Nginx::builder().start_with(|| {
        let port = free_port();
        let conf = http_only(
            port,
            &format!(
                "    upstream web {{ server {}; check interval=200 rise=2 fall=2; }}",
                b.addr()
            ),
            "",
        );
        (conf, port)
    });
    let row = Row::new(Kind::Http, "web", &b.addr());
    alternate_from(port, &b, &row, "up", Mode::Refuse, 10);
    alternate_from(port, &b, &row, "down", Mode::Serve, 10);
}

// default_down=true: peers start down and take no traffic until `rise`
// rounds passed; a peer whose check keeps failing never gets traffic.
#[test]
fn default_down_peers_take_no_traffic_until_they_pass() {
    const INTERVAL: u64 = 200;
    const RISE: u64 = 3;
    let cold = Peers::start(2, Role::Http);
    let guarded = Peers::start(3, Role::Http);
    for c in &guarded.checks {
        c.refuse();
    }
    let upstream = |name: &str, p: &Peers| {
        let servers: String = p.names().iter().map(|n| format!("server {n}; ")).collect();
        format!(
            "    upstream {name} {{ {servers}check interval={INTERVAL} rise={RISE} fall=2 \
             default_down=true port={}; }}\n",
            p.check_port
        )
    };
    let (_ng, port) = Nginx::builder().start_with(|| {
        let port = free_port();
        let conf = http_only(
            port,
            &(upstream("cold", &cold) + &upstream("guarded", &guarded)),
            "        location /cold { proxy_pass http://cold; }
        location /guarded { proxy_pass http://guarded; }",
        );
        (conf, port)
    });
    let cold_rows: Vec<Row> = cold
        .names()
        .iter()
        .map(|n| Row::new(Kind::Http, "cold", n))
        .collect();
    let guarded_rows: Vec<Row> = guarded
        .names()
        .iter()
        .map(|n| Row::new(Kind::Http, "guarded", n))
        .collect();

    // Checks pass from the start: down until `rise` rounds were run.
    let first = status_json(port).expect("status");
    for r in cold_rows.iter().chain(&guarded_rows) {
        assert!(
            r.status(&first) == Some("down") || r.int(&first, "checks") >= RISE as i64,
            "{r} up before {RISE} rounds: {first}"
        );
    }
    first_seen(
        port,
        Instant::now(),
        LONG,
        "cold peers up",
        &cold_rows,
        |r, s| {
            let up = r.status(s) == Some("up");
            assert!(
                !up || r.int(s, "checks") >= RISE as i64,
                "{r} up before {RISE} rounds: {s}"
            );
            up
        },
    );

    // Checks fail: never up, and no request reaches any of them.
    for _ in 0..10 {
        let r = http_get(port, "/guarded").expect("request");
        assert_eq!(r.status, 502, "every peer is down: {}", r.text());
    }
    let s = status_json(port).expect("status");
    for r in &guarded_rows {
        assert_eq!(r.status(&s), Some("down"), "{s}");
    }
    assert_eq!(
        guarded.accepted(),
        vec![0, 0, 0],
        "traffic reached a down peer"
    );

    // Two pass: they come up within the fixed-rate window and take all
    // traffic; the third still takes none.
    let t0 = Instant::now();
    guarded.checks[0].serve();
    guarded.checks[1].serve();
    let up = first_seen(
        port,
        t0,
        LONG,
        "two peers up",
        &guarded_rows[..2],
        |r, s| r.status(s) == Some("up"),
    );
    for (r, at) in &up {
        assert_within(
            *at,
            ms((RISE - 1) * INTERVAL - 100),
            ms(RISE * INTERVAL + INTERVAL + 300),
            format!("{r} up"),
        );
    }
    for _ in 0..20 {
        let r = http_get(port, "/guarded").expect("request");
        assert_eq!(r.status, 200);
    }
    let n = guarded.accepted();
    assert!(n[0] > 0 && n[1] > 0 && n[2] == 0, "traffic spread {n:?}");

    guarded.checks[2].serve();
    first_seen(
        port,
        Instant::now(),
        LONG,
        "third peer up",
        &guarded_rows[2..],
        |r, s| r.status(s) == Some("up"),
    );
    guarded.reset_traffic();
    for _ in 0..30 {
        http_get(port, "/guarded").expect("request");
    }
    assert!(guarded.accepted()[2] > 0, "{:?}", guarded.accepted());
}

// `port=`: the check goes to the check port only. The traffic port
// refusing does not mark the peer down while the check port serves; the
// check port refusing does while the traffic port serves.
#[test]
fn check_port_not_traffic_port_decides() {
    let traffic = Backend::start();
    let check = Backend::start();
    let (_ng, port) = Nginx::builder().start_with(|| {
        let port = free_port();
        let conf = http_only(
            port,
            &format!(
                "    upstream web {{ server {}; check interval=100 rise=2 fall=2 port={}; }}",
                traffic.addr(),
                check.port()
            ),
            "        location / { proxy_pass http://web; }",
        );
        (conf, port)
    });
    let row = Row::new(Kind::Http, "web", &traffic.addr());
    let s = poll_status_json(port, LONG, "first round", |s| row.int(s, "checks") >= 1);
    assert_eq!(row.int(&s, "port"), i64::from(check.port()), "{s}");
    assert_eq!(
        http_get(port, "/").unwrap().text(),
        traffic.port().to_string()
    );

    // Probes go to the check port, never to the serving traffic port.
    traffic.reset_counters();
    let probes = check.accepted();
    let start = row.int(&s, "checks");
    poll_status_json(port, LONG, "five more rounds", |s| {
        row.int(s, "checks") >= start + 5
    });
    assert!(
        check.accepted() >= probes + 4,
        "probes must go to the check port"
    );
    assert_eq!(traffic.accepted(), 0, "a probe went to the traffic port");

    // The traffic port refusing changes nothing: ten more rounds, all pass.
    traffic.set_mode(Mode::Refuse);
    let start = row.int(&status_json(port).expect("status"), "checks");
    poll_status_json(port, LONG, "ten more rounds", |s| {
        assert_eq!(row.status(s), Some("up"), "traffic port refusing: {s}");
        assert_eq!(row.int(s, "fall"), 0, "a round failed: {s}");
        row.int(s, "checks") >= start + 10
    });

    traffic.set_mode(Mode::Serve);
    check.set_mode(Mode::Refuse);
    let t0 = Instant::now();
    let down = first_seen(
        port,
        t0,
        LONG,
        "peer down",
        std::slice::from_ref(&row),
        |r, s| r.status(s) == Some("down"),
    );
    assert_within(down[&row], ms(0), ms(200 + 100 + 300), "down");
    let r = http_get(port, "/").expect("request");
    assert_eq!(r.status, 502, "check-down peer must not be used");
    assert_eq!(traffic.requests(), 0, "traffic reached the check-down peer");
}

// TCP checks see the kernel, not the application: accept-then-RST and
// accept-then-close are failures; accept-and-hang and never-accept (the
// kernel completes the handshake into the listen queue) are healthy.
#[test]
fn how_server_behaviours_are_classified() {
    let cases = [
        (Mode::Rst, Some("reset")),
        (Mode::Fin, Some("closed")),
        (Mode::Refuse, Some("refused")),
        (Mode::Hang, None),
        (Mode::Silent, None),
    ];
    let backends: Vec<Backend> = cases.iter().map(|(m, _)| Backend::with_mode(*m)).collect();
    let servers: String = backends
        .iter()
        .map(|b| format!("server {}; ", b.addr()))
        .collect();
    // timeout 400: the settle window after connect is 100 ms.
    let (_ng, port) = Nginx::builder().start_with(|| {
        let port = free_port();
        let conf = http_only(
            port,
            &format!(
                "    upstream web {{ {servers}check interval=500 timeout=400 rise=1 fall=2; }}"
            ),
            "",
        );
        (conf, port)
    });
    let rows: Vec<Row> = backends
        .iter()
        .map(|b| Row::new(Kind::Http, "web", &b.addr()))
        .collect();
    first_seen(
        port,
        Instant::now(),
        LONG,
        "three rounds each",
        &rows,
        |r, s| r.int(s, "checks") >= 3,
    );
    let s = status_json(port).expect("status");
    for ((mode, reason), row) in cases.iter().zip(&rows) {
        let p = s.peer(Kind::Http, "web", &row.name).expect("row");
        match reason {
            Some(reason) => {
                assert_eq!(row.status(&s), Some("down"), "{mode:?}: {s}");
                assert_eq!(p["last_failure_reason"], *reason, "{mode:?}: {s}");
            }
            None => {
                assert_eq!(row.status(&s), Some("up"), "{mode:?}: {s}");
                assert_eq!(p["fails_total"], 0, "{mode:?}: {s}");
            }
        }
    }
}

/// A server that accepts and closes each connection `after` later (FIN, or
/// RST with `rst`): the close lands in the check's settle window, after
/// the connect was seen. Runs until the test process ends.
fn late_closer(after: Duration, rst: bool) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            std::thread::spawn(move || {
                std::thread::sleep(after);
                if rst {
                    healthcheck_t::set_linger_zero(&s).expect("SO_LINGER");
                }
                drop(s);
            });
        }
    });
    addr
}

// A worker reuses the sockets of finished rounds (disconnected in place)
// for later rounds of any peer. Each verdict must stay the peer's own: the
// rounds of healthy peers end with a settle timeout, and a socket that
// carried such a round must not make the next peer's late FIN or RST look
// like that timeout (nor the other way round). 20 rounds each, one worker,
// so every socket serves every kind of peer many times.
#[test]
fn reused_sockets_keep_every_verdict() {
    let modes = [
        Mode::Serve,
        Mode::Fin,
        Mode::Hang,
        Mode::Rst,
        Mode::Serve,
        Mode::Refuse,
    ];
    let backends: Vec<Backend> = modes.iter().map(|&m| Backend::with_mode(m)).collect();
    // (name, fails?) of every peer.
    let mut peers: Vec<(String, bool)> = modes
        .iter()
        .zip(&backends)
        .map(|(m, b)| (b.addr(), !matches!(m, Mode::Serve | Mode::Hang)))
        .collect();
    for rst in [false, true, false, true] {
        peers.push((late_closer(ms(10), rst).to_string(), true));
    }
    let servers: String = peers.iter().map(|(n, _)| format!("server {n}; ")).collect();
    // timeout 400: a settle window of 100 ms, well after the late closes.
    let (ng, port) = Nginx::builder().start_with(|| {
        let port = free_port();
        let conf = http_only(
            port,
            &format!(
                "    upstream web {{ {servers}check interval=450 timeout=400 rise=1 fall=1; }}"
            ),
            "",
        );
        (conf, port)
    });
    let rows: Vec<Row> = peers
        .iter()
        .map(|(n, _)| Row::new(Kind::Http, "web", n))
        .collect();
    let worker = ng.workers()[0];
    let mut most_fds = 0;
    first_seen(
        port,
        Instant::now(),
        Duration::from_secs(30),
        "20 rounds each",
        &rows,
        |r, s| {
            most_fds = most_fds.max(healthcheck_t::fd_count(worker).expect("fd count"));
            r.int(s, "checks") >= 20
        },
    );
    let s = status_json(port).expect("status");
    for ((_, fails_expected), row) in peers.iter().zip(&rows) {
        let (checks, fails) = (row.int(&s, "checks"), row.int(&s, "fails_total"));
        if *fails_expected {
            // Every round fails. A round that passed took its verdict from
            // the socket's previous round (allow one: a server thread that
            // missed the 100 ms settle window on a loaded machine).
            assert!(
                fails >= checks - 1,
                "{row}: {fails} of {checks} rounds failed: {s}"
            );
            assert_eq!(row.status(&s), Some("down"), "{row}: {s}");
        } else {
            assert_eq!(fails, 0, "{row}: {s}");
            assert_eq!(row.status(&s), Some("up"), "{row}: {s}");
        }
    }
    // Sockets are reused, not piled up: at most one per peer is ever open
    // (a round in flight or a spare), beside nginx's own descriptors.
    let bound = peers.len() + 16;
    assert!(
        most_fds <= bound,
        "worker had {most_fds} descriptors open, bound {bound}"
    );
}

/// A TCP listener on `[::1]:0`, or `None` (with a note) without IPv6.
fn ipv6_switch() -> Option<Switch> {
    match TcpListener::bind((Ipv6Addr::LOCALHOST, 0)) {
        Ok(_) => Some(Switch::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, 0))).expect("bind ::1")),
        Err(e) => {
            eprintln!("note: no IPv6 loopback ({e}); skipping the [::1] peer");
            None
        }
    }
}

// IPv6 and unix-socket peers, in http and stream: down when the listener
// goes away, up when it returns.
#[test]
fn ipv6_and_unix_peers_are_checked() {
    let v6 = ipv6_switch();
    let mut unix = UnixServer::start();
    let mut names = vec![unix.name()];
    if let Some(s) = &v6 {
        names.push(s.name());
    }
    let servers: String = names.iter().map(|n| format!("server {n}; ")).collect();
    let check = "check interval=100 rise=2 fall=2;";
    let (_ng, port) = Nginx::builder().start_with(|| {
        let p = free_ports(2);
        let (port, sport) = (p[0], p[1]);
        let conf = format!(
            "http {{
    upstream web {{ {servers}{check} }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
    upstream tcp {{ {servers}{check} }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass tcp; }}
}}"
        );
        (conf, port)
    });
    let rows: Vec<Row> = [(Kind::Http, "web"), (Kind::Stream, "tcp")]
        .iter()
        .flat_map(|(k, u)| names.iter().map(move |n| Row::new(*k, u, n)))
        .collect();
    let up = |r: &Row, s: &Status| r.status(s) == Some("up") && r.int(s, "fall") == 0;
    first_seen(
        port,
        Instant::now(),
        LONG,
        "checked and up",
        &rows,
        |r, s| up(r, s) && r.int(s, "checks") >= 2,
    );
    assert!(unix.accepted() > 0, "no probe reached the unix socket");
    if let Some(s) = &v6 {
        assert!(s.stats().accepted() > 0, "no probe reached [::1]");
    }

    unix.stop();
    if let Some(s) = &v6 {
        s.refuse();
    }
    first_seen(port, Instant::now(), LONG, "down", &rows, |r, s| {
        r.status(s) == Some("down")
    });
    let s = status_json(port).expect("status");
    for r in &rows {
        assert_eq!(
            s.peer(r.kind, &r.upstream, &r.name).unwrap()["last_failure_reason"],
            "refused",
            "{r}: {s}"
        );
    }

    unix.start_again();
    if let Some(s) = &v6 {
        s.serve();
    }
    first_seen(port, Instant::now(), LONG, "up again", &rows, up);
}

/// Which peer served `n` requests (http `/` or a stream round trip).
fn tally(kind: Kind, port: u16, peers: &Peers, n: usize) -> Vec<usize> {
    let mut got = vec![0; peers.len()];
    for _ in 0..n {
        let reply = match kind {
            Kind::Http => {
                let r = http_get(port, "/").expect("request");
                assert_eq!(r.status, 200, "{}", r.text());
                r.text()
            }
            Kind::Stream => {
                String::from_utf8_lossy(&stream_roundtrip(port, b"ping\n").expect("round trip"))
                    .into_owned()
            }
        };
        let i = peers
            .index_of(&reply)
            .unwrap_or_else(|| panic!("reply {reply:?} names no peer"));
        got[i] += 1;
    }
    got
}

/// Every request fails at once: 502 / closed stream.
fn assert_all_down(kind: Kind, port: u16) {
    let start = Instant::now();
    match kind {
        Kind::Http => assert_eq!(http_get(port, "/").expect("request").status, 502),
        Kind::Stream => {
            if let Ok(r) = stream_roundtrip(port, b"ping\n") {
                assert!(r.is_empty(), "got {:?}", String::from_utf8_lossy(&r));
            }
        }
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

// `down` servers are neither probed nor selected nor listed; `backup`
// servers are checked, and used only while no primary is usable.
#[test]
fn down_servers_unprobed_backup_used_only_without_primaries() {
    // Peers 0, 1 primary; 2 `down`; 3 `backup`.
    let http = Peers::start(4, Role::Http);
    let stream = Peers::start(4, Role::Raw);
    let upstream = |name: &str, p: &Peers| {
        format!(
            "    upstream {name} {{ server {}; server {}; server {} down; server {} backup; \
             check interval=200 rise=2 fall=2 port={}; }}\n",
            p.name(0),
            p.name(1),
            p.name(2),
            p.name(3),
            p.check_port
        )
    };
    let (_ng, (port, sport)) = Nginx::builder().start_with(|| {
        let p = free_ports(2);
        let (port, sport) = (p[0], p[1]);
        let conf = format!(
            "http {{
    access_log off;
{}    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://web; }}
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
{}    server {{ listen 127.0.0.1:{sport}; proxy_pass tcp; }}
}}",
            upstream("web", &http),
            upstream("tcp", &stream)
        );
        (conf, (port, sport))
    });
    let cases = [
        (Kind::Http, "web", &http, port),
        (Kind::Stream, "tcp", &stream, sport),
    ];
    let rows = |which: &[usize]| -> Vec<Row> {
        cases
            .iter()
            .flat_map(|(k, u, p, _)| which.iter().map(move |&i| Row::new(*k, u, &p.name(i))))
            .collect()
    };
    let wait = |which: &[usize], state: &'static str| {
        first_seen(port, Instant::now(), LONG, state, &rows(which), |r, s| {
            r.status(s) == Some(state) && r.int(s, "checks") >= 1
        });
    };
    let never_touched = || {
        for (_, u, p, _) in &cases {
            assert_eq!(
                p.checks[2].stats().accepted(),
                0,
                "{u}: `down` server probed"
            );
            assert_eq!(
                p.traffic[2].stats().accepted(),
                0,
                "{u}: `down` server used"
            );
        }
    };

    wait(&[0, 1, 3], "up");
    let s = status_json(port).expect("status");
    for (k, u, p, _) in &cases {
        assert!(
            s.peer(*k, u, &p.name(2)).is_none(),
            "{u}: `down` server listed: {s}"
        );
        assert!(p.checks[3].stats().accepted() > 0, "{u}: backup not probed");
    }
    for (k, u, p, lp) in &cases {
        let n = tally(*k, *lp, p, 20);
        assert!(
            n[0] > 0 && n[1] > 0 && n[3] == 0,
            "{u}: primaries up: {n:?}"
        );
    }

    // No primary usable: the backup takes everything.
    for (_, _, p, _) in &cases {
        p.checks[0].refuse();
        p.checks[1].refuse();
    }
    wait(&[0, 1], "down");
    for (k, u, p, lp) in &cases {
        p.reset_traffic();
        assert_eq!(
            tally(*k, *lp, p, 20),
            vec![0, 0, 0, 20],
            "{u}: primaries down"
        );
    }

    // The backup's check fails too: nothing is usable.
    for (_, _, p, _) in &cases {
        p.checks[3].refuse();
    }
    wait(&[3], "down");
    for (k, _, p, lp) in &cases {
        p.reset_traffic();
        assert_all_down(*k, *lp);
        assert_eq!(p.accepted(), vec![0, 0, 0, 0]);
    }

    // One primary back (and then the backup): the primary takes everything.
    for (_, _, p, _) in &cases {
        p.checks[0].serve();
    }
    wait(&[0], "up");
    for (_, _, p, _) in &cases {
        p.checks[3].serve();
    }
    wait(&[3], "up");
    for (k, u, p, lp) in &cases {
        p.reset_traffic();
        assert_eq!(
            tally(*k, *lp, p, 20),
            vec![20, 0, 0, 0],
            "{u}: one primary up"
        );
    }
    never_touched();
}

// State changes are logged once, at warn (down) and notice (up), naming the
// upstream, the peer, the count and the reason.
#[test]
fn state_changes_are_logged() {
    let (web, tcp) = (Backend::start(), Backend::start());
    let check = "check interval=100 rise=2 fall=3;";
    let (ng, port) = Nginx::builder().workers(2).start_with(|| {
        let p = free_ports(2);
        let (port, sport) = (p[0], p[1]);
        let conf = format!(
            "http {{
    upstream web {{ server {}; {check} }}
    server {{
        listen 127.0.0.1:{port};
        location /status {{ healthcheck_status json; }}
    }}
}}
stream {{
    upstream tcp {{ server {}; {check} }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass tcp; }}
}}",
            web.addr(),
            tcp.addr()
        );
        (conf, port)
    });
    let peers = [("web", &web), ("tcp", &tcp)];
    let rows: Vec<Row> = [Kind::Http, Kind::Stream]
        .iter()
        .zip(&peers)
        .map(|(k, (u, b))| Row::new(*k, u, &b.addr()))
        .collect();
    first_seen(port, Instant::now(), LONG, "checked", &rows, |r, s| {
        r.int(s, "checks") >= 1
    });

    let mark = ng.log_mark();
    web.set_mode(Mode::Refuse);
    tcp.set_mode(Mode::Refuse);
    for (u, b) in peers {
        let line = ng.wait_for_log_since(
            mark,
            &format!(
                "upstream {u} peer {} is down after 3 failures: connection refused",
                b.addr()
            ),
            LONG,
        );
        assert!(line.contains("[warn]"), "{line}");
    }
    first_seen(port, Instant::now(), LONG, "down", &rows, |r, s| {
        r.status(s) == Some("down")
    });

    let mark_up = ng.log_mark();
    web.set_mode(Mode::Serve);
    tcp.set_mode(Mode::Serve);
    for (u, b) in peers {
        let line = ng.wait_for_log_since(
            mark_up,
            &format!("upstream {u} peer {} is up after 2 successes", b.addr()),
            LONG,
        );
        assert!(line.contains("[notice]"), "{line}");
    }
    // One more round each, so a duplicate from the other worker would show.
    let s = status_json(port).expect("status");
    let after: Vec<i64> = rows.iter().map(|r| r.int(&s, "checks")).collect();
    first_seen(
        port,
        Instant::now(),
        LONG,
        "another round",
        &rows,
        |r, s| {
            let i = rows.iter().position(|x| x == r).unwrap();
            r.int(s, "checks") > after[i]
        },
    );
    for (u, b) in peers {
        let peer = format!("upstream {u} peer {} is ", b.addr());
        let lines = ng.log_lines_since(mark, &peer);
        assert_eq!(
            lines.len(),
            2,
            "one down and one up line for {u}: {lines:#?}"
        );
    }
}

/// `ss -tan state time-wait` rows whose local or peer address is
/// `127.0.0.1:port`.
fn time_wait_on(port: u16) -> Vec<String> {
    let text = healthcheck_t::ss::ss(&["-H", "-tan", "state", "time-wait"]);
    let addr = format!("127.0.0.1:{port}");
    text.lines()
        .filter(|l| l.split_whitespace().any(|col| col == addr))
        .map(str::to_string)
        .collect()
}

// Probe sockets close with RST: after many rounds against servers that
// keep the connection, close it first, or reset it, neither side of any
// check connection is in TIME_WAIT.
#[test]
fn checks_leave_no_time_wait() {
    let backends: Vec<Backend> = [Mode::Serve, Mode::Hang, Mode::Fin, Mode::Rst]
        .into_iter()
        .map(Backend::with_mode)
        .collect();
    let servers: String = backends
        .iter()
        .map(|b| format!("server {}; ", b.addr()))
        .collect();
    // TIME_WAIT lasts a minute: entries left by an earlier owner of the
    // same port number are not ours.
    let stale: Vec<Vec<String>> = backends.iter().map(|b| time_wait_on(b.port())).collect();
    let (_ng, port) = Nginx::builder().start_with(|| {
        let port = free_port();
        let conf = http_only(
            port,
            &format!("    upstream web {{ {servers}check interval=100 rise=1 fall=1; }}"),
            "",
        );
        (conf, port)
    });
    let rows: Vec<Row> = backends
        .iter()
        .map(|b| Row::new(Kind::Http, "web", &b.addr()))
        .collect();
    first_seen(
        port,
        Instant::now(),
        LONG,
        "20 rounds each",
        &rows,
        |r, s| r.int(s, "checks") >= 20,
    );
    for (b, stale) in backends.iter().zip(&stale) {
        assert!(b.accepted() >= 15, "{b:?}");
        let tw: Vec<String> = time_wait_on(b.port())
            .into_iter()
            .filter(|l| !stale.contains(l))
            .collect();
        assert!(tw.is_empty(), "TIME_WAIT from checks to {b:?}: {tw:#?}");
    }
}
