//! The crate's map kept true: each module uses only the modules above it in the crate docs'
//! table (so no module cycle), no cycle among the files of a module either, and every source
//! file within the size the house allows. Run with `--nocapture` to see the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first (the crate docs' table).
const ORDER: [&str; 15] = [
    "tuning",
    "kernel",
    "device",
    "transfer",
    "call",
    "logdomain",
    "meet",
    "streaming",
    "edge",
    "resident",
    "outputs",
    "engine",
    "kbest",
    "streamed",
    "sample",
];

/// Modules for tests only, which may use any other.
const TEST_ONLY: [&str; 8] = [
    "emu",
    "layering",
    "meet::tests",
    "logdomain::tests",
    "sample::tests",
    "kbest::tests",
    "outputs::tests",
    "resident::tests",
];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// A file's module path (`meet::plan`; `lib.rs` is ``).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .filter(|c| c != "mod" && c != "lib")
        .collect();
    parts.join("::")
}

/// A file's code without comments (line comments; the crate has no block comments) and
/// without its `#[cfg(test)] mod tests` (the tests may use anything).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.contains("mod tests") || n.contains("mod tests;"))
        {
            if lines.peek().is_some_and(|n| n.trim_end().ends_with('{')) {
                break;
            }
            lines.next();
            continue;
        }
        let l = match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        };
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The modules `code` (of module `me`) refers to: `crate::a::b` and `super::x` paths, each
/// resolved to the longest known module it names.
fn uses(me: &str, code: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut resolve = |path: &str| {
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        for n in (1..=segs.len()).rev() {
            let m = segs[..n].join("::");
            if known.contains(&m) {
                if m != me {
                    out.insert(m);
                }
                return;
            }
        }
    };
    for (i, _) in code.match_indices("crate::") {
        if i > 0 && code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest: String = code[i + 7..].chars().take_while(|&c| ident(c)).collect();
        resolve(&rest);
        // `use crate::x::{a, b}`: the items of a group.
        let after = &code[i + 7 + rest.len()..];
        if let Some(group) = after.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(0)];
            for item in group.split(',') {
                resolve(&format!("{rest}{}", item.trim()));
            }
        }
    }
    let parent: Vec<&str> = me.split("::").collect();
    for (i, _) in code.match_indices("super::") {
        let rest: String = code[i + 7..].chars().take_while(|&c| ident(c)).collect();
        let base = parent[..parent.len().saturating_sub(1)].join("::");
        let full = if base.is_empty() {
            rest.clone()
        } else {
            format!("{base}::{rest}")
        };
        resolve(&full);
        let after = &code[i + 7 + rest.len()..];
        if let Some(group) = after.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(0)];
            for item in group.split(',') {
                resolve(&format!("{full}{}", item.trim()));
            }
        }
    }
    // A parent's relative paths to its own submodules (`use results::X`, `nvrtc::compile`).
    let prefix = if me.is_empty() {
        String::new()
    } else {
        format!("{me}::")
    };
    for child in known.iter().filter_map(|k| k.strip_prefix(prefix.as_str())) {
        if child.contains("::") || child.is_empty() {
            continue;
        }
        let pat = format!("{child}::");
        let found = code.match_indices(&pat).any(|(i, _)| {
            !code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        });
        if found {
            out.insert(format!("{prefix}{child}"));
        }
    }
    out
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap_or(m)
}

/// The file-level graph: each module's file and the modules it uses.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut fs = Vec::new();
    files(&src, &mut fs);
    let known: BTreeSet<String> = fs.iter().map(|f| module_of(&src, f)).collect();
    fs.iter()
        .map(|f| {
            let me = module_of(&src, f);
            let text = std::fs::read_to_string(f).unwrap();
            let used = uses(&me, &code(&text), &known);
            (me, used)
        })
        .collect()
}

#[test]
fn each_module_uses_only_the_layers_below_it_and_no_file_cycle_exists() {
    let g = graph();
    let rank = |m: &str| ORDER.iter().position(|&o| o == top(m));
    let mut bad = Vec::new();
    for (m, used) in &g {
        println!("{:<20} -> {}", if m.is_empty() { "(lib)" } else { m }, {
            let v: Vec<&str> = used.iter().map(String::as_str).collect();
            v.join(", ")
        });
        if m.is_empty() || TEST_ONLY.contains(&m.as_str()) || TEST_ONLY.contains(&top(m)) {
            continue;
        }
        let Some(r) = rank(m) else {
            bad.push(format!("{m} is not in the crate docs' table (ORDER)"));
            continue;
        };
        for u in used {
            match rank(u) {
                Some(ru) if ru < r || top(u) == top(m) => {}
                _ => bad.push(format!("{m} uses {u}, which is not below it")),
            }
        }
    }
    // No cycle among files (within a layer, too).
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    fn visit<'g>(
        m: &'g str,
        g: &'g BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'g str, u8>,
        path: &mut Vec<&'g str>,
        bad: &mut Vec<String>,
    ) {
        match state.get(m) {
            Some(1) => {
                let at = path.iter().position(|&p| p == m).unwrap_or(0);
                bad.push(format!("cycle: {} -> {m}", path[at..].join(" -> ")));
                return;
            }
            Some(_) => return,
            None => {}
        }
        state.insert(m, 1);
        path.push(m);
        for u in g.get(m).into_iter().flatten() {
            if !TEST_ONLY.contains(&u.as_str()) {
                visit(u, g, state, path, bad);
            }
        }
        path.pop();
        state.insert(m, 2);
    }
    for m in g
        .keys()
        .filter(|m| !m.is_empty() && !TEST_ONLY.contains(&m.as_str()))
    {
        visit(m, &g, &mut state, &mut Vec::new(), &mut bad);
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Rust files at most 700 lines of code besides their tests, kernel files at most 700 lines.
#[test]
fn no_source_file_is_over_700_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut fs = Vec::new();
    files(&root.join("src"), &mut fs);
    files(&root.join("kernels"), &mut fs);
    let mut bad = Vec::new();
    for f in fs {
        let text = std::fs::read_to_string(&f).unwrap();
        let n = if f.extension().is_some_and(|e| e == "rs") {
            if TEST_ONLY.contains(&module_of(&root.join("src"), &f).as_str()) {
                0
            } else {
                code(&text).lines().count()
            }
        } else {
            text.lines().count()
        };
        println!("{n:>5} {}", f.strip_prefix(root).unwrap().display());
        if n > 700 {
            bad.push(format!("{}: {n} lines", f.display()));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_check_reads_crate_and_super_paths() {
    let known: BTreeSet<String> = ["a", "b", "a::x"].iter().map(|s| s.to_string()).collect();
    let used = uses(
        "a::x",
        &code("use crate::b::{Y, Z};\n// crate::a\nuse super::w;"),
        &known,
    );
    assert_eq!(used, ["b".to_string(), "a".to_string()].into());
}
