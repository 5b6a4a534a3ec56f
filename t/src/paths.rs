//! Where the binaries under test are.
//!
//! `NGINX_BIN` and `NGINX_MODULE` override the defaults
//! `<workspace>/build/nginx/sbin/nginx` and
//! `<workspace>/build/nginx/modules/ngx_healthcheck_module.so`, which
//! `scripts/build` produces.
//!
//! `NGINX_MODE=stock` runs the same tests with the module loaded into the
//! unpatched nginx `NGINX_STOCK_BIN` (default
//! `<workspace>/build/nginx-stock-1.28.3/sbin/nginx`, from
//! `NGINX_STOCK=1 scripts/build`) instead: the patch changes no layout, so
//! the module built against the patched tree of the same version loads
//! there, and the module enforces checks without the hook (docs/stock-mode.md).

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

/// Environment variable choosing the nginx that loads the module:
/// `stock` for [`stock_bin`], anything else (or unset) for `NGINX_BIN`.
pub const NGINX_MODE_ENV: &str = "NGINX_MODE";
/// Environment variable naming the unpatched nginx.
pub const NGINX_STOCK_BIN_ENV: &str = "NGINX_STOCK_BIN";

/// Whether the tests run in stock mode (`NGINX_MODE=stock`).
pub fn stock_mode() -> bool {
    match std::env::var(NGINX_MODE_ENV) {
        Ok(m) if m == "stock" => true,
        Ok(m) if m.is_empty() || m == "patched" => false,
        Ok(m) => panic!("{NGINX_MODE_ENV}={m:?}: use \"stock\" or \"patched\""),
        Err(_) => false,
    }
}

/// The nginx binary to test: `NGINX_BIN`, or in stock mode the unpatched
/// [`stock_bin`].
pub fn nginx_bin() -> PathBuf {
    if stock_mode() {
        return stock_bin();
    }
    patched_bin()
}

/// The patched nginx (`NGINX_BIN`), whatever `NGINX_MODE` says.
pub fn patched_bin() -> PathBuf {
    locate(NGINX_BIN_ENV, "build/nginx/sbin/nginx", "nginx binary")
}

/// The unpatched nginx (`NGINX_STOCK=1 scripts/build`).
pub fn stock_bin() -> PathBuf {
    locate(
        NGINX_STOCK_BIN_ENV,
        "build/nginx-stock-1.28.3/sbin/nginx",
        "unpatched nginx (NGINX_STOCK=1 scripts/build)",
    )
}

/// The module to load, as an absolute path.
pub fn module_path() -> PathBuf {
    locate(
        NGINX_MODULE_ENV,
        "build/nginx/modules/ngx_healthcheck_module.so",
        "healthcheck module",
    )
}
