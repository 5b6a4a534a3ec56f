//! The module graph of src/ (docs/design.md, Module layers): no import
//! cycle between the files of the cdylib, and the graph docs/design.md shows
//! is the one the code has.
//!
//! An edge `a -> b` is any path in file `a` that names an item of file `b`:
//! `crate::...` (in `use` lines and inline), `super::...` and `self::...`,
//! grouped imports included. The `ngx_module_t` statics live with the
//! command tables in lib.rs, the top of the graph; every other file reaches
//! them through `modules.rs`, the one module every layer may use. So:
//!
//! - only `modules.rs` names lib.rs;
//! - the graph without `modules.rs` and lib.rs has no cycle;
//! - docs/design.md holds the graph, file by file, between the markers
//!   `<!-- module graph -->` and `<!-- end module graph -->`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use healthcheck_t::paths::workspace_root;

/// Module path ("check::conn", "crate" for lib.rs) -> file, relative to src/.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).expect("src/ is readable") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().and_then(|x| x.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(src).expect("under src/").to_path_buf();
            let mut parts: Vec<String> = rel
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            let last = parts.pop().unwrap_or_default();
            let stem = last.trim_end_matches(".rs");
            if stem != "mod" && stem != "lib" {
                parts.push(stem.to_string());
            }
            let name = if parts.is_empty() {
                "crate".to_string()
            } else {
                parts.join("::")
            };
            out.insert(name, rel);
        }
    }
    out
}

/// The text without comments (line comments, doc comments, block comments)
/// and without string literals' contents, so that prose naming a path is
/// not an edge.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // a char literal such as '"'
            i += 3;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn ident_at(s: &[u8], mut i: usize) -> (String, usize) {
    let start = i;
    while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
        i += 1;
    }
    (String::from_utf8_lossy(&s[start..i]).into_owned(), i)
}

/// The paths named after `root::` at `i` (the text after `::`): one path,
/// or each item of a `{...}` group, as segment lists.
fn paths_after(s: &[u8], i: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    if s.get(i) == Some(&b'{') {
        // Split the group at depth 1.
        let mut depth = 0;
        let mut j = i;
        let mut item_start = i + 1;
        while j < s.len() {
            match s[j] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.extend(group_item(s, item_start, j));
                        break;
                    }
                }
                b',' if depth == 1 => {
                    out.extend(group_item(s, item_start, j));
                    item_start = j + 1;
                }
                _ => {}
            }
            j += 1;
        }
        return out;
    }
    let mut segs = Vec::new();
    let mut j = i;
    loop {
        let (id, end) = ident_at(s, j);
        if id.is_empty() {
            break;
        }
        segs.push(id);
        if s.get(end) == Some(&b':') && s.get(end + 1) == Some(&b':') {
            if s.get(end + 2) == Some(&b'{') {
                for rest in paths_after(s, end + 2) {
                    let mut p = segs.clone();
                    p.extend(rest);
                    out.push(p);
                }
                return out;
            }
            j = end + 2;
        } else {
            break;
        }
    }
    if !segs.is_empty() {
        out.push(segs);
    }
    out
}

fn group_item(s: &[u8], start: usize, end: usize) -> Vec<Vec<String>> {
    let mut k = start;
    while k < end && s[k].is_ascii_whitespace() {
        k += 1;
    }
    if k >= end {
        return Vec::new();
    }
    paths_after(&s[..end], k)
}

/// Every module `file` (module path `me`) names.
fn edges_of(me: &str, text: &str, mods: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let code = code_only(text);
    let s = code.as_bytes();
    let is_mod_rs = mods
        .get(me)
        .is_some_and(|p| p.file_name().and_then(|f| f.to_str()) == Some("mod.rs"));
    let parent: Vec<String> = {
        let mut v: Vec<String> = if me == "crate" {
            Vec::new()
        } else {
            me.split("::").map(str::to_string).collect()
        };
        v.pop();
        v
    };
    let own: Vec<String> = if me == "crate" {
        Vec::new()
    } else {
        me.split("::").map(str::to_string).collect()
    };
    let mut out = BTreeSet::new();
    // Child modules declared here (`mod conn;`) are named by bare paths
    // too (`conn::Conn`, `use conn::Conn`).
    let children: Vec<String> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect();
    for child in &children {
        let pat = format!("{child}::");
        let mut from = 0;
        while let Some(at) = code[from..].find(&pat) {
            let k = from + at;
            let prev = k.checked_sub(1).map(|j| s[j]);
            let bare = !prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':');
            if bare {
                let mut full = own.clone();
                full.push(child.clone());
                for p in paths_after(s, k + pat.len()) {
                    let mut f = full.clone();
                    f.extend(p);
                    out.insert(resolve(&f, mods));
                }
                if paths_after(s, k + pat.len()).is_empty() {
                    out.insert(resolve(&full, mods));
                }
            }
            from = k + pat.len();
        }
    }
    out.remove(me);
    let mut i = 0;
    while i < s.len() {
        let before_ok = i == 0 || !(s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'_');
        let roots: [(&str, Vec<String>); 3] = [
            ("crate::", Vec::new()),
            ("super::", parent.clone()),
            ("self::", own.clone()),
        ];
        let mut matched = false;
        for (root, base) in roots {
            if before_ok && s[i..].starts_with(root.as_bytes()) {
                // `self::` in a non-mod.rs file names its own children only.
                let _ = is_mod_rs;
                for p in paths_after(s, i + root.len()) {
                    let mut full = base.clone();
                    full.extend(p);
                    let target = resolve(&full, mods);
                    if target != me {
                        out.insert(target);
                    }
                }
                i += root.len();
                matched = true;
                break;
            }
        }
        if !matched {
            i += 1;
        }
    }
    out
}

