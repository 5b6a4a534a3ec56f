//! Hostile HTTP/2 servers against `check type=grpc` (docs/directives.md,
//! type=grpc and type=grpcs): the scripted server of t/src/h2server.rs
//! breaks one rule per test, beside a healthy peer in the same upstream
//! (the scripted server's well-behaved mode, or the real grpcio server
//! of t/src/grpc.rs) that must stay up. Each hostile peer must go down
//! with the reason the docs give and the log line's words of the client's
//! error; the last test runs 1000 hostile rounds and checks that the
//! worker's memory and descriptors stay flat.

use std::time::Duration;

use healthcheck_t::grpc::{GrpcServer, Health};
use healthcheck_t::h2server::{code, Behaviour, H2Server};
use healthcheck_t::{free_port, poll_status_json, resting_fds, Builder, Kind, Nginx, Status};

const WAIT: Duration = Duration::from_secs(15);
/// The memory test's bound: 1000 rounds take about 10 s.
const LONG: Duration = Duration::from_secs(90);

/// nginx with `upstreams` in http and the JSON status page on the
/// returned port.
fn start(upstreams: &str) -> (Nginx, u16) {
    let port = free_port();
    let body = format!(
        "http {{
{upstreams}
    server {{ listen 127.0.0.1:{port}; location /status {{ healthcheck_status json; }} }}
}}"
    );
    (Builder::default().start(&body), port)
}

/// The check's parameters unless a test says otherwise.
const BASIC: &str = "interval=200 rise=1 fall=1";

/// An upstream of `bad` and `good` with `check type=grpc <params>;` and
/// the directives `extra`.
fn upstream(name: &str, bad: &str, good: &str, params: &str, extra: &str) -> String {
    format!(
        "    upstream {name} {{ server {bad}; server {good};
        check type=grpc {params}; {extra} }}\n"
    )
}

/// Waits until `bad` and `good` of `ups` have had 3 rounds each and `bad`
/// is down; then asserts that `bad`'s last failure is `reason` and that it
/// never came back up, that `good` is up and never went down, and that
/// the worker is the one that started (no crash). Returns the status
/// document.
fn assert_hostile_down(
    ng: &Nginx,
    port: u16,
    ups: &str,
    bad: &str,
    good: &str,
    reason: &str,
) -> Status {
    let workers = ng.workers();
    let s = poll_status_json(port, WAIT, format!("{ups}: {bad} down"), |s| {
        s.checks(Kind::Http, ups, bad) >= 3
            && s.checks(Kind::Http, ups, good) >= 3
            && s.is_down(Kind::Http, ups, bad)
    });
    assert_eq!(s.reason(Kind::Http, ups, bad), Some(reason), "{ups}: {s}");
    assert!(s.is_up(Kind::Http, ups, good), "the healthy peer: {s}");
    assert_eq!(
        s.reason(Kind::Http, ups, good),
        None,
        "the healthy peer: {s}"
    );
    let downs = ng.log_lines(&format!("upstream {ups} peer {good} is down"));
    assert!(downs.is_empty(), "the healthy peer went down: {downs:?}");
    let rises = ng.log_lines(&format!("upstream {ups} peer {bad} is up"));
    assert!(rises.is_empty(), "the hostile peer came back up: {rises:?}");
    assert_eq!(ng.workers(), workers, "the worker changed (crashed?)");
    s
}

/// The down line of `bad` in `ups` says `detail`.
fn assert_down_line(ng: &Nginx, ups: &str, bad: &str, detail: &str) {
    ng.wait_for_log(
        &format!("upstream {ups} peer {bad} is down after 1 failures: {detail} (http grpc check)"),
        WAIT,
    );
}

/// The down line of a `protocol` failure: HTTP/2's words, then `detail`.
fn assert_protocol_line(ng: &Nginx, ups: &str, bad: &str, detail: &str) {
    assert_down_line(ng, ups, bad, &format!("HTTP/2 protocol error: {detail}"));
}

#[test]
fn a_server_that_never_sends_settings_is_protocol_no_settings_in_time() {
    let bad = H2Server::start(Behaviour::Silent);
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream(
        "u",
        &bad.addr(),
        &good.addr(),
        "interval=400 rise=1 fall=1 timeout=300",
        "",
    ));
    assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "protocol");
    assert_protocol_line(&ng, "u", &bad.addr(), "no SETTINGS from the server in time");
    // The request went out (the client does not wait for SETTINGS).
    assert!(bad.requests() >= 3, "{:?}", bad.requests_per_connection());
}

