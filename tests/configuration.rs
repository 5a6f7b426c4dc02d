//! Every environment variable the code reads is listed in `docs/configuration.md`, and the
//! page lists none that nothing reads: the source files (`.rs`, `.sh`, `.py`, `.cu`, `.cuh`,
//! and the CI scripts) under `src/`, `crates/`, `tests/`, `python/`, `examples/` and `.ci/`
//! are scanned for the prefix's names.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The variables' prefix (written so that this file names no variable itself).
const PREFIX: &str = concat!("SEMICRF", "_");

/// The names of the prefix's variables in `text`.
fn names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(PREFIX) {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest: String = text[i + PREFIX.len()..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        let rest = rest.trim_end_matches('_');
        if !rest.is_empty() {
            out.insert(format!("{PREFIX}{rest}"));
        }
    }
    out
}

/// The files to scan under `dir`: sources and scripts, not build outputs.
fn sources(dir: &Path, ci: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                sources(&p, ci, out);
            }
            continue;
        }
        let ext = p.extension().map(|e| e.to_string_lossy().into_owned());
        let code = matches!(ext.as_deref(), Some("rs" | "sh" | "py" | "cu" | "cuh"));
        // The CI scripts have no extension.
        if code || (ci && ext.is_none()) {
            out.push(p);
        }
    }
}

#[test]
fn every_variable_the_code_reads_is_documented_and_every_documented_one_is_read() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for d in ["src", "crates", "tests", "python", "examples"] {
        sources(&root.join(d), false, &mut files);
    }
    sources(&root.join(".ci"), true, &mut files);
    assert!(files.len() > 50, "only {} files found", files.len());
    let mut read = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for n in names(&text) {
            read.insert((n, f.strip_prefix(root).unwrap().display().to_string()));
        }
    }
    let page = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    let listed = names(&page);
    let missing: Vec<String> = read
        .iter()
        .filter(|(n, _)| !listed.contains(n))
        .map(|(n, f)| format!("{n} (in {f})"))
        .collect();
    assert!(
        missing.is_empty(),
        "read by the code but not listed in docs/configuration.md:\n{}",
        missing.join("\n")
    );
    let read_names: BTreeSet<&String> = read.iter().map(|(n, _)| n).collect();
    let unread: Vec<&String> = listed.iter().filter(|n| !read_names.contains(n)).collect();
    assert!(
        unread.is_empty(),
        "listed in docs/configuration.md but read nowhere: {unread:?}"
    );
}

#[test]
fn the_scan_finds_names_and_nothing_else() {
    let text = format!(
        "a {p}ONE=1, `{p}TWO_2` {p} X{p}NOT {p}_ {p}three",
        p = PREFIX
    );
    let want: BTreeSet<String> = [format!("{PREFIX}ONE"), format!("{PREFIX}TWO_2")].into();
    assert_eq!(names(&text), want);
}
