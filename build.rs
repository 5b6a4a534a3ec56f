//! Build script of the cdylib.
//!
//! 1. Forwards what nginx-sys learned from the configured nginx tree
//!    (`DEP_NGINX_*`, visible because nginx-sys is a direct dependency) as
//!    cfgs and env vars: `ngx_feature`, `ngx_os`, `NGX_VERSION`,
//!    `NGX_VERSION_NUMBER`, and `ngx_version_at_least` for the versions in
//!    [`VERSION_GATES`].
//! 2. Refuses an nginx tree without the health check patch (`patches/`):
//!    the module would build but could never mark a peer down.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// nginx versions the code tests for, oldest first: the cfg
/// `ngx_version_at_least = "<v>"` holds when the tree is that version or
/// later. 1.23.0 added `next` to `ngx_table_elt_t` (headers of one name
/// chained; `src/status.rs` sets it). 1.27.3 added re-resolving servers at
/// run time, and with it `peers->config` and `peer->refs` (used by
/// `src/vnswrr.rs`).
const VERSION_GATES: &[&str] = &["1.23.0", "1.27.3"];

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

    // cfg(ngx_version_at_least = "1.27.3") for every version in
    // VERSION_GATES that the tree's version reaches; env!("NGX_VERSION_NUMBER")
    // (e.g. 1028003 for 1.28.3) and env!("NGX_VERSION") (the dotted string).
    let gates: Vec<String> = VERSION_GATES.iter().map(|v| format!("\"{v}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(ngx_version_at_least, values({}))",
        gates.join(", ")
    );
    let number = dep("DEP_NGINX_VERSION_NUMBER")
        .expect("nginx-sys did not report the nginx version (DEP_NGINX_VERSION_NUMBER)");
    let n: u64 = number
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("DEP_NGINX_VERSION_NUMBER={number:?} is not a number"));
    for gate in VERSION_GATES {
        if n >= version_number(gate) {
            println!("cargo::rustc-cfg=ngx_version_at_least=\"{gate}\"");
        }
    }
    println!("cargo::rustc-env=NGX_VERSION_NUMBER={n}");
    if let Some(version) = nginx_version() {
        println!("cargo::rustc-env=NGX_VERSION={version}");
    }
}

/// nginx's `nginx_version` number of a dotted version: 1.27.3 -> 1027003.
fn version_number(dotted: &str) -> u64 {
    let mut parts = dotted
        .split('.')
        .map(|p| p.parse::<u64>().expect("a dotted version"));
    let mut part = || parts.next().unwrap_or(0);
    part() * 1_000_000 + part() * 1_000 + part()
}

/// "1.28.3" (nginx-sys reports NGINX_VER, "nginx/1.28.3").
fn nginx_version() -> Option<String> {
    let ver = dep("DEP_NGINX_VERSION")?;
    Some(ver.rsplit('/').next().unwrap_or(&ver).to_string())
}

fn require_patched_tree() {
    // `scripts/build --like` builds from the pristine sources of an
    // installed nginx on purpose: that nginx has no patch, and the module
    // needs none at build time (it finds the hooks at run time).
    if dep("HC_UNPATCHED_TREE").as_deref() == Some("1") {
        return;
    }
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
