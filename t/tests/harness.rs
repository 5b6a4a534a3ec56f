//! Self-tests of the nginx side of the harness, on a plain configuration
//! without the module (they need only the nginx binary).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use healthcheck_t::{free_port, http_get, process, stream_roundtrip, Backend, Nginx};

fn plain(port: u16, text: &str) -> String {
    format!(
        "http {{
    access_log off;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 \"{text}\"; }}
    }}
}}"
    )
}

#[test]
fn start_reload_quit() {
    let port = free_port();
    let mut ng = Nginx::builder()
        .without_module()
        .workers(2)
        .start(&plain(port, "one"));
    assert!(ng.prefix().join("nginx.conf").is_file());
    assert_eq!(http_get(port, "/").unwrap().text(), "one");
    let old = ng.workers();
    assert_eq!(old.len(), 2);
    assert!(ng.worker_fd_counts().iter().all(|&n| n > 0));

    let new = ng.reload_with(&plain(port, "two"));
    assert_eq!(new.len(), 2);
    assert!(new.iter().all(|p| !old.contains(p)));
    ng.wait_workers_gone(&old, Duration::from_secs(10));
    assert_eq!(http_get(port, "/").unwrap().text(), "two");
    assert!(ng.log_contains("signal 1 (SIGHUP) received"));

    let prefix = ng.prefix().to_path_buf();
    ng.quit();
    assert!(!ng.is_running());
    drop(ng);
    assert!(!prefix.exists(), "prefix of a passing test is removed");
}

#[test]
fn rejected_reload_keeps_old_workers() {
    let port = free_port();
    let mut ng = Nginx::builder().without_module().start(&plain(port, "one"));
    let line = ng.reload_expect_failure(
        "http { bogus_directive; }",
        "unknown directive \"bogus_directive\"",
    );
    assert!(line.contains("[emerg]"));
    assert_eq!(http_get(port, "/").unwrap().text(), "one");
}

#[test]
fn log_check_catches_unexpected_alert() {
    let port = free_port();
    let ng = Nginx::builder().without_module().start(&plain(port, "x"));
    let prefix = ng.prefix().to_path_buf();
    let worker = ng.workers()[0];
    let mark = ng.log_mark();
    process::signal(worker, libc::SIGKILL).unwrap();
    ng.wait_for_log_since(mark, "exited on signal 9", Duration::from_secs(10));
    let err =
        catch_unwind(AssertUnwindSafe(move || drop(ng))).expect_err("drop must fail the test");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("unexpected lines in error.log"), "{msg}");
    assert!(prefix.exists(), "prefix of a failing test is kept");
    std::fs::remove_dir_all(prefix).unwrap();
}

#[test]
fn allowed_alert_passes() {
    let port = free_port();
    let ng = Nginx::builder().without_module().start(&plain(port, "x"));
    ng.allow_log("exited on signal 9");
    let worker = ng.workers()[0];
    process::signal(worker, libc::SIGKILL).unwrap();
    ng.wait_for_log("exited on signal 9", Duration::from_secs(10));
    // The master respawns the worker.
    healthcheck_t::wait_until(Duration::from_secs(10), "respawned worker", || {
        ng.workers().iter().any(|&p| p != worker)
    });
    assert_eq!(http_get(port, "/").unwrap().text(), "x");
}

#[test]
fn nginx_t_reports_errors() {
    let (code, out) = Nginx::builder()
        .without_module()
        .test_config("http { bogus_directive; }");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("[emerg]") && out.contains("unknown directive \"bogus_directive\""),
        "{out}"
    );
    let (code, out) = Nginx::builder()
        .without_module()
        .test_config(&plain(free_port(), "x"));
    assert_eq!(code, 0, "{out}");
}

#[test]
fn stream_proxy_reaches_raw_backend() {
    let b = Backend::start();
    let port = free_port();
    let _ng = Nginx::builder().without_module().start(&format!(
        "stream {{ server {{ listen 127.0.0.1:{port}; proxy_pass {}; }} }}",
        b.addr()
    ));
    assert_eq!(
        stream_roundtrip(port, b"ping\n").unwrap(),
        b.port().to_string().as_bytes()
    );
    assert_eq!(b.requests(), 1);
}

#[test]
fn single_process_mode() {
    let port = free_port();
    let mut ng = Nginx::builder()
        .without_module()
        .master_process(false)
        .start(&plain(port, "solo"));
    assert_eq!(http_get(port, "/").unwrap().text(), "solo");
    assert!(ng.workers().is_empty());
    assert!(process::is_alive(ng.pid()));
    ng.quit();
}