#[test]
fn a_header_block_past_check_buffer_size_and_a_continuation_flood_are_protocol() {
    // 6000 bytes of head in 1000-byte fragments: over 4096 at the fifth.
    let big = H2Server::start(Behaviour::HeaderFlood {
        total: 6000,
        fragment: 1000,
    });
    // The same in 10-byte fragments: more CONTINUATIONs than a 4096-byte
    // block needs (16 + 4 allowed) long before 4096 bytes.
    let many = H2Server::start(Behaviour::HeaderFlood {
        total: 6000,
        fragment: 10,
    });
    let good = H2Server::start(Behaviour::Serving);
    let conf = upstream(
        "big",
        &big.addr(),
        &good.addr(),
        BASIC,
        "check_buffer_size 4k;",
    ) + &upstream(
        "many",
        &many.addr(),
        &good.addr(),
        BASIC,
        "check_buffer_size 4k;",
    );
    let (ng, port) = start(&conf);
    assert_hostile_down(&ng, port, "big", &big.addr(), &good.addr(), "protocol");
    assert_hostile_down(&ng, port, "many", &many.addr(), &good.addr(), "protocol");
    assert_protocol_line(&ng, "big", &big.addr(), "header block over 4096 bytes");
    assert_protocol_line(
        &ng,
        "many",
        &many.addr(),
        "CONTINUATION flood (over 20 in one header block)",
    );
}

#[test]
fn an_hpack_bomb_of_references_to_a_big_table_entry_is_protocol() {
    // A 64-byte trailer block naming a 3038-byte table entry 64 times
    // (194 KB decoded): stopped at check_buffer_size (16k).
    let bomb = H2Server::start(Behaviour::HpackBomb {
        entry: 3000,
        refs: 64,
    });
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream("u", &bomb.addr(), &good.addr(), BASIC, ""));
    assert_hostile_down(&ng, port, "u", &bomb.addr(), &good.addr(), "protocol");
    let detail = "decoded header list over 16384 bytes";
    assert_protocol_line(&ng, "u", &bomb.addr(), detail);
}

#[test]
fn an_hpack_table_size_update_beyond_4096_is_protocol() {
    let bad = H2Server::start(Behaviour::TableSizeUpdate(8192));
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream("u", &bad.addr(), &good.addr(), BASIC, ""));
    assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "protocol");
    let detail = "HPACK table size update 8192 > 4096";
    assert_protocol_line(&ng, "u", &bad.addr(), detail);
}

#[test]
fn a_frame_larger_than_16384_is_protocol() {
    let bad = H2Server::start(Behaviour::OversizedFrame(16_385));
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream("u", &bad.addr(), &good.addr(), BASIC, ""));
    assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "protocol");
    let detail = "frame of 16385 bytes > max 16384";
    assert_protocol_line(&ng, "u", &bad.addr(), detail);
}

const FLOOD: &str = "too many control frames (SETTINGS/PING/...) in one round (max 100)";

#[test]
fn a_settings_flood_of_300_in_one_round_is_protocol() {
    let bad = H2Server::start(Behaviour::SettingsFlood(300));
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream("u", &bad.addr(), &good.addr(), BASIC, ""));
    assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "protocol");
    assert_protocol_line(&ng, "u", &bad.addr(), FLOOD);
}

#[test]
fn a_ping_flood_of_300_in_one_round_is_protocol() {
    let bad = H2Server::start(Behaviour::PingFlood(300));
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream("u", &bad.addr(), &good.addr(), BASIC, ""));
    assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "protocol");
    assert_protocol_line(&ng, "u", &bad.addr(), FLOOD);
}

/// On a new connection the request (HEADERS and its 5 bytes of DATA) goes
/// out with the preface, before the server's SETTINGS can close the
/// window: the first round passes. A kept connection's next stream starts
/// with the window of SETTINGS_INITIAL_WINDOW_SIZE 0, its DATA waits for a
/// WINDOW_UPDATE that never comes, and the round times out (`timeout`:
/// the server only never answered). rise=2 keeps the peer down: a pass on
/// a new connection, a timeout on the kept one, over and over.
#[test]
fn a_zero_window_that_never_opens_stalls_the_kept_connections_stream_and_is_timeout() {
    let bad = H2Server::start(Behaviour::ZeroWindow);
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream(
        "u",
        &bad.addr(),
        &good.addr(),
        "interval=400 timeout=300 rise=2 fall=1 reuse=on",
        "",
    ));
    let s = assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "timeout");
    assert_eq!(s.row(Kind::Http, "u", &bad.addr())["grpc_status"], 0);
    assert_down_line(
        &ng,
        "u",
        &bad.addr(),
        "timed out: the server's flow-control window kept the request from going",
    );
    // Each connection: one answered stream, then one whose DATA never went.
    let per = bad.requests_per_connection();
    assert!(per.len() >= 2, "{per:?}");
    let done = &per[..per.len() - 1];
    assert!(done.iter().all(|&n| n == 2), "{per:?}");
    // The healthy peer kept one connection for all its rounds.
    assert_eq!(
        good.connections(),
        1,
        "{:?}",
        good.requests_per_connection()
    );
}

