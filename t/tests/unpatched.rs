//! The module refuses to run in an nginx built without the patch: a check
//! that can never affect balancing must not look as if it worked.
//!
//! Needs the unpatched nginx of the same version as the module
//! (`NGINX_STOCK=1 scripts/build`; scripts/test builds it and sets
//! `NGINX_STOCK_BIN`).

use std::path::PathBuf;
use std::process::Command;

use healthcheck_t::paths::{module_path, workspace_root};

fn stock_bin() -> PathBuf {
    let path = std::env::var_os("NGINX_STOCK_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("build/nginx-stock-1.28.3/sbin/nginx"));
    assert!(
        path.is_file(),
        "unpatched nginx not found at {}: run NGINX_STOCK=1 scripts/build (or set NGINX_STOCK_BIN)",
        path.display()
    );
    path
}

fn run_t(bin: &PathBuf, body: &str) -> (i32, String) {
    let dir = std::env::temp_dir().join(format!("nginx-hc-unpatched-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "load_module {};\nerror_log logs/error.log;\nevents {{}}\n{body}\n",
            module_path().display()
        ),
    )
    .unwrap();
    let out = Command::new(bin)
        .arg("-t")
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("run nginx -t");
    let _ = std::fs::remove_dir_all(&dir);
    let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn module_in_unpatched_nginx_fails_loudly_naming_the_patch() {
    let bin = stock_bin();
    for body in [
        "http { upstream u { server 127.0.0.1:1; check type=tcp; } }",
        "stream { upstream u { server 127.0.0.1:1; check type=tcp; } }",
    ] {
        let (code, out) = run_t(&bin, body);
        assert_eq!(code, 1, "nginx -t must fail:\n{out}");
        assert!(
            out.contains("[emerg]")
                && out.contains("requires nginx built with the nginx-healthcheck patch"),
            "no clear [emerg] naming the patch:\n{out}"
        );
    }
}

#[test]
fn stock_nginx_without_the_module_is_unaffected() {
    // Sanity check of the baseline itself: the same configuration without
    // the module's directives passes.
    let bin = stock_bin();
    let dir = std::env::temp_dir().join(format!("nginx-hc-stock-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        "error_log logs/error.log;\nevents {}\nhttp { upstream u { server 127.0.0.1:1; } }\n",
    )
    .unwrap();
    let out = Command::new(&bin)
        .args(["-t", "-p"])
        .arg(&dir)
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
