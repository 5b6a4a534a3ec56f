//! `healthcheck_gate` (docs/directives.md, healthcheck_gate): 200 while
//! enough peers of an upstream are selectable, else 503, with a one-line
//! body; peers going down one by one, backup peers, fail-open, a stream
//! upstream from an http location, and what `nginx -t` says.

use std::time::Duration;

use healthcheck_t::wait::wait_for;
use healthcheck_t::{free_port, http_request, Backend, Mode, Nginx};

const WAIT: Duration = Duration::from_secs(15);

/// The gate's answer: status and body.
fn ask(port: u16, path: &str) -> (u16, String) {
    let r = http_request(port, "GET", path, &[], b"").expect("the gate answers");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

/// Poll the gate until it says `status` with `body`.
fn wait_gate(port: u16, path: &str, status: u16, body: &str) {
    wait_for(WAIT, format!("{path}: {status} {body}"), || {
        let got = ask(port, path);
        (got == (status, body.to_string())).then_some(())
    });
}

const CHECK: &str = "check interval=100 rise=1 fall=1 timeout=90 type=tcp;";

#[test]
fn the_gate_closes_as_peers_go_down_one_by_one() {
    let b: Vec<Backend> = (0..3).map(|_| Backend::start()).collect();
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "http {{
    upstream web {{ server {}; server {}; server {}; {CHECK} }}
    server {{
        listen 127.0.0.1:{port};
        location = /ready {{ healthcheck_gate web min=2; }}
        location = /any {{ healthcheck_gate web; }}
        location = /half {{ healthcheck_gate web min=50%; }}
    }}
}}",
        b[0].addr(),
        b[1].addr(),
        b[2].addr()
    ));
    let line = |n: u32, needed: u32| {
        let word = if n >= needed { "ok" } else { "unavailable" };
        format!("{word}: {n} of 3 peers of upstream \"web\" selectable, {needed} needed\n")
    };
    wait_gate(port, "/ready", 200, &line(3, 2));
    b[0].set_mode(Mode::Refuse);
    wait_gate(port, "/ready", 200, &line(2, 2));
    wait_gate(port, "/half", 200, &line(2, 2));
    b[1].set_mode(Mode::Refuse);
    wait_gate(port, "/ready", 503, &line(1, 2));
    wait_gate(port, "/half", 503, &line(1, 2));
    wait_gate(port, "/any", 200, &line(1, 1));
    b[2].set_mode(Mode::Refuse);
    wait_gate(port, "/any", 503, &line(0, 1));
    b[0].set_mode(Mode::Serve);
    wait_gate(port, "/any", 200, &line(1, 1));
    // HEAD too; other methods are refused.
    let head = http_request(port, "HEAD", "/any", &[], b"").unwrap();
    assert_eq!(head.status, 200);
    let post = http_request(port, "POST", "/any", &[], b"x").unwrap();
    assert_eq!(post.status, 405);
}

#[test]
fn backup_peers_count_and_fail_open_opens_the_gate() {
    let main = Backend::start();
    let spare = Backend::start();
    let (a, b) = (Backend::start(), Backend::start());
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "http {{
    upstream with_backup {{ server {}; server {} backup; {CHECK} }}
    upstream open {{ server {}; server {}; {CHECK} check_fail_open on; }}
    server {{
        listen 127.0.0.1:{port};
        location = /backup {{ healthcheck_gate with_backup; }}
        location = /open {{ healthcheck_gate open min=2; }}
    }}
}}",
        main.addr(),
        spare.addr(),
        a.addr(),
        b.addr()
    ));
    wait_gate(
        port,
        "/backup",
        200,
        "ok: 2 of 2 peers of upstream \"with_backup\" selectable, 1 needed\n",
    );
    // The primary down: the backup takes the traffic, and the gate stays open.
    main.set_mode(Mode::Refuse);
    wait_gate(
        port,
        "/backup",
        200,
        "ok: 1 of 2 peers of upstream \"with_backup\" selectable, 1 needed\n",
    );
    spare.set_mode(Mode::Refuse);
    wait_gate(
        port,
        "/backup",
        503,
        "unavailable: 0 of 2 peers of upstream \"with_backup\" selectable, 1 needed\n",
    );
    // Every peer down, the upstream failing open: selection picks them
    // again, so the gate counts them.
    a.set_mode(Mode::Refuse);
    b.set_mode(Mode::Refuse);
    wait_gate(
        port,
        "/open",
        200,
        "ok: 2 of 2 peers of upstream \"open\" selectable, 2 needed\n",
    );
}

#[test]
fn a_stream_upstream_is_gated_from_an_http_location() {
    let db = Backend::start();
    let port = free_port();
    let _ng = Nginx::start(&format!(
        "http {{
    server {{ listen 127.0.0.1:{port}; location = /db {{ healthcheck_gate db; }} }}
}}
stream {{
    upstream db {{ server {}; {CHECK} }}
    server {{ listen 127.0.0.1:{}; proxy_pass db; }}
}}",
        db.addr(),
        free_port()
    ));
    let line =
        |w: &str, n| format!("{w}: {n} of 1 peers of upstream \"db\" selectable, 1 needed\n");
    wait_gate(port, "/db", 200, &line("ok", 1));
    db.set_mode(Mode::Refuse);
    wait_gate(port, "/db", 503, &line("unavailable", 0));
}

#[test]
fn nginx_t_names_a_gate_whose_upstream_has_no_check() {
    let b = Backend::start();
    // With a stream block every upstream is known when the configuration
    // ends: an unknown or unchecked name fails.
    for (name, ups) in [
        (
            "nope",
            format!("upstream web {{ server {}; {CHECK} }}", b.addr()),
        ),
        ("web", format!("upstream web {{ server {}; }}", b.addr())),
    ] {
        let conf = format!(
            "http {{
    {ups}
    server {{ listen 127.0.0.1:{}; location = /g {{ healthcheck_gate {name}; }} }}
}}
stream {{ server {{ listen 127.0.0.1:{}; return ok; }} }}",
            free_port(),
            free_port()
        );
        let (code, out) = Nginx::builder().test_config(&conf);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains(&format!(
                "[emerg] \"healthcheck_gate\" names upstream \"{name}\", which is no http or stream \
                 upstream with check in "
            )),
            "{out}"
        );
    }
    for (args, message) in [
        ("web min=0", "invalid parameter \"min=0\" in \"healthcheck_gate\" directive"),
        ("web max=3", "invalid parameter \"max=3\" in \"healthcheck_gate\" directive: the only parameter is min=N or min=N%"),
        ("web min=1 min=2", "invalid number of arguments in \"healthcheck_gate\" directive"),
    ] {
        let conf = format!(
            "http {{
    upstream web {{ server {}; {CHECK} }}
    server {{ listen 127.0.0.1:{}; location = /g {{ healthcheck_gate {args}; }} }}
}}",
            b.addr(),
            free_port()
        );
        let (code, out) = Nginx::builder().test_config(&conf);
        assert_eq!(code, 1, "{args}: {out}");
        assert!(out.contains(message), "{args}: {out}");
    }
}
