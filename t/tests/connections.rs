//! `check_max_connections` (docs/directives.md): the connections a
//! worker's checks hold (kept between rounds, and their rounds') stay
//! within a share of `worker_connections`, so that checks never take the
//! connections clients need; peers past the share are checked on new
//! connections each round.

use std::time::{Duration, Instant};

use healthcheck_t::http_backend::{HttpBackend, Reply};
use healthcheck_t::{client, poll_status_json, status_json, Builder, Kind, Nginx};

const PEERS: usize = 800;

/// One worker with `worker_connections 512` and 800 `reuse=on` http
/// peers (one keep-alive backend): every client request succeeds while
/// every peer is still checked once per interval, and the backend sees at
/// most the default share (half: 256) of kept connections plus the
/// rounds in flight (`check_max_inflight`, 32), and at least most of that
/// share (kept connections still serve).
#[test]
fn checks_hold_at_most_their_share_and_clients_are_served() {
    let b = HttpBackend::start(Reply::status(200));
    let port = healthcheck_t::free_port();
    let servers: String = (0..PEERS)
        .map(|_| format!("        server {};\n", b.addr()))
        .collect();
    let ups = format!(
        "    check_shm_size 16m;
    upstream many {{
{servers}        check type=http interval=2000 timeout=1500 rise=1 fall=1 reuse=on;
    }}\n"
    );
    let conf = healthcheck_t::conf::http_conf_with(
        port,
        &ups,
        "        location = /hello { return 200 \"hello\\n\"; }",
    );
    let _ng: Nginx = Builder::default().worker_connections(512).start(&conf);
    let all_checked = |s: &healthcheck_t::Status, at_least: &[i64]| {
        let peers = s.peers(Kind::Http);
        peers.len() == PEERS
            && peers.iter().enumerate().all(|(i, p)| {
                p["status"] == "up" && p["checks"].as_i64().unwrap_or(0) >= at_least[i]
            })
    };
    let once = vec![1i64; PEERS];
    let s = poll_status_json(port, Duration::from_secs(20), "every peer up", |s| {
        all_checked(s, &once)
    });
    let before: Vec<i64> = s
        .peers(Kind::Http)
        .iter()
        .map(|p| p["checks"].as_i64().unwrap_or(0) + 1)
        .collect();
    // 200 client requests, each on a new connection, while the checks run.
    let t0 = Instant::now();
    for i in 0..200 {
        let r = client::http_get(port, "/hello")
            .unwrap_or_else(|e| panic!("client request {i} failed: {e}"));
        assert_eq!(r.status, 200, "client request {i}: {r:?}");
    }
    // Every peer had a round within an interval (2 s) and a margin.
    let deadline = Duration::from_secs(2) + Duration::from_millis(2500);
    let left = deadline
        .saturating_sub(t0.elapsed())
        .max(Duration::from_millis(500));
    poll_status_json(port, left, "every peer checked again", |s| {
        all_checked(s, &before)
    });
    let open = b.open_connections();
    assert!(
        (200..=256 + 32).contains(&open),
        "the backend holds {open} check connections (share: 256 kept, 32 in flight)"
    );
    let s = status_json(port).expect("status");
    assert!(s.peers(Kind::Http).iter().all(|p| p["fails_total"] == 0));
    // The status page shows what the worker's checks hold.
    let held = s.0["servers"]["check_connections"]
        .as_u64()
        .expect("check_connections");
    assert!(
        (200..=256 + 32).contains(&held),
        "check_connections {held} (share: 256 kept, 32 in flight)"
    );
}

/// `nginx -t` warns when the peers that keep their check connection are
/// more, per worker, than `check_max_connections` lets a worker hold;
/// it stays quiet when they fit (here: over 2 workers, or with a larger
/// limit).
#[test]
fn nginx_t_warns_when_kept_peers_exceed_the_share() {
    let servers: String = (0..PEERS)
        .map(|i| format!("        server 127.0.0.1:{};\n", 20000 + i))
        .collect();
    let conf = |extra: &str| {
        healthcheck_t::conf::http_conf(
            healthcheck_t::free_port(),
            &format!(
                "    check_shm_size 16m;{extra}
    upstream many {{
{servers}        check type=http interval=2000 reuse=on;
    }}\n"
            ),
        )
    };
    let (rc, out) = Builder::default()
        .worker_connections(512)
        .test_config(&conf(""));
    assert_eq!(rc, 0, "{out}");
    let want = "[warn] 800 peers per worker keep their check connection (reuse= or keepalive=; \
                800 in this http block over 1 worker process), more than check_max_connections \
                lets a worker hold (256, 50% of worker_connections 512): the others are checked \
                on a new connection each round; raise worker_connections or \
                check_max_connections";
    assert!(out.contains(want), "{out}");
    for (b, extra) in [
        (Builder::default().worker_connections(512).workers(4), ""),
        (
            Builder::default().worker_connections(512),
            "\n    check_max_connections 800;",
        ),
    ] {
        let (rc, out) = b.test_config(&conf(extra));
        assert_eq!(rc, 0, "{out}");
        assert!(
            !out.contains("keep their check connection"),
            "{extra}: {out}"
        );
    }
}
