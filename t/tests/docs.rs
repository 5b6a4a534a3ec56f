//! The docs say what the code does (docs/directives.md): every directive the
//! module registers has an nginx.org block (Syntax, Default, Context) in
//! docs/directives.md, and each it registers only to refuse (with what to
//! write instead) is named in docs/migrating.md; README.md starts with the two set-up commands the
//! project's scripts implement and stays the front door (at most 300
//! lines); no source file of the module or of core grows past 800 lines.

use std::fs;
use std::path::Path;

use healthcheck_t::paths::workspace_root;

fn read(rel: &str) -> String {
    fs::read_to_string(workspace_root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The names in the module's directive list (src/lib.rs: `ngx_string!("...")`),
/// split into those that do something and those registered only to be
/// refused with what to write instead (`refused(ngx_string!("..."), ...)`).
fn registered() -> (Vec<String>, Vec<String>) {
    let lib = read("src/lib.rs");
    let (mut working, mut refused) = (Vec::new(), Vec::new());
    let mut rest = lib.as_str();
    while let Some(at) = rest.find("ngx_string!(\"") {
        let is_refusal = rest[..at].ends_with("refused(");
        rest = &rest[at + "ngx_string!(\"".len()..];
        let end = rest.find('"').expect("a closing quote");
        let name = rest[..end].to_string();
        if is_refusal {
            &mut refused
        } else {
            &mut working
        }
        .push(name);
        rest = &rest[end..];
    }
    working.sort();
    working.dedup();
    refused.sort();
    refused.dedup();
    refused.retain(|n| !working.contains(n));
    (working, refused)
}

#[test]
fn every_refused_directive_is_in_the_migration_guide() {
    let (_, refused) = registered();
    assert!(
        refused.len() >= 5,
        "the scan found too few refusals: {refused:?}"
    );
    let guide = read("docs/migrating.md");
    let missing: Vec<&String> = refused
        .iter()
        .filter(|n| !guide.contains(&format!("`{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/migrating.md does not name {missing:?}"
    );
}

#[test]
fn every_registered_directive_has_an_nginx_org_block() {
    let (names, _) = registered();
    assert!(
        names.len() >= 24,
        "the scan found too few directives: {names:?}"
    );
    let doc = read("docs/directives.md");
    let mut missing = Vec::new();
    for name in &names {
        let heading = format!("\n### {name}\n");
        let Some(at) = doc.find(&heading) else {
            missing.push(format!("{name}: no \"### {name}\" section"));
            continue;
        };
        let section = &doc[at + heading.len()..];
        let section = &section[..section.find("\n### ").unwrap_or(section.len())];
        let lines: Vec<&str> = section.lines().map(str::trim).collect();
        let syntax = lines
            .iter()
            .find(|l| l.starts_with("Syntax:"))
            .copied()
            .unwrap_or("");
        if !syntax.contains(name.as_str()) {
            missing.push(format!("{name}: no \"Syntax: {name} ...\" line"));
        }
        for field in ["Default:", "Context:"] {
            if !lines.iter().any(|l| l.starts_with(field)) {
                missing.push(format!("{name}: no \"{field}\" line"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/directives.md:\n{}",
        missing.join("\n")
    );
}

#[test]
fn readme_starts_with_the_two_setup_commands() {
    let readme = read("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    assert!(
        lines.len() <= 300,
        "README.md has {} lines; the reference belongs in docs/",
        lines.len()
    );
    // The first block of indented lines after the title: the commands.
    let commands: Vec<&str> = lines
        .iter()
        .skip_while(|l| !l.starts_with("    "))
        .take_while(|l| l.starts_with("    ") || l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| !w.starts_with('#'))
        .collect();
    assert_eq!(
        commands,
        ["scripts/demo", "scripts/test"],
        "README.md must open with exactly the two set-up commands"
    );
    for c in commands {
        let p = workspace_root().join(c);
        let mode = fs::metadata(&p)
            .unwrap_or_else(|e| panic!("{c}: {e}"))
            .permissions();
        use std::os::unix::fs::PermissionsExt;
        assert!(mode.mode() & 0o111 != 0, "{c} is not executable");
    }
    // What .ci/run runs is README's test command.
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim() == "exec scripts/test"),
        ".ci/run must run scripts/test"
    );
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in fs::read_dir(dir).expect("a source directory").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().and_then(|x| x.to_str()) == Some("rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_source_file_passes_800_lines() {
    let root = workspace_root();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("core/src"), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let n = fs::read_to_string(p).ok()?.lines().count();
            (n > 800).then(|| {
                format!(
                    "{} ({n} lines)",
                    p.strip_prefix(&root).unwrap_or(p).display()
                )
            })
        })
        .collect();
    assert!(long.is_empty(), "split these files: {long:?}");
}
