//! What `nginx -t` says about the module's directives (README: Directives).
//!
//! Each bad input is placed in a configuration that is otherwise valid, and
//! must fail with exit code 1, an `[emerg]`, and the module's message:
//!
//! - `check` parameters: `invalid parameter "<arg as written>": <reason>`
//! - single-value directives: `invalid value "<arg>" in "<directive>" directive: <reason>`
//! - `vnswrr`: `invalid parameter "<arg>" in "vnswrr" directive`
//! - a second `check`: `"check" directive is duplicate`
//! - `check` outside `upstream`: nginx's `"check" directive is not allowed here`
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
    let at = |c: Ctx| if c == ctx { snippet } else { "" };
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

fn check_bad(cases: &[Bad]) {
    assert_module_loads();
    let mut failures = Vec::new();
    for case in cases {
        for &ctx in case.ctxs {
            let (code, out) = nginx_t(&conf(ctx, case.snippet, case.server));
            let mut why = Vec::new();
            if code != 1 {
                why.push(format!("exit code {code}, want 1"));
            }
            if !out.contains("[emerg]") {
                why.push("no [emerg]".to_string());
            }
            for s in case.all {
                if !out.contains(s) {
                    why.push(format!("missing {s:?}"));
                }
            }
            if !case.any.is_empty() && !case.any.iter().any(|s| out.contains(s)) {
                why.push(format!("missing one of {:?}", case.any));
            }
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

#[test]
fn check_type_http_hints_tcp_and_udp() {
    check_bad(&[Bad {
        ctxs: &UPSTREAMS,
        snippet: "check type=http;",
        server: TCP_SERVER,
        all: &["invalid parameter \"type=http\"", "tcp", "udp"],
        any: &[],
    }]);
}

#[test]
fn check_cross_parameter_rules() {
    check_bad(&[
        // timeout must be less than interval
        bad_param!("check interval=3000 timeout=5000;", "timeout=5000"),
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
fn check_port_with_unix_server() {
    check_bad(&[Bad {
        ctxs: &UPSTREAMS,
        snippet: "check interval=1000 port=8080;",
        server: UNIX_SERVER,
        all: &["port=", "unix:"],
        any: &[],
    }]);
}

#[test]
fn check_duplicate_and_misplaced() {
    check_bad(&[
        Bad {
            ctxs: &UPSTREAMS,
            snippet: "check interval=1000; check interval=2000;",
            server: TCP_SERVER,
            all: &["\"check\" directive is duplicate"],
            any: &[],
        },
        Bad {
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
        },
    ]);
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
            ctxs: &[Ctx::HttpLocation],
            snippet: "healthcheck_status xml;",
            server: TCP_SERVER,
            all: &["invalid value \"xml\" in \"healthcheck_status\" directive"],
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
        // README (check): the examples
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
        // README (check): the computed-values table and documented spellings
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
    ]);
}

#[test]
fn module_loads_without_any_directive() {
    assert_module_loads();
}
