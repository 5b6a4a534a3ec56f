//! Shared probes (docs/fleets.md, Shared probes): a server with the same
//! address and check settings in several upstreams, of http or stream, is
//! probed once per interval; each upstream keeps its own row, admin state
//! and selection. Counted by the backends themselves.

use std::time::{Duration, Instant};

use healthcheck_t::conf::{http_conf_with, upstream};
use healthcheck_t::{
    client, free_port, poll_status_json, status_json, Backend, Builder, Kind, Mode, Status,
};

const WAIT: Duration = Duration::from_secs(10);

fn shared_with(s: &Status, ups: &str, name: &str) -> Vec<(String, String)> {
    s.row(Kind::Http, ups, name)["shared_with"]
        .as_array()
        .expect("shared_with is a list")
        .iter()
        .map(|o| {
            (
                o["upstream_type"].as_str().unwrap_or_default().to_string(),
                o["upstream"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Two upstreams of the same 50 servers, the second with 10 more: the
/// backends see 60 probes an interval, not 110; the rows of a shared peer
/// show the same rounds and name each other; a peer that goes down is
/// down in both upstreams in the same round.
#[test]
fn fifty_servers_in_two_upstreams_are_probed_once() {
    let backends: Vec<Backend> = (0..60).map(|_| Backend::start()).collect();
    let names: Vec<String> = backends.iter().map(Backend::addr).collect();
    let check = "check interval=500 rise=1 fall=1 timeout=400 type=tcp;";
    let port = free_port();
    let ups = [
        upstream("a", &names[..50], check),
        upstream("b", &names, check),
    ]
    .concat();
    let _ng = Builder::default()
        .workers(2)
        .start(&http_conf_with(port, &ups, ""));
    let s = poll_status_json(port, WAIT, "every row up", |s| {
        s.up() == Some(110) && names.iter().all(|n| s.checks(Kind::Http, "b", n) >= 1)
    });
    for n in &names[..50] {
        assert_eq!(
            shared_with(&s, "a", n),
            [("http".to_string(), "b".to_string())],
            "{n}"
        );
        assert_eq!(
            shared_with(&s, "b", n),
            [("http".to_string(), "a".to_string())],
            "{n}"
        );
    }
    for n in &names[50..] {
        assert!(shared_with(&s, "b", n).is_empty(), "{n}");
    }
    // Probes per interval, counted by the backends over 4 intervals.
    for b in &backends {
        b.reset_counters();
    }
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(2000));
    let probes: usize = backends.iter().map(Backend::accepted).sum();
    let intervals = t0.elapsed().as_secs_f64() / 0.5;
    let per_interval = probes as f64 / intervals;
    assert!(
        (50.0..=70.0).contains(&per_interval),
        "{per_interval:.1} probes an interval ({probes} in {intervals:.1}); 60 targets"
    );
    // The rows of a shared peer are the same rounds.
    let s = status_json(port).unwrap();
    for n in &names[..50] {
        let (a, b) = (s.checks(Kind::Http, "a", n), s.checks(Kind::Http, "b", n));
        assert!(a.abs_diff(b) <= 1, "{n}: {a} and {b} rounds");
    }
    // Down in both, in the same round.
    backends[7].set_mode(Mode::Refuse);
    let n = &names[7];
    let s = poll_status_json(port, WAIT, "backend 7 down", |s| {
        s.is_down(Kind::Http, "a", n) || s.is_down(Kind::Http, "b", n)
    });
    assert!(
        s.is_down(Kind::Http, "a", n) && s.is_down(Kind::Http, "b", n),
        "{s}"
    );
    assert_eq!(
        s.int(Kind::Http, "a", n, "fails_total"),
        s.int(Kind::Http, "b", n, "fails_total"),
        "{s}"
    );
}

/// An http and a stream upstream and a second http upstream share one
/// probe; `admin disable` of the peer in one upstream leaves the others
/// serving it; `shared=off` keeps a probe of its own; a reload that
/// removes one of the sharing upstreams keeps the others' state.
#[test]
fn rows_keep_their_own_admin_state_selection_and_reloads() {
    let b = Backend::start();
    let addr = b.addr();
    let port = free_port();
    let sport = free_port();
    let check = "check interval=300 rise=1 fall=1 timeout=250 type=tcp;";
    let conf = |with_x: bool| {
        let mut ups = String::new();
        if with_x {
            ups.push_str(&upstream("x", std::slice::from_ref(&addr), check));
        }
        ups.push_str(&upstream("y", std::slice::from_ref(&addr), check));
        ups.push_str(&upstream(
            "own",
            std::slice::from_ref(&addr),
            "check interval=300 rise=1 fall=1 timeout=250 type=tcp shared=off;",
        ));
        let http = http_conf_with(
            port,
            &ups,
            "        location /x/ { proxy_pass http://x; }
        location /y/ { proxy_pass http://y; }
        location /admin { healthcheck_admin; }",
        );
        let http = if with_x {
            http
        } else {
            http.replace("        location /x/ { proxy_pass http://x; }\n", "")
        };
        format!(
            "{http}
stream {{
    upstream s {{ server {addr}; {check} }}
    server {{ listen 127.0.0.1:{sport}; proxy_pass s; }}
}}"
        )
    };
    let mut ng = Builder::default().start(&conf(true));
    let s = poll_status_json(port, WAIT, "all up", |s| s.up() == Some(4));
    let mut with: Vec<(String, String)> = shared_with(&s, "x", &addr);
    with.sort();
    assert_eq!(
        with,
        [
            ("http".to_string(), "y".to_string()),
            ("stream".to_string(), "s".to_string())
        ]
    );
    assert!(shared_with(&s, "own", &addr).is_empty());
    // The backend sees two probes a round: the shared one and `own`'s.
    b.reset_counters();
    std::thread::sleep(Duration::from_millis(1500));
    let per_round = b.accepted() as f64 / 5.0;
    assert!(
        (1.5..=2.6).contains(&per_round),
        "{per_round:.1} probes a round"
    );
    // Admin state is the row's own.
    let path = format!("/admin?upstream=x&peer={addr}&action=disable");
    let r = client::http_request(port, "POST", &path, &[], b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // The admin answer's row says whom it shares its probe with, too.
    let answer: serde_json::Value = serde_json::from_str(&r.text()).expect("admin JSON");
    assert_eq!(
        answer["peers"][0]["shared_with"].as_array().map(Vec::len),
        Some(2),
        "{answer}"
    );
    for _ in 0..5 {
        assert_eq!(client::http_get(port, "/x/").unwrap().status, 502);
        assert_eq!(client::http_get(port, "/y/").unwrap().status, 200);
    }
    // Down everywhere in the same round; a reload without `x` keeps `y`'s
    // and `s`'s state (and the probe goes on, now led by `y`).
    b.set_mode(Mode::Refuse);
    let before = poll_status_json(port, WAIT, "down", |s| s.up() == Some(0));
    ng.reload_with(&conf(false));
    let after = status_json(port).unwrap();
    assert!(after.is_down(Kind::Http, "y", &addr), "{after}");
    assert!(
        after.int(Kind::Http, "y", &addr, "fails_total")
            >= before.int(Kind::Http, "y", &addr, "fails_total"),
        "{before}\n{after}"
    );
    b.set_mode(Mode::Serve);
    let s = poll_status_json(port, WAIT, "up again", |s| {
        s.is_up(Kind::Http, "y", &addr) && s.is_up(Kind::Stream, "s", &addr)
    });
    assert_eq!(
        shared_with(&s, "y", &addr),
        [("stream".to_string(), "s".to_string())]
    );
}