/// DATA after the server's END_STREAM, in the same read as the answer:
/// the client sees a frame on a closed stream (RFC 9113 section 5.1,
/// STREAM_CLOSED) before the engine judges the stream, and the round is
/// `protocol` although the answer said SERVING.
#[test]
fn data_after_end_stream_in_the_same_read_is_protocol_stream_closed() {
    let bad = H2Server::start(Behaviour::DataAfterEnd { delay: None });
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream("u", &bad.addr(), &good.addr(), BASIC, ""));
    assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "protocol");
    let detail = "DATA on closed stream 1";
    assert_protocol_line(&ng, "u", &bad.addr(), detail);
}

/// DATA after END_STREAM that comes once the round was judged, while the
/// connection is kept: the round passed (the answer was complete and
/// SERVING), the late frame is a connection error on the idle connection,
/// which ends the reuse quietly. The peer stays up and every round
/// connects anew.
#[test]
fn data_after_end_stream_on_an_idle_kept_connection_only_ends_the_reuse() {
    let late = H2Server::start(Behaviour::DataAfterEnd {
        delay: Some(Duration::from_millis(20)),
    });
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream(
        "u",
        &late.addr(),
        &good.addr(),
        "interval=300 rise=1 fall=1 reuse=on",
        "",
    ));
    let s = poll_status_json(port, WAIT, "6 rounds of each", |s| {
        s.checks(Kind::Http, "u", &late.addr()) >= 6 && s.checks(Kind::Http, "u", &good.addr()) >= 6
    });
    assert!(s.is_up(Kind::Http, "u", &late.addr()), "{s}");
    assert_eq!(s.reason(Kind::Http, "u", &late.addr()), None, "{s}");
    assert!(ng.log_lines("is down").is_empty(), "{}", ng.log());
    let per = late.requests_per_connection();
    assert!(per.len() >= 5, "one connection per round: {per:?}");
    assert!(
        per.iter().all(|&n| n <= 1),
        "a connection was reused: {per:?}"
    );
    assert_eq!(
        good.connections(),
        1,
        "{:?}",
        good.requests_per_connection()
    );
}

#[test]
fn a_goaway_refusing_our_stream_on_a_new_connection_is_protocol() {
    let bad = H2Server::start(Behaviour::GoAwayOnHeaders);
    let good = GrpcServer::start(Health::Served);
    let (ng, port) = start(&upstream("u", &bad.addr(), &good.addr(), BASIC, ""));
    assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "protocol");
    assert_protocol_line(&ng, "u", &bad.addr(), "stream refused (GOAWAY)");
    // A new connection's refused stream is a failure, not a reconnect:
    // one connection per round.
    let per = bad.requests_per_connection();
    assert!(per.iter().all(|&n| n <= 1), "{per:?}");
}

#[test]
fn rst_stream_for_our_stream_is_protocol() {
    let bad = H2Server::start(Behaviour::Reset(code::INTERNAL_ERROR));
    let good = GrpcServer::start(Health::Served);
    let (ng, port) = start(&upstream("u", &bad.addr(), &good.addr(), BASIC, ""));
    assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "protocol");
    assert_protocol_line(&ng, "u", &bad.addr(), "stream reset (INTERNAL_ERROR)");
}

#[test]
fn a_response_without_grpc_status_is_invalid() {
    let bad = H2Server::start(Behaviour::NoGrpcStatus);
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream("u", &bad.addr(), &good.addr(), BASIC, ""));
    let s = assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "invalid");
    let row = s.row(Kind::Http, "u", &bad.addr());
    assert_eq!(row["http_status"], 200, "{s}");
    assert!(row["grpc_status"].is_null(), "{s}");
    assert_down_line(&ng, "u", &bad.addr(), "no grpc-status");
}

#[test]
fn an_http_200_html_answer_is_invalid_and_the_log_names_its_content_type() {
    let bad = H2Server::start(Behaviour::Html);
    let good = H2Server::start(Behaviour::Serving);
    let (ng, port) = start(&upstream("u", &bad.addr(), &good.addr(), BASIC, ""));
    let s = assert_hostile_down(&ng, port, "u", &bad.addr(), &good.addr(), "invalid");
    assert_eq!(s.row(Kind::Http, "u", &bad.addr())["http_status"], 200);
    assert_down_line(
        &ng,
        "u",
        &bad.addr(),
        "no grpc-status (content-type text/html)",
    );
}