/// The file a path names: its longest prefix that is a module.
fn resolve(path: &[String], mods: &BTreeMap<String, PathBuf>) -> String {
    for n in (1..=path.len()).rev() {
        let name = path[..n].join("::");
        if mods.contains_key(&name) {
            return name;
        }
    }
    "crate".to_string()
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = workspace_root().join("src");
    let mods = modules(&src);
    mods.iter()
        .map(|(name, rel)| {
            let text = fs::read_to_string(src.join(rel)).expect("a source file");
            (name.clone(), edges_of(name, &text, &mods))
        })
        .collect()
}

/// Strongly connected components with more than one member (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    impl<'a> T<'a> {
        fn visit(&mut self, v: &'a str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on.insert(v);
            let g = self.g;
            for w in g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !g.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// The graph without the statics module and lib.rs.
fn layered(g: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    g.iter()
        .filter(|(k, _)| *k != "modules" && *k != "crate")
        .map(|(k, v)| {
            let v = v
                .iter()
                .filter(|t| *t != "modules" && *t != "crate")
                .cloned()
                .collect();
            (k.clone(), v)
        })
        .collect()
}

/// Each file's layer: 0 for a file that names no other, else one more
/// than the highest layer it names (the graph has no cycle).
fn layers(g: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, usize> {
    let mut level: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..=g.len() {
        let mut moved = false;
        for (k, deps) in g {
            let l = deps
                .iter()
                .filter(|d| g.contains_key(*d))
                .map(|d| level.get(d).copied().unwrap_or(0) + 1)
                .max()
                .unwrap_or(0);
            if level.get(k) != Some(&l) {
                level.insert(k.clone(), l);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    level
}

/// The graph as docs/design.md shows it: one line per file, by layer.
fn render(g: &BTreeMap<String, BTreeSet<String>>) -> String {
    let level = layers(g);
    let top = level.values().copied().max().unwrap_or(0);
    let mut out = String::new();
    for l in 0..=top {
        out.push_str(&format!("layer {l}\n"));
        for (k, _) in level.iter().filter(|(_, v)| **v == l) {
            let deps: Vec<&str> = g[k].iter().map(String::as_str).collect();
            if deps.is_empty() {
                out.push_str(&format!("  {k}\n"));
            } else {
                out.push_str(&format!("  {k} -> {}\n", deps.join(", ")));
            }
        }
    }
    out
}

#[test]
fn only_the_statics_module_names_lib_rs() {
    let g = graph();
    let offenders: Vec<&String> = g
        .iter()
        .filter(|(k, v)| *k != "modules" && *k != "crate" && v.contains("crate"))
        .map(|(k, _)| k)
        .collect();
    assert!(
        offenders.is_empty(),
        "these files name lib.rs's items directly (reach the module statics through \
         src/modules.rs): {offenders:?}"
    );
}

#[test]
fn src_has_no_import_cycle() {
    let g = layered(&graph());
    let c = cycles(&g);
    assert!(
        c.is_empty(),
        "import cycles in src/ (docs/design.md, Module layers):\n{}",
        c.iter()
            .map(|c| format!("  {}", c.join(", ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn design_md_shows_the_module_graph() {
    let g = layered(&graph());
    let want = render(&g);
    let doc = workspace_root().join("docs/design.md");
    let text = fs::read_to_string(&doc).unwrap_or_default();
    let shown = text
        .split_once("<!-- module graph -->")
        .and_then(|(_, rest)| rest.split_once("<!-- end module graph -->"))
        .map(|(g, _)| {
            g.trim()
                .trim_start_matches("```text")
                .trim_end_matches("```")
        })
        .map(str::trim)
        .unwrap_or("");
    assert_eq!(
        shown,
        want.trim(),
        "docs/design.md's module graph is not the code's; put this between the markers \
         (in a ```text block):\n{want}"
    );
}

#[test]
fn the_scanner_reads_groups_and_relative_paths() {
    let mut mods = BTreeMap::new();
    for m in ["crate", "a", "b", "check", "check::conn", "check::tcp"] {
        mods.insert(m.to_string(), PathBuf::from(format!("{m}.rs")));
    }
    mods.insert("check".into(), PathBuf::from("check/mod.rs"));
    let text = "use crate::{a::X, b};\n// crate::ignored\nfn f() { super::conn::C; \
                let s = \"crate::no\"; crate::ngx_module; }";
    let e = edges_of("check::tcp", text, &mods);
    assert_eq!(
        e,
        ["a", "b", "check::conn", "crate"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    let e = edges_of("check", "use self::conn::Conn; use super::a;", &mods);
    assert_eq!(
        e,
        ["a", "check::conn"].iter().map(|s| s.to_string()).collect()
    );
}
