//! Where the binaries under test are.
//!
//! `NGINX_BIN` and `NGINX_MODULE` override the defaults
//! `<workspace>/build/nginx/sbin/nginx` and
//! `<workspace>/build/nginx/modules/ngx_healthcheck_module.so`, which
//! `scripts/build` produces.

use std::path::{Path, PathBuf};

/// Environment variable naming the nginx binary.
pub const NGINX_BIN_ENV: &str = "NGINX_BIN";
/// Environment variable naming the module's `.so`.
pub const NGINX_MODULE_ENV: &str = "NGINX_MODULE";

/// The cargo workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("t/ has a parent")
        .to_path_buf()
}

fn locate(env: &str, default: &str, what: &str) -> PathBuf {
    let path = match std::env::var_os(env) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => workspace_root().join(default),
    };
    let path = if path.is_relative() {
        std::env::current_dir().expect("current dir").join(path)
    } else {
        path
    };
    assert!(
        path.is_file(),
        "{what} not found at {} (set {env} to override): run scripts/build first",
        path.display()
    );
    path
}

/// The nginx binary to test.
pub fn nginx_bin() -> PathBuf {
    locate(NGINX_BIN_ENV, "build/nginx/sbin/nginx", "nginx binary")
}

/// The module to load, as an absolute path.
pub fn module_path() -> PathBuf {
    locate(
        NGINX_MODULE_ENV,
        "build/nginx/modules/ngx_healthcheck_module.so",
        "healthcheck module",
    )
}

/// Environment variable naming an unpatched nginx of the module's version
/// (`NGINX_STOCK=1 scripts/build`).
pub const NGINX_STOCK_BIN_ENV: &str = "NGINX_STOCK_BIN";

/// The unpatched nginx (stock mode).
pub fn stock_nginx_bin() -> PathBuf {
    locate(
        NGINX_STOCK_BIN_ENV,
        "build/nginx-stock-1.28.3/sbin/nginx",
        "unpatched nginx (NGINX_STOCK=1 scripts/build)",
    )
}
