//! What `nginx -t` says about the module's directives (docs/directives.md).
//!
//! Each bad input is placed in a configuration that is otherwise valid, and
//! must fail with exit code 1, an `[emerg]`, and the module's message:
//!
//! - `check` parameters: `invalid parameter "<arg as written>": <reason>`
//! - single-value directives: `invalid value "<arg>" in "<directive>" directive: <reason>`
//! - `vnswrr`: `invalid parameter "<arg>" in "vnswrr" directive`
//! - a second page directive in one location: `"X" directive is duplicate`,
//!   or `"X" and "Y" cannot share a location`
//! - `check` outside `upstream`: nginx's `"check" directive is not allowed here`
//! - http checks and `check_match` blocks: the rule and the upstream, e.g.
//!   `"check_http_send" requires "check ... type=http" in upstream "u"`,
//!   `unknown check_match "nope" in upstream "s"`; a regex PCRE refuses
//!   fails with PCRE's message
//!
//! Every table row is checked and all mismatches are reported together.

use healthcheck_t::{free_port, nginx_t};

/// Where a snippet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    /// Inside `http { upstream u { server ...; HERE } }`.
    HttpUpstream,
    /// Inside `stream { upstream s { server ...; HERE } }`.
    StreamUpstream,
    /// Directly in `http {}`.
    Http,
    /// Directly in `stream {}`.
    Stream,
    /// In the http `server {}`.
    HttpServer,
    /// In the http `location / {}`.
    HttpLocation,
    /// In the stream `server {}`.
    StreamServer,
}

const UPSTREAMS: [Ctx; 2] = [Ctx::HttpUpstream, Ctx::StreamUpstream];

/// An otherwise valid configuration with `snippet` placed per `ctx`;
/// `server` is the upstream's server line.
fn conf(ctx: Ctx, snippet: &str, server: &str) -> String {
    conf_at(&[(ctx, snippet)], server)
}

/// An otherwise valid configuration with each snippet placed per its
/// context (several may go to one context); `server` is the upstreams'
/// server line.
fn conf_at(places: &[(Ctx, &str)], server: &str) -> String {
    let at = |c: Ctx| {
        places
            .iter()
            .filter(|(ctx, _)| *ctx == c)
            .map(|(_, s)| *s)
            .collect::<Vec<_>>()
            .join("\n    ")
    };
    let (hp, sp) = (free_port(), free_port());
    format!(
        "http {{
    {http}
    upstream u {{
        {server}
        {http_upstream}
    }}
    server {{
        listen 127.0.0.1:{hp};
        {http_server}
        location / {{
            proxy_pass http://u;
            {http_location}
        }}
    }}
}}
stream {{
    {stream}
    upstream s {{
        {server}
        {stream_upstream}
    }}
    server {{
        listen 127.0.0.1:{sp};
        proxy_pass s;
        {stream_server}
    }}
}}
",
        http = at(Ctx::Http),
        http_upstream = at(Ctx::HttpUpstream),
        http_server = at(Ctx::HttpServer),
        http_location = at(Ctx::HttpLocation),
        stream = at(Ctx::Stream),
        stream_upstream = at(Ctx::StreamUpstream),
        stream_server = at(Ctx::StreamServer),
    )
}

const TCP_SERVER: &str = "server 127.0.0.1:1;";
const UNIX_SERVER: &str = "server unix:/tmp/x.sock;";

/// A bad input and what its message must say.
struct Bad {
    ctxs: &'static [Ctx],
    snippet: &'static str,
    server: &'static str,
    /// Every one of these must appear in the output.
    all: &'static [&'static str],
    /// If not empty, at least one of these must appear too (for inputs where
    /// either of two parameters may fairly be blamed).
    any: &'static [&'static str],
}

/// A `check` line in both upstream kinds whose message must contain
/// `invalid parameter "<param>"`.
macro_rules! bad_param {
    ($line:literal, $param:literal) => {
        Bad {
            ctxs: &UPSTREAMS,
            snippet: $line,
            server: TCP_SERVER,
            all: &[concat!("invalid parameter \"", $param, "\"")],
            any: &[],
        }
    };
}

/// Fail once, clearly, when the module does not even load (instead of
/// once per table row).
fn assert_module_loads() {
    let (code, out) = nginx_t("");
    assert_eq!(
        code, 0,
        "nginx -t with only the module loaded fails:\n{out}"
    );
}

/// What is wrong with the answer of `nginx -t` to a bad configuration:
/// empty when it failed with exit code 1, an `[emerg]`, every one of `all`
/// and (if `any` is not empty) one of `any`.
fn judge_bad(code: i32, out: &str, all: &[&str], any: &[&str]) -> Vec<String> {
    let mut why = Vec::new();
    if code != 1 {
        why.push(format!("exit code {code}, want 1"));
    }
    if !out.contains("[emerg]") {
        why.push("no [emerg]".to_string());
    }
    for s in all {
        if !out.contains(s) {
            why.push(format!("missing {s:?}"));
        }
    }
    if !any.is_empty() && !any.iter().any(|s| out.contains(s)) {
        why.push(format!("missing one of {any:?}"));
    }
    why
}

