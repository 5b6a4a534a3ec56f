//! Stock mode (docs/stock-mode.md): loaded into an nginx without the patch,
//! the module starts, says so once, and enforces checks through the peers'
//! `down` flag. The balancer, lifecycle and status suites run in stock mode
//! too (scripts/test); this file covers what only stock mode has.
//!
//! Needs the unpatched nginx of the module's version (`NGINX_STOCK=1
//! scripts/build`; scripts/test sets `NGINX_STOCK_BIN`).

use std::time::Duration;

use healthcheck_t::paths::{patched_bin, stock_bin};
use healthcheck_t::peers::{Peers, Role};
use healthcheck_t::{http_get, poll_status_json, Builder, Kind, Row};

const NOTICE: &str = "ngx_healthcheck_module: nginx has no balancer hook patch, enforcing \
                      checks through the peers' \"down\" flag";
const LONG: Duration = Duration::from_secs(10);

fn notices(out: &str) -> usize {
    out.lines()
        .filter(|l| l.contains("[notice]") && l.contains(NOTICE))
        .count()
}

#[test]
fn unpatched_nginx_starts_with_one_notice() {
    for body in [
        "http { upstream u { server 127.0.0.1:1; check type=tcp; } }",
        "stream { upstream u { server 127.0.0.1:1; check type=tcp; } }",
        "http { upstream u { server 127.0.0.1:1; check type=tcp; } }\n\
         stream { upstream u { server 127.0.0.1:1; check type=tcp; } }",
    ] {
        let (code, out) = Builder::default().binary(stock_bin()).test_config(body);
        assert_eq!(code, 0, "nginx -t must pass in stock mode:\n{out}");
        let mut ng = Builder::default().binary(stock_bin()).start(body);
        assert_eq!(
            notices(&ng.log()),
            1,
            "one stock-mode notice:\n{}",
            ng.log()
        );
        // Once per start: a reload does not repeat it.
        ng.reload();
        assert_eq!(notices(&ng.log()), 1, "after a reload:\n{}", ng.log());
        ng.check_log();
    }
}

#[test]
fn patched_nginx_uses_the_hook_and_says_nothing() {
    let ng = Builder::default()
        .binary(patched_bin())
        .start("http { upstream u { server 127.0.0.1:1; check type=tcp; } }");
    assert_eq!(
        notices(&ng.log()),
        0,
        "no stock-mode notice with the patch:\n{}",
        ng.log()
    );
    ng.check_log();
}

/// A server that is `down` in the configuration stays down in stock mode
/// while the module sets and clears `down` on its neighbours: with and
/// without `zone`, its backend (which would pass any check) never gets a
/// request, before and after the checked peer goes down.
#[test]
fn configured_down_server_stays_down() {
    let peers = Peers::start(2, Role::Http);
    let names = peers.names();
    let port = healthcheck_t::free_port();
    let mut ups = String::new();
    for zone in [false, true] {
        let name = if zone { "z" } else { "plain" };
        let zone_line = if zone {
            format!("zone {name} 64k;")
        } else {
            String::new()
        };
        ups += &format!(
            "upstream {name} {{ {zone_line} server {}; server {} down;
                 check type=tcp interval=100 rise=1 fall=1 port={}; }}\n",
            names[0], names[1], peers.check_port
        );
    }
    let locations = "location /plain { proxy_pass http://plain; }
                     location /z { proxy_pass http://z; }";
    let ng = Builder::default()
        .binary(stock_bin())
        .workers(2)
        .start(&healthcheck_t::conf::http_conf_with(port, &ups, locations));
    assert_eq!(notices(&ng.log()), 1, "{}", ng.log());
    let rows = ["plain", "z"].map(|u| Row::new(Kind::Http, u, &names[0]));
    poll_status_json(port, LONG, "checked peers up", |s| {
        rows.iter().all(|r| r.status(s) == Some("up"))
    });
    for path in ["/plain", "/z"] {
        for _ in 0..20 {
            let r = http_get(port, path).expect("request");
            assert_eq!((r.status, r.text()), (200, names[0].clone()), "{path}");
        }
    }
    // The checked peer goes down: nothing is left, and the configured
    // `down` server is not brought in.
    peers.checks[0].refuse();
    poll_status_json(port, LONG, "checked peers down", |s| {
        rows.iter().all(|r| r.status(s) == Some("down"))
    });
    for path in ["/plain", "/z"] {
        for _ in 0..10 {
            let r = http_get(port, path).expect("request");
            assert_eq!(r.status, 502, "{path}: {}", r.text());
        }
    }
    assert_eq!(
        peers.traffic[1].stats().accepted(),
        0,
        "the configured down server got traffic"
    );
    // And back.
    peers.checks[0].serve();
    poll_status_json(port, LONG, "checked peers up again", |s| {
        rows.iter().all(|r| r.status(s) == Some("up"))
    });
    for path in ["/plain", "/z"] {
        let r = http_get(port, path).expect("request");
        assert_eq!((r.status, r.text()), (200, names[0].clone()), "{path}");
    }
    ng.check_log();
}

/// A worker that dies is respawned into a `zone` upstream whose peers
/// still carry the `down` flag stock mode set for a dead server: the new
/// worker counts that server as checked (not "down in the configuration"),
/// checks every peer, and the configured `down` server stays out.
#[test]
fn a_respawned_worker_keeps_checking_peers_stock_mode_marked_down() {
    let peers = Peers::start(3, Role::Http);
    let names = peers.names();
    let port = healthcheck_t::free_port();
    let ups = format!(
        "upstream z {{ zone z 64k; server {}; server {}; server {} down;
             check type=tcp interval=100 rise=1 fall=1 port={}; }}\n",
        names[0], names[1], names[2], peers.check_port
    );
    let ng = Builder::default().binary(stock_bin()).workers(1).start(
        &healthcheck_t::conf::http_conf_with(port, &ups, "location / { proxy_pass http://z; }"),
    );
    peers.checks[1].refuse();
    let dead = Row::new(Kind::Http, "z", &names[1]);
    let live = Row::new(Kind::Http, "z", &names[0]);
    poll_status_json(port, LONG, "the refused peer down", |s| {
        dead.status(s) == Some("down") && live.status(s) == Some("up")
    });
    // A request applies the state to the zone's peers: the dead one's
    // `down` now has stock mode's bit.
    for _ in 0..5 {
        let r = http_get(port, "/").expect("request");
        assert_eq!((r.status, r.text()), (200, names[0].clone()));
    }
    let before = ng.workers();
    assert_eq!(before.len(), 1);
    ng.allow_log("exited on signal 9");
    healthcheck_t::process::signal(before[0], libc::SIGKILL).expect("kill the worker");
    healthcheck_t::wait_until(LONG, "worker respawned", || {
        let now = ng.workers();
        now.len() == 1 && now != before
    });
    let s = poll_status_json(port, LONG, "both checked peers listed and checked", |s| {
        dead.status(s) == Some("down") && live.status(s) == Some("up")
    });
    let checks = dead.int(&s, "checks");
    poll_status_json(port, LONG, "the dead peer still checked", |s| {
        dead.int(s, "checks") >= checks + 3
    });
    for _ in 0..10 {
        let r = http_get(port, "/").expect("request");
        assert_eq!((r.status, r.text()), (200, names[0].clone()));
    }
    let log = ng.log();
    assert!(
        !log.contains("slots for"),
        "the new worker checks nothing:\n{log}"
    );
    assert_eq!(
        peers.traffic[2].stats().accepted(),
        0,
        "the configured down server got traffic"
    );
}