/// The worker's resident memory, in KiB (`VmRSS` of /proc/PID/status).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The worker's descriptors at rest: the least of 5 [`resting_fds`] (40
/// counts over a second). A silent peer's round holds a socket 80 ms of
/// every 100, so a few counts are not enough to see none in flight.
fn floor_fds(pid: u32) -> usize {
    (0..5).map(|_| resting_fds(pid)).min().unwrap_or(0)
}

/// Every hostile behaviour at once, one peer each at interval=100 (about
/// 140 hostile rounds a second): after 100 rounds of warm-up, 1000 more
/// leave the worker's resident memory within 256 KiB and its resting
/// descriptors within 2 of where they were.
#[test]
fn worker_rss_and_fds_stay_flat_over_1000_hostile_rounds() {
    let cases: Vec<(&str, Behaviour, &str, &str)> = vec![
        ("silent", Behaviour::Silent, "", "protocol"),
        (
            "block",
            Behaviour::HeaderFlood {
                total: 6000,
                fragment: 1000,
            },
            "check_buffer_size 4k;",
            "protocol",
        ),
        (
            "conts",
            Behaviour::HeaderFlood {
                total: 6000,
                fragment: 10,
            },
            "check_buffer_size 4k;",
            "protocol",
        ),
        (
            "bomb",
            Behaviour::HpackBomb {
                entry: 3000,
                refs: 64,
            },
            "",
            "protocol",
        ),
        ("tsu", Behaviour::TableSizeUpdate(8192), "", "protocol"),
        ("big", Behaviour::OversizedFrame(20_000), "", "protocol"),
        ("sflood", Behaviour::SettingsFlood(300), "", "protocol"),
        ("pflood", Behaviour::PingFlood(300), "", "protocol"),
        ("zwin", Behaviour::ZeroWindow, "", "timeout"),
        (
            "late",
            Behaviour::DataAfterEnd { delay: None },
            "",
            "protocol",
        ),
        ("goaway", Behaviour::GoAwayOnHeaders, "", "protocol"),
        ("rst", Behaviour::Reset(code::CANCEL), "", "protocol"),
        ("nogs", Behaviour::NoGrpcStatus, "", "invalid"),
        ("html", Behaviour::Html, "", "invalid"),
    ];
    let good = H2Server::start(Behaviour::Serving);
    let servers: Vec<H2Server> = cases
        .iter()
        .map(|(_, b, _, _)| H2Server::start(b.clone()))
        .collect();
    let mut conf = String::new();
    for ((name, _, extra, _), srv) in cases.iter().zip(&servers) {
        let rise = if *name == "zwin" {
            "rise=2 reuse=on"
        } else {
            "rise=1"
        };
        conf += &format!(
            "    upstream {name} {{ server {}; server {};
        check type=grpc interval=100 timeout=80 fall=1 {rise}; {extra} }}\n",
            srv.addr(),
            good.addr()
        );
    }
    let (ng, port) = start(&conf);
    let rounds = |s: &Status| -> i64 {
        cases
            .iter()
            .zip(&servers)
            .map(|((name, ..), srv)| s.checks(Kind::Http, name, &srv.addr()))
            .sum()
    };
    let s = poll_status_json(port, WAIT, "100 hostile rounds", |s| rounds(s) >= 100);
    let pid = ng.workers()[0];
    let (rss0, fds0) = (rss_kib(pid), floor_fds(pid));
    let start_rounds = rounds(&s);
    let s = poll_status_json(port, LONG, "1000 more hostile rounds", |s| {
        rounds(s) >= start_rounds + 1000
    });
    let (rss1, fds1) = (rss_kib(pid), floor_fds(pid));
    eprintln!(
        "worker {pid}: {rss0} KiB, {fds0} fds after {start_rounds} hostile rounds; \
         {rss1} KiB, {fds1} fds after {}",
        rounds(&s)
    );
    assert_eq!(ng.workers(), vec![pid], "the worker changed (crashed?)");
    assert!(
        rss1 <= rss0 + 256,
        "worker {pid}: {rss0} KiB resident after the warm-up, {rss1} KiB 1000 rounds later"
    );
    assert!(
        fds1 <= fds0 + 2,
        "worker {pid}: {fds0} resting fds after the warm-up, {fds1} 1000 rounds later"
    );
    for ((name, _, _, reason), srv) in cases.iter().zip(&servers) {
        assert!(s.is_down(Kind::Http, name, &srv.addr()), "{name}: {s}");
        assert_eq!(
            s.reason(Kind::Http, name, &srv.addr()),
            Some(*reason),
            "{name}: {s}"
        );
        assert!(s.is_up(Kind::Http, name, &good.addr()), "{name}: {s}");
    }
    let downs = ng.log_lines(&format!("peer {} is down", good.addr()));
    assert!(downs.is_empty(), "the healthy peer went down: {downs:?}");
}