fn check_bad(cases: &[Bad]) {
    assert_module_loads();
    let mut failures = Vec::new();
    for case in cases {
        for &ctx in case.ctxs {
            let (code, out) = nginx_t(&conf(ctx, case.snippet, case.server));
            let why = judge_bad(code, &out, case.all, case.any);
            if !why.is_empty() {
                failures.push(format!(
                    "{ctx:?} `{}`: {}\n    nginx -t said: {}",
                    case.snippet,
                    why.join(", "),
                    out.trim().replace('\n', "\n                   ")
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn check_good(cases: &[(&[Ctx], &str)]) {
    assert_module_loads();
    let mut failures = Vec::new();
    for (ctxs, snippet) in cases {
        for &ctx in *ctxs {
            let (code, out) = nginx_t(&conf(ctx, snippet, TCP_SERVER));
            if code != 0 || out.contains("[emerg]") {
                failures.push(format!(
                    "{ctx:?} `{snippet}`: exit code {code}\n    nginx -t said: {}",
                    out.trim().replace('\n', "\n                   ")
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} valid configuration(s) rejected:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn check_parameter_values() {
    check_bad(&[
        bad_param!("check interval=99;", "interval=99"),
        bad_param!("check interval=abc;", "interval=abc"),
        bad_param!("check interval=-1;", "interval=-1"),
        bad_param!("check interval=0x10;", "interval=0x10"),
        bad_param!(
            "check interval=99999999999999999999;",
            "interval=99999999999999999999"
        ),
        bad_param!("check interval=;", "interval="),
        bad_param!("check timeout=0;", "timeout=0"),
        bad_param!("check rise=0;", "rise=0"),
        bad_param!("check fall=0;", "fall=0"),
        bad_param!("check port=0;", "port=0"),
        bad_param!("check port=65536;", "port=65536"),
        bad_param!("check default_down=yes;", "default_down=yes"),
        bad_param!("check type=TCP;", "type=TCP"),
        bad_param!("check unknown=1;", "unknown=1"),
        bad_param!("check keepalive=:5s:6s;", "keepalive=:5s:6s"),
        bad_param!("check keepalive=::0;", "keepalive=::0"),
        bad_param!("check keepalive=:::128;", "keepalive=:::128"),
        bad_param!("check keepalive=:40000;", "keepalive=:40000"),
    ]);
}

// ---------------------------------------------------------------------------
// type=http checks and check_match blocks (docs/directives.md, check and check_match):
// these need snippets in two places (a block in http{} or stream{}, the
// check that uses it in the upstream), and their messages name the upstream,
// "u" in http and "s" in stream.

/// One configuration and what `nginx -t` must say about it.
struct Placed {
    /// Snippets and where they go.
    places: Vec<(Ctx, String)>,
    /// Every one of these must appear in the output.
    all: Vec<String>,
    /// If not empty, at least one of these must appear too.
    any: &'static [&'static str],
}

/// The same case in http (upstream "u") and in stream (upstream "s"):
/// `top` goes into `http {}` / `stream {}`, `up` into the upstream, and
/// `all` gives the texts the message must contain for an upstream name.
fn in_both(top: &str, up: &str, all: impl Fn(&str) -> Vec<String>) -> Vec<Placed> {
    [
        (Ctx::Http, Ctx::HttpUpstream, "u"),
        (Ctx::Stream, Ctx::StreamUpstream, "s"),
    ]
    .into_iter()
    .map(|(main, upstream, name)| Placed {
        places: vec![(main, top.to_string()), (upstream, up.to_string())],
        all: all(name),
        any: &[],
    })
    .collect()
}

fn placed_conf(p: &Placed) -> String {
    let places: Vec<(Ctx, &str)> = p.places.iter().map(|(c, s)| (*c, s.as_str())).collect();
    conf_at(&places, TCP_SERVER)
}

fn describe(p: &Placed) -> String {
    p.places
        .iter()
        .map(|(c, s)| format!("{c:?} `{s}`"))
        .collect::<Vec<_>>()
        .join(" + ")
}

fn check_placed_bad(cases: &[Placed]) {
    assert_module_loads();
    let mut failures = Vec::new();
    for case in cases {
        let (code, out) = nginx_t(&placed_conf(case));
        let all: Vec<&str> = case.all.iter().map(String::as_str).collect();
        let why = judge_bad(code, &out, &all, case.any);
        if !why.is_empty() {
            failures.push(format!(
                "{}: {}\n    nginx -t said: {}",
                describe(case),
                why.join(", "),
                out.trim().replace('\n', "\n                   ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn check_placed_good(cases: &[Placed]) {
    assert_module_loads();
    let mut failures = Vec::new();
    for case in cases {
        let (code, out) = nginx_t(&placed_conf(case));
        if code != 0 || out.contains("[emerg]") {
            failures.push(format!(
                "{}: exit code {code}\n    nginx -t said: {}",
                describe(case),
                out.trim().replace('\n', "\n                   ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} valid configuration(s) rejected:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `type=http` is a check type of its own now (it used to be rejected
/// with a hint to use tcp or udp), with every directive that shapes its
/// request and verdict.
#[test]
fn check_type_http_is_accepted() {
    let up: &[Ctx] = &UPSTREAMS;
    check_good(&[
        (up, "check type=http;"),
        (
            up,
            "check interval=3000 rise=2 fall=5 timeout=1000 default_down=true type=http;",
        ),
        (up, "check interval=1000 type=http port=8080;"),
        (up, "check interval=1000 type=http reuse=on;"),
        (
            up,
            "check interval=1000 type=http reuse=on; check_keepalive_requests 5;",
        ),
        (up, "check interval=1000 type=http reuse=30s;"),
        (
            up,
            "check interval=1000 type=http; check_http_request /ready;",
        ),
        (
            up,
            "check interval=1000 type=http; check_http_request HEAD /health; \
             check_http_header X-Probe 1; check_http_header Host health.example;",
        ),
        (
            up,
            "check interval=1000 type=http; check_http_send \"GET /\\x41 HTTP/1.0\\r\\n\\r\\n\";",
        ),
        (
            up,
            "check interval=1000 type=http; check_http_expect_alive http_2xx http_3xx;",
        ),
        (
            up,
            "check interval=1000 type=http; check_http_expect_alive http_4xx;",
        ),
        (up, "check interval=1000 type=http; check_buffer_size 1k;"),
        (up, "check interval=1000 type=http; check_buffer_size 64k;"),
        (up, "check interval=1000 type=http; check_buffer_size 1m;"),
    ]);
}

/// `check_match` blocks in `http {}` and `stream {}`, used by http checks
/// (status, header, body tests) and by tcp and udp checks (send, expect).
#[test]
fn check_match_blocks_are_accepted() {
    let none = |_: &str| Vec::new();
    let mut cases = Vec::new();
    for (top, up) in [
        (
            "check_match ok { status 200-399; header ! X-Maintenance; \
             header Content-Type ~* \"^text/\"; body !~ \"maintenance\"; }",
            "check interval=1000 type=http match=ok;",
        ),
        (
            "check_match ok { status 200 204; header X-Role = primary; \
             header X-Replica != yes; header X-Ready; body ~ \"ok\"; }",
            "check interval=1000 type=http reuse=on match=ok;",
        ),
        (
            "check_match ok { status ! 500 502-504; }",
            "check interval=1000 type=http match=ok; check_http_request HEAD /;",
        ),
        (
            "check_match redis { send \"PING\\r\\n\"; expect \"+PONG\"; }",
            "check interval=1000 type=tcp match=redis;",
        ),
        (
            "check_match redis { send \"PING\\x0d\\x0a\"; expect ~ \"^\\+PONG\"; }",
            "check interval=1000 match=redis;",
        ),
        (
            "check_match dns { send \"\\x00\\x01ping\"; expect ~* \"^pong\"; }",
            "check interval=1000 type=udp match=dns;",
        ),
        (
            "check_match pong { expect \"PONG\"; }",
            "check interval=1000 type=udp match=pong;",
        ),
    ] {
        cases.extend(in_both(top, up, none));
    }
    check_placed_good(&cases);
}

/// The http directives need `type=http`; check_http_send is the whole
/// request, so it excludes check_http_request and check_http_header.
#[test]
fn check_http_directives_need_type_http() {
    let mut cases = Vec::new();
    for (directive, line) in [
        (
            "check_http_send",
            "check_http_send \"GET / HTTP/1.0\\r\\n\\r\\n\";",
        ),
        ("check_http_request", "check_http_request HEAD /health;"),
        ("check_http_header", "check_http_header X-Probe 1;"),
    ] {
        if directive == "check_http_send" {
            // The bytes of tcp and the datagram of udp (compat.rs); not mysql.
            cases.extend(in_both("", &format!("check type=mysql; {line}"), |u| {
                vec![format!(
                    "\"{directive}\" requires \"check ... type=http (the request), type=tcp \
                     (bytes sent, nothing read) or type=udp (the datagram)\" in upstream \"{u}\", \
                     which has type=mysql"
                )]
            }));
            continue;
        }
        let takes = "type=http";
        for (check, t) in [
            ("check interval=1000;", "tcp"),
            ("check interval=1000 type=udp;", "udp"),
        ] {
            cases.extend(in_both("", &format!("{check} {line}"), |u| {
                vec![format!(
                    "\"{directive}\" requires \"check ... {takes}\" in upstream \"{u}\", which \
                     has type={t}"
                )]
            }));
        }
    }
    for (other, lines) in [
        (
            "check_http_request",
            "check_http_send \"GET / HTTP/1.0\\r\\n\\r\\n\"; check_http_request /x;",
        ),
        (
            "check_http_request",
            "check_http_request /x; check_http_send \"GET / HTTP/1.0\\r\\n\\r\\n\";",
        ),
        (
            "check_http_header",
            "check_http_send \"GET / HTTP/1.0\\r\\n\\r\\n\"; check_http_header X-Probe 1;",
        ),
    ] {
        cases.extend(in_both(
            "",
            &format!("check interval=1000 type=http; {lines}"),
            |u| {
                vec![format!(
                    "\"check_http_send\" and \"{other}\" cannot both be used in upstream \
                     \"{u}\": check_http_send is the whole request"
                )]
            },
        ));
    }
    check_placed_bad(&cases);
}

/// `match=` must name a block of the same context (http blocks are not
/// seen by stream upstreams) whose tests fit the check type; a block needs
/// tests; status codes are 100..599; a regex PCRE refuses fails with
/// PCRE's message.
#[test]
fn check_match_errors() {
    let mut cases = Vec::new();
    cases.extend(in_both(
        "",
        "check interval=1000 type=http match=nope;",
        |u| vec![format!("unknown check_match \"nope\" in upstream \"{u}\"")],
    ));
    // A block of http {} is unknown in stream {} and the other way round.
    for (block_at, upstream_at, u) in [
        (Ctx::Http, Ctx::StreamUpstream, "s"),
        (Ctx::Stream, Ctx::HttpUpstream, "u"),
    ] {
        cases.push(Placed {
            places: vec![
                (block_at, "check_match ok { status 200; }".to_string()),
                (
                    upstream_at,
                    "check interval=1000 type=http match=ok;".to_string(),
                ),
            ],
            all: vec![format!("unknown check_match \"ok\" in upstream \"{u}\"")],
            any: &[],
        });
    }
    cases.extend(in_both(
        "check_match m { }",
        "check interval=1000 type=http match=m;",
        |_| vec!["check_match \"m\" has no tests".to_string()],
    ));
    for t in ["tcp", "udp"] {
        cases.extend(in_both(
            "check_match m { status 200; }",
            &format!("check interval=1000 type={t} match=m;"),
            |u| {
                vec![format!(
                    "check_match \"m\" cannot be used by the type={t} check of upstream \
                     \"{u}\": its \"status\" test needs type=http"
                )]
            },
        ));
    }
    cases.extend(in_both(
        "check_match m { send \"PING\\r\\n\"; expect \"+PONG\"; }",
        "check interval=1000 type=http match=m;",
        |u| {
            vec![format!(
                "check_match \"m\" cannot be used by the type=http check of upstream \"{u}\": \
                 its \"send\" test needs"
            )]
        },
    ));
    for (top, value) in [
        ("check_match m { status 600; }", "600"),
        ("check_match m { status 200-600; }", "200-600"),
        ("check_match m { status ! 99; }", "99"),
    ] {
        cases.extend(in_both(
            top,
            "check interval=1000 type=http match=m;",
            |_| {
                vec![format!(
                "invalid value \"{value}\" in \"status\" test: status codes are from 100 to 599"
            )]
            },
        ));
    }
    for (top, up) in [
        (
            "check_match m { body ~ \"(unclosed\"; }",
            "check interval=1000 type=http match=m;",
        ),
        (
            "check_match m { header Server ~* \"(unclosed\"; }",
            "check interval=1000 type=http match=m;",
        ),
        (
            "check_match m { send \"PING\\r\\n\"; expect ~ \"(unclosed\"; }",
            "check interval=1000 type=tcp match=m;",
        ),
    ] {
        for mut case in in_both(top, up, |_| vec!["(unclosed".to_string()]) {
            // PCRE's own words after nginx's "pcre2_compile() failed" (or
            // "pcre_compile() failed" with PCRE 1).
            case.any = &["pcre", "PCRE"];
            cases.push(case);
        }
    }
    check_placed_bad(&cases);
}

/// `check_buffer_size` takes 1k .. 1m.
#[test]
fn check_buffer_size_bounds() {
    let mut cases = Vec::new();
    for value in ["100", "1023", "2m", "abc"] {
        cases.extend(in_both(
            "",
            &format!("check interval=1000 type=http; check_buffer_size {value};"),
            |_| {
                vec![format!(
                    "invalid value \"{value}\" in \"check_buffer_size\" directive"
                )]
            },
        ));
    }
    cases.extend(in_both(
        "",
        "check interval=1000 type=http; check_buffer_size 100;",
        |_| {
            vec!["invalid value \"100\" in \"check_buffer_size\" directive: \
                 size must be from 1k to 1m"
                .to_string()]
        },
    ));
    check_placed_bad(&cases);
}

#[test]
fn check_cross_parameter_rules() {
    check_bad(&[
        // (a timeout not below interval is accepted with a [warn]: compat.rs)
        // reuse/keepalive are TCP only, whatever the order
        bad_param!("check reuse=on type=udp;", "reuse=on"),
        bad_param!("check type=udp reuse=on;", "reuse=on"),
        bad_param!("check keepalive=on type=udp;", "keepalive=on"),
        // a reuse period must exceed interval
        bad_param!("check interval=2000 reuse=1s;", "reuse=1s"),
        // explicit idle (40 s) must be below the rehandshake period (30 s)
        bad_param!(
            "check interval=1000 keepalive=30s:40s;",
            "keepalive=30s:40s"
        ),
        // intvl 2 s exceeds the computed idle of 1 s
        bad_param!(
            "check interval=1500 reuse=2s keepalive=::2s;",
            "keepalive=::2s"
        ),
        // the same parameter twice: the repetition is named
        bad_param!("check interval=200 interval=300;", "interval=300"),
        // no positive idle below a 1 s period: either parameter may be blamed
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check interval=500 reuse=1s keepalive=on;",
            server: TCP_SERVER,
            all: &["invalid parameter \""],
            any: &["\"keepalive=on\"", "\"reuse=1s\""],
        },
    ]);
}

#[test]
fn directives_that_do_nothing_load_with_a_warning_as_in_the_c_modules() {
    // check_http_expect_alive where no HTTP status is read, and the http
    // directives of an upstream without check: accepted and ignored by
    // the C modules; here accepted with a [warn] that says so.
    for ctx in UPSTREAMS {
        let u = if ctx == Ctx::StreamUpstream { "s" } else { "u" };
        for (lines, warn) in [
            (
                "check interval=1000 type=tcp; check_http_expect_alive http_2xx;",
                "[warn] \"check_http_expect_alive\" has no effect in upstream \"{u}\": a type=tcp \
                 check reads no HTTP status in ",
            ),
            (
                "check interval=1000; check_http_send \"HEAD / HTTP/1.0\\r\\n\\r\\n\"; \
                 check_http_expect_alive http_2xx;",
                "[warn] \"check_http_expect_alive\" has no effect in upstream \"{u}\": a type=tcp \
                 check reads no HTTP status (did you mean check ... type=http?) in ",
            ),
            (
                "check_http_send \"GET / HTTP/1.0\\r\\n\\r\\n\"; check_http_expect_alive http_2xx;",
                "[warn] \"check_http_send\" has no effect in upstream \"{u}\": it has no check in ",
            ),
        ] {
            let (code, out) = nginx_t(&conf(ctx, lines, TCP_SERVER));
            assert_eq!(code, 0, "{ctx:?} {lines}: {out}");
            let warn = warn.replace("{u}", u);
            assert!(out.contains(&warn), "{ctx:?} {lines}: {out}");
        }
    }
}

/// `check_outlier` rules that can never trip load with a `[warn]` naming
/// why: consecutive_5xx in a stream upstream, success_rate over fewer than
/// 5 peers. The implied default rule of a stream upstream warns about
/// nothing (it counts errors there).
#[test]
fn outlier_rules_that_never_trip_load_with_a_warning() {
    let (code, out) = nginx_t(&conf(
        Ctx::StreamUpstream,
        "check type=tcp; check_outlier consecutive_5xx=3 success_rate=on;",
        TCP_SERVER,
    ));
    assert_eq!(code, 0, "{out}");
    for warn in [
        "[warn] \"check_outlier\" consecutive_5xx=3 never trips in stream upstream \"s\": a \
         stream peer answers no HTTP status; consecutive_errors counts its connect errors, \
         timeouts and resets (docs/outliers.md) in ",
        "[warn] \"check_outlier\" success_rate=on never applies in upstream \"s\": it compares \
         at least 5 peers and the upstream has 1 (docs/outliers.md) in ",
    ] {
        assert!(out.contains(warn), "{warn}\n{out}");
    }
    let (code, out) = nginx_t(&conf(
        Ctx::StreamUpstream,
        "check type=tcp; check_outlier;",
        TCP_SERVER,
    ));
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("check_outlier"), "{out}");
    let (code, out) = nginx_t(&conf(
        Ctx::HttpUpstream,
        "check type=tcp; check_outlier consecutive_5xx=3;",
        TCP_SERVER,
    ));
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("never trips"), "{out}");
}

#[test]
fn check_port_with_unix_server() {
    // Accepted, as Tengine does: the unix server is checked on its own
    // address, with a [warn] (compat.rs starts it).
    for ctx in UPSTREAMS {
        let (code, out) = nginx_t(&conf(ctx, "check interval=1000 port=8080;", UNIX_SERVER));
        assert_eq!(code, 0, "{ctx:?}: {out}");
        assert!(
            out.contains("[warn] \"check\" ignores \"port=8080\" for the unix-socket server"),
            "{ctx:?}: {out}"
        );
    }
}

#[test]
fn check_duplicate_and_misplaced() {
    check_bad(&[Bad {
        ctxs: &[
            Ctx::HttpServer,
            Ctx::HttpLocation,
            Ctx::StreamServer,
            Ctx::Http,
            Ctx::Stream,
        ],
        snippet: "check interval=1000;",
        server: TCP_SERVER,
        all: &["\"check\" directive is not allowed here"],
        any: &[],
    }]);
}

#[test]
fn single_value_directives() {
    let ctx_both = &[Ctx::Http, Ctx::Stream];
    check_bad(&[
        Bad {
            ctxs: ctx_both,
            snippet: "check_shm_size 0;",
            server: TCP_SERVER,
            all: &["invalid value \"0\" in \"check_shm_size\" directive"],
            any: &[],
        },
        Bad {
            ctxs: ctx_both,
            snippet: "check_shm_size abc;",
            server: TCP_SERVER,
            all: &["invalid value \"abc\" in \"check_shm_size\" directive"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check interval=1000 reuse=on; check_keepalive_requests 0;",
            server: TCP_SERVER,
            all: &["invalid value \"0\" in \"check_keepalive_requests\" directive"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check interval=1000 shared=yes;",
            server: TCP_SERVER,
            all: &["invalid parameter \"shared=yes\": shared must be on or off"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check interval=1000 reuse=on; check_keepalive_time 0;",
            server: TCP_SERVER,
            all: &[
                "invalid value \"0\" in \"check_keepalive_time\" directive: must be a time \
                    from 1ms to 7d (30s, 10m, 1h)",
            ],
            any: &[],
        },
        Bad {
            ctxs: ctx_both,
            snippet: "check_max_connections 0;",
            server: TCP_SERVER,
            all: &[
                "invalid value \"0\" in \"check_max_connections\" directive: must be a \
                    number of connections from 1 to 1000000 or a share of worker_connections \
                    from 1% to 100%",
            ],
            any: &[],
        },
        Bad {
            ctxs: ctx_both,
            snippet: "check_max_inflight -1;",
            server: TCP_SERVER,
            all: &[
                "invalid value \"-1\" in \"check_max_inflight\" directive: must be a \
                    decimal integer from 0 (no limit) to 65535",
            ],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check interval=1000; check_max_inflight 70000;",
            server: TCP_SERVER,
            all: &["invalid value \"70000\" in \"check_max_inflight\" directive"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check interval=1000; check_max_inflight 4; check_max_inflight 4;",
            server: TCP_SERVER,
            all: &["\"check_max_inflight\" directive is duplicate"],
            any: &[],
        },
        Bad {
            ctxs: &[Ctx::HttpLocation],
            snippet: "healthcheck_status xml;",
            server: TCP_SERVER,
            all: &["invalid value \"xml\" in \"healthcheck_status\" directive"],
            any: &[],
        },
    ]);
}

#[test]
fn passive_fall_and_fail_open() {
    check_bad(&[
        bad_param!("check passive_fall=-1;", "passive_fall=-1"),
        bad_param!("check passive_fall=100001;", "passive_fall=100001"),
        bad_param!("check passive_fall;", "passive_fall"),
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tcp; check_fail_open 100%;",
            server: TCP_SERVER,
            all: &[
                "invalid value \"100%\" in \"check_fail_open\" directive: at 100% the check \
                    would never keep a peer out: use at most 99%",
            ],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tcp; check_fail_open half;",
            server: TCP_SERVER,
            all: &[
                "invalid value \"half\" in \"check_fail_open\" directive: must be off, on \
                    or a percentage from 0% to 99%",
            ],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tcp; check_fail_open on; check_fail_open off;",
            server: TCP_SERVER,
            all: &["\"check_fail_open\" directive is duplicate"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check_fail_open on;",
            server: TCP_SERVER,
            all: &["\"check_fail_open\" requires \"check\" in upstream"],
            any: &[],
        },
        Bad {
            ctxs: &[Ctx::Http, Ctx::Stream],
            snippet: "check_fail_open on;",
            server: TCP_SERVER,
            all: &["\"check_fail_open\" directive is not allowed here"],
            any: &[],
        },
    ]);
    let up: &[Ctx] = &UPSTREAMS;
    check_good(&[
        (up, "check type=tcp passive_fall=0;"),
        (up, "check type=tcp passive_fall=5;"),
        (up, "check type=udp passive_fall=2;"),
        (up, "check type=tcp; check_fail_open off;"),
        (up, "check_fail_open on; check type=tcp;"),
        (up, "check type=tcp; check_fail_open 0%;"),
        (up, "check type=tcp; check_fail_open 99%;"),
    ]);
}

/// `check_outlier`: each bad parameter is named with its value, as
/// docs/directives.md lists them; every parameter loads.
#[test]
fn outlier_detection() {
    let bad = |snippet: &'static str, all: &'static [&'static str]| Bad {
        ctxs: &UPSTREAMS,
        snippet,
        server: TCP_SERVER,
        all,
        any: &[],
    };
    check_bad(&[
        bad(
            "check type=tcp; check_outlier consecutive_5xx=0;",
            &[
                "invalid value \"consecutive_5xx=0\" in \"check_outlier\" directive: \
               consecutive_5xx must be a decimal integer from 1 to 1000000",
            ],
        ),
        bad(
            "check type=tcp; check_outlier max_ejected=0%;",
            &[
                "invalid value \"max_ejected=0%\" in \"check_outlier\" directive: max_ejected \
               must be a percentage from 1% to 100%",
            ],
        ),
        bad(
            "check type=tcp; check_outlier latency=soon;",
            &[
                "invalid value \"latency=soon\" in \"check_outlier\" directive: latency must be \
               a time from 1ms to 1d (500ms, 10s, 5m)",
            ],
        ),
        bad(
            "check type=tcp; check_outlier stdev_factor=20;",
            &[
                "invalid value \"stdev_factor=20\" in \"check_outlier\" directive: \
               stdev_factor must be a decimal number from 0.1 to 10 (1.9, 2.5)",
            ],
        ),
        bad(
            "check type=tcp; check_outlier eject=1s;",
            &[
                "invalid parameter \"eject=1s\" in \"check_outlier\" directive: the parameters \
               are consecutive_5xx, consecutive_errors, failure_percentage, success_rate, \
               stdev_factor, latency, min_requests, interval, ejection, max_ejection and \
               max_ejected (docs/directives.md, check_outlier)",
            ],
        ),
        bad(
            "check type=tcp; check_outlier ejection=10m max_ejection=1m;",
            &[
                "\"check_outlier\" max_ejection=60000ms is shorter than ejection=600000ms: \
               max_ejection caps the growing ejection time and must be at least ejection",
            ],
        ),
        bad(
            "check type=tcp; check_outlier; check_outlier;",
            &["\"check_outlier\" directive is duplicate"],
        ),
    ]);
    let up: &[Ctx] = &UPSTREAMS;
    check_good(&[
        (up, "check type=tcp; check_outlier;"),
        // Without `check`: the peers are judged by their traffic alone.
        (up, "check_outlier consecutive_errors=3;"),
        (
            up,
            "check type=tcp; check_outlier consecutive_5xx=3 consecutive_errors=4 \
             failure_percentage=30 success_rate=on stdev_factor=2.5 latency=500ms \
             min_requests=20 interval=2s ejection=3s max_ejection=1m max_ejected=20%;",
        ),
    ]);
}

#[test]
fn tls_directives() {
    check_bad(&[
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tcp; check_ssl_name a.test;",
            server: TCP_SERVER,
            all: &["\"check_ssl_name\" requires \"check ... type=https\" or \"type=tls\" in upstream"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check_ssl_verify on; check_ssl_trusted_certificate /etc/ssl/certs/ca-certificates.crt;",
            server: TCP_SERVER,
            all: &["\"check_ssl_verify\" requires \"check ... type=https\" or \"type=tls\""],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tls; check_ssl_verify on;",
            server: TCP_SERVER,
            all: &["\"check_ssl_verify\" is on but upstream", "has no \"check_ssl_trusted_certificate\""],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=https; check_ssl_certificate /nonexistent/c.pem;",
            server: TCP_SERVER,
            all: &["\"check_ssl_certificate\" requires \"check_ssl_certificate_key\""],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=https; check_ssl_certificate_key /nonexistent/c.key;",
            server: TCP_SERVER,
            all: &["\"check_ssl_certificate_key\" requires \"check_ssl_certificate\""],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tls; check_ssl_certificate /nonexistent/c.pem; \
                      check_ssl_certificate_key /nonexistent/c.key;",
            server: TCP_SERVER,
            all: &["cannot load certificate \"/nonexistent/c.pem\""],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tls; check_ssl_verify on; \
                      check_ssl_trusted_certificate /nonexistent/ca.pem;",
            server: TCP_SERVER,
            all: &["/nonexistent/ca.pem"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tls; check_ssl_verify maybe;",
            server: TCP_SERVER,
            all: &["invalid value \"maybe\" in \"check_ssl_verify\" directive, it must be \"on\" or \"off\""],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tls; check_ssl_protocols TLSv1.2 TLSv9;",
            server: TCP_SERVER,
            all: &["invalid value \"TLSv9\" in \"check_ssl_protocols\" directive"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tls; check_ssl_verify_depth 1000;",
            server: TCP_SERVER,
            all: &["invalid value \"1000\" in \"check_ssl_verify_depth\" directive"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tls; check_ssl_ciphers NO-SUCH-CIPHER;",
            server: TCP_SERVER,
            all: &["NO-SUCH-CIPHER"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check type=tls; check_ssl_name a.test; check_ssl_name b.test;",
            server: TCP_SERVER,
            all: &["\"check_ssl_name\" directive is duplicate"],
            any: &[],
        },
        bad_param!("check type=pop3;", "type=pop3"),
    ]);
    let up: &[Ctx] = &UPSTREAMS;
    check_good(&[
        (up, "check type=https;"),
        (up, "check type=tls;"),
        (up, "check type=ssl_hello;"),
        (
            up,
            "check type=https; check_ssl_server_name off; check_ssl_name api.test; \
             check_ssl_protocols TLSv1.2 TLSv1.3; check_ssl_ciphers HIGH:!aNULL; \
             check_ssl_session_reuse off; check_ssl_verify off; check_ssl_verify_depth 3;",
        ),
        (
            up,
            "check type=tls; check_ssl_verify on; \
             check_ssl_trusted_certificate /etc/ssl/certs/ca-certificates.crt;",
        ),
    ]);
}

#[test]
fn check_state_file_arguments() {
    let top: &[Ctx] = &[Ctx::Http, Ctx::Stream];
    check_bad(&[
        Bad {
            ctxs: top,
            snippet: "check_state_file \"\";",
            server: TCP_SERVER,
            all: &["invalid value \"\" in \"check_state_file\" directive: the path is empty"],
            any: &[],
        },
        Bad {
            ctxs: top,
            snippet: "check_state_file /var/lib/;",
            server: TCP_SERVER,
            all: &[
                "invalid value \"/var/lib/\" in \"check_state_file\" directive: the path \
                    names a directory, not a file",
            ],
            any: &[],
        },
        Bad {
            ctxs: top,
            snippet: "check_state_file a; check_state_file b;",
            server: TCP_SERVER,
            all: &["\"check_state_file\" directive is duplicate"],
            any: &[],
        },
        Bad {
            ctxs: top,
            snippet: "check_state_file a b;",
            server: TCP_SERVER,
            all: &["invalid number of arguments in \"check_state_file\" directive"],
            any: &[],
        },
        Bad {
            ctxs: &[Ctx::HttpServer, Ctx::StreamServer, Ctx::HttpUpstream],
            snippet: "check_state_file a;",
            server: TCP_SERVER,
            all: &["\"check_state_file\" directive is not allowed here"],
            any: &[],
        },
    ]);
    // One file for both contexts: refused in the one parsed second.
    check_placed_bad(&[Placed {
        places: vec![
            (Ctx::Http, "check_state_file logs/hc.state;".into()),
            (Ctx::Stream, "check_state_file logs/hc.state;".into()),
        ],
        all: vec![
            "invalid value \"logs/hc.state\" in \"check_state_file\" directive: the http \
             context uses this file already; give http and stream their own"
                .into(),
        ],
        any: &[],
    }]);
    // Different files: fine.
    check_placed_good(&[Placed {
        places: vec![
            (Ctx::Http, "check_state_file logs/http.state;".into()),
            (Ctx::Stream, "check_state_file logs/stream.state;".into()),
        ],
        all: Vec::new(),
        any: &[],
    }]);
}

#[test]
fn healthcheck_admin_arguments() {
    let loc: &[Ctx] = &[Ctx::HttpLocation];
    check_bad(&[
        Bad {
            ctxs: loc,
            snippet: "healthcheck_admin on;",
            server: TCP_SERVER,
            all: &["invalid number of arguments in \"healthcheck_admin\" directive"],
            any: &[],
        },
        Bad {
            ctxs: loc,
            snippet: "healthcheck_admin; healthcheck_admin;",
            server: TCP_SERVER,
            all: &["\"healthcheck_admin\" directive is duplicate"],
            any: &[],
        },
        Bad {
            ctxs: loc,
            snippet: "healthcheck_status json; healthcheck_admin;",
            server: TCP_SERVER,
            all: &["\"healthcheck_status\" and \"healthcheck_admin\" cannot share a location"],
            any: &[],
        },
        Bad {
            ctxs: loc,
            snippet: "healthcheck_admin; healthcheck_status;",
            server: TCP_SERVER,
            all: &["\"healthcheck_status\" and \"healthcheck_admin\" cannot share a location"],
            any: &[],
        },
        Bad {
            ctxs: loc,
            snippet: "check_status; check_status json;",
            server: TCP_SERVER,
            all: &["\"check_status\" directive is duplicate"],
            any: &[],
        },
        Bad {
            ctxs: loc,
            snippet: "healthcheck_status; l4check_status;",
            server: TCP_SERVER,
            all: &["\"l4check_status\" and \"healthcheck_status\" cannot share a location"],
            any: &[],
        },
        Bad {
            ctxs: loc,
            snippet: "check_status; healthcheck_admin;",
            server: TCP_SERVER,
            all: &["\"check_status\" and \"healthcheck_admin\" cannot share a location"],
            any: &[],
        },
        Bad {
            ctxs: &[Ctx::HttpServer],
            snippet: "healthcheck_admin;",
            server: TCP_SERVER,
            all: &["\"healthcheck_admin\" directive is not allowed here"],
            any: &[],
        },
    ]);
}

#[test]
fn vnswrr_arguments() {
    check_bad(&[
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "vnswrr max_init=abc;",
            server: TCP_SERVER,
            all: &["invalid parameter \"max_init=abc\" in \"vnswrr\" directive"],
            any: &[],
        },
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "vnswrr 5;",
            server: TCP_SERVER,
            all: &["invalid parameter \"5\" in \"vnswrr\" directive"],
            any: &[],
        },
    ]);
}

#[test]
fn valid_configurations_pass() {
    let up: &[Ctx] = &UPSTREAMS;
    let loc: &[Ctx] = &[Ctx::HttpLocation];
    let top: &[Ctx] = &[Ctx::Http, Ctx::Stream];
    check_good(&[
        // docs/directives.md, check: errors and examples
        (
            up,
            "check interval=3000 rise=2 fall=5 timeout=1000 default_down=true type=tcp;",
        ),
        (
            up,
            "check interval=1000 timeout=900 type=tcp reuse=30s keepalive=30s:5s:1s:3;",
        ),
        (
            up,
            "check interval=1000 type=tcp reuse=30s keepalive=off:5s:1s:3;",
        ),
        (up, "check interval=1500 type=tcp reuse=2s keepalive=on;"),
        (
            up,
            "check type=udp interval=3000 rise=2 fall=5 timeout=1000 default_down=true;",
        ),
        (
            up,
            "check interval=3000 rise=2 fall=5 timeout=1000 default_down=true type=tcp reuse=on;",
        ),
        (up, "check interval=500 reuse=1s;"),
        // every default
        (up, "check type=tcp;"),
        // docs/directives.md, check: computed values and documented spellings
        (up, "check keepalive=on;"),
        (up, "check interval=20000 reuse=on;"),
        (up, "check keepalive=:;"),
        (up, "check keepalive=off:;"),
        (up, "check interval=3s timeout=500ms;"),
        (up, "check interval=1000 port=8080 default_down=false;"),
        (
            up,
            "check interval=1000 reuse=on; check_keepalive_requests 5;",
        ),
        (up, "vnswrr;"),
        (up, "vnswrr max_init=0;"),
        (up, "vnswrr max_init=3;"),
        (up, "vnswrr; check interval=1000;"),
        (top, "check_shm_size 10m;"),
        (loc, "healthcheck_status;"),
        (loc, "healthcheck_status html;"),
        (loc, "healthcheck_status csv;"),
        (loc, "healthcheck_status json;"),
        (loc, "healthcheck_status prometheus;"),
        (loc, "healthcheck_admin;"),
        (top, "check_state_file logs/healthcheck.state;"),
    ]);
}

#[test]
fn module_loads_without_any_directive() {
    assert_module_loads();
}

/// `down_interval=` and `jitter=` (docs/directives.md, check; docs/design.md, How rounds are scheduled): the bounds of `interval`, and both below every interval in
/// force, each error naming the parameter, its value and the rule.
#[test]
fn check_schedule_parameters() {
    macro_rules! bad_sched {
        ($line:literal, $message:literal) => {
            Bad {
                ctxs: &UPSTREAMS,
                snippet: $line,
                server: TCP_SERVER,
                all: &[$message],
                any: &[],
            }
        };
    }
    check_bad(&[
        bad_sched!(
            "check down_interval=99;",
            "invalid parameter \"down_interval=99\": down_interval must be at least 100 ms"
        ),
        bad_sched!(
            "check down_interval=86400001;",
            "invalid parameter \"down_interval=86400001\": \
             down_interval must be at most 86400000 ms (24h)"
        ),
        bad_sched!(
            "check down_interval=1m30;",
            "invalid parameter \"down_interval=1m30\": \
             down_interval must be milliseconds or an nginx time (500ms, 3s)"
        ),
        bad_sched!(
            "check down_interval;",
            "invalid parameter \"down_interval\": down_interval requires a value (down_interval=...)"
        ),
        bad_sched!(
            "check jitter=abc;",
            "invalid parameter \"jitter=abc\": \
             jitter must be milliseconds or an nginx time (500ms, 3s)"
        ),
        bad_sched!(
            "check interval=1000 jitter=1s;",
            "invalid parameter \"jitter=1s\": jitter must be less than interval (1000 ms)"
        ),
        bad_sched!(
            "check interval=2000 down_interval=500 jitter=500;",
            "invalid parameter \"jitter=500\": jitter must be less than down_interval (500 ms)"
        ),
        bad_sched!(
            "check jitter=10 down_interval=200 jitter=20;",
            "invalid parameter \"jitter=20\": jitter is given twice"
        ),
    ]);
    let up: &[Ctx] = &UPSTREAMS;
    check_good(&[
        (up, "check interval=1000 down_interval=10s;"),
        (up, "check interval=10s down_interval=1000;"),
        (up, "check interval=1000 jitter=999;"),
        (up, "check interval=1000 jitter=0;"),
        (
            up,
            "check type=udp interval=2s down_interval=5s jitter=500ms;",
        ),
        (
            up,
            "check type=http interval=1s down_interval=3s jitter=200 reuse=on;",
        ),
    ]);
}
