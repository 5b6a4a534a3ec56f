//! Build script of the cdylib.
//!
//! 1. Forwards what nginx-sys learned from the configured nginx tree
//!    (`DEP_NGINX_*`, visible because nginx-sys is a direct dependency) as
//!    cfgs and env vars: `ngx_feature`, `ngx_os`, `ngx_version_number`,
//!    `NGX_VERSION`, `NGX_VERSION_NUMBER`.
//! 2. Refuses an nginx tree without the health check patch (`patches/`):
//!    the module would build but could never mark a peer down.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// (header, marker macro) pairs the patch adds.
const MARKERS: &[(&str, &str)] = &[
    (
        "ngx_http_upstream_round_robin.h",
        "NGX_HTTP_UPSTREAM_CHECK_HOOK",
    ),
    (
        "ngx_stream_upstream_round_robin.h",
        "NGX_STREAM_UPSTREAM_CHECK_HOOK",
    ),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    forward_nginx_config();
    require_patched_tree();
}

fn dep(name: &str) -> Option<String> {
    println!("cargo::rerun-if-env-changed={name}");
    env::var(name).ok().filter(|v| !v.is_empty())
}

fn forward_nginx_config() {
    let check = dep("DEP_NGINX_FEATURES_CHECK").unwrap_or_else(|| "any()".into());
    println!("cargo::rustc-check-cfg=cfg(ngx_feature, values({check}))");
    if let Some(features) = dep("DEP_NGINX_FEATURES") {
        for feature in features.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            println!("cargo::rustc-cfg=ngx_feature=\"{feature}\"");
        }
    }

    let check = dep("DEP_NGINX_OS_CHECK").unwrap_or_else(|| "any()".into());
    println!("cargo::rustc-check-cfg=cfg(ngx_os, values({check}))");
    if let Some(os) = dep("DEP_NGINX_OS") {
        println!("cargo::rustc-cfg=ngx_os=\"{os}\"");
    }

    // e.g. 1028003 for 1.28.3: cfg(ngx_version_number = "1028003") and
    // env!("NGX_VERSION_NUMBER"); NGX_VERSION is the dotted string.
    println!("cargo::rustc-check-cfg=cfg(ngx_version_number, values(any()))");
    if let Some(number) = dep("DEP_NGINX_VERSION_NUMBER") {
        println!("cargo::rustc-cfg=ngx_version_number=\"{number}\"");
        println!("cargo::rustc-env=NGX_VERSION_NUMBER={number}");
    }
    if let Some(version) = nginx_version() {
        println!("cargo::rustc-env=NGX_VERSION={version}");
    }
}

/// "1.28.3" (nginx-sys reports NGINX_VER, "nginx/1.28.3").
fn nginx_version() -> Option<String> {
    let ver = dep("DEP_NGINX_VERSION")?;
    Some(ver.rsplit('/').next().unwrap_or(&ver).to_string())
}

fn require_patched_tree() {
    let includes: Vec<PathBuf> = dep("DEP_NGINX_INCLUDE")
        .map(|v| env::split_paths(&v).collect())
        .unwrap_or_default();
    let mut tree = dep("DEP_NGINX_BUILD_DIR").map(|d| {
        Path::new(&d)
            .parent()
            .unwrap_or(Path::new(&d))
            .to_path_buf()
    });

    let mut patched = !includes.is_empty();
    for (header, marker) in MARKERS {
        let Some(path) = includes
            .iter()
            .map(|d| d.join(header))
            .find(|p| p.is_file())
        else {
            patched = false;
            continue;
        };
        println!("cargo::rerun-if-changed={}", path.display());
        // <tree>/src/http/ngx_http_upstream_round_robin.h -> <tree>
        if let Some(t) = path.ancestors().nth(3) {
            tree.get_or_insert_with(|| t.to_path_buf());
        }
        let text = fs::read_to_string(&path).unwrap_or_default();
        patched &= text.lines().any(|line| {
            let mut words = line.split_whitespace();
            words.next() == Some("#define") && words.next() == Some(*marker)
        });
    }

    if !patched {
        let tree = tree.map_or_else(|| "?".into(), |t| t.display().to_string());
        let version = nginx_version().unwrap_or_else(|| "<version>".into());
        let minor = version
            .rsplit_once('.')
            .map_or(version.as_str(), |(m, _)| m);
        panic!(
            "nginx tree at {tree} is not patched: run scripts/build \
             (or apply patches/nginx-{minor}.patch and re-run configure)"
        );
    }
}
