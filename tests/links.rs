//! Every relative link of the documentation points to a file or folder of the repository.
//!
//! Checked: `README.md` and `GUARANTEES.md` at the root, every `.md` file under `docs/`, and
//! every `README.md` under `crates/`. A link is an inline link or image (`[text](target)`,
//! `![alt](target)`) or a reference definition (`[label]: target`) outside code blocks and code
//! spans. Links with a scheme (`https:`, `mailto:`, ...) and pure `#anchors` are left alone; a
//! `#fragment` is stripped before the target is looked up, relative to the file's folder (or to
//! the repository's root for a target starting with `/`). A target outside the repository fails
//! too: the documentation may cite only what it ships with.

use std::path::{Component, Path, PathBuf};

/// The repository's root: the `semicrf` package is the workspace root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files whose links are checked, sorted.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "GUARANTEES.md"]
        .iter()
        .map(|f| root.join(f))
        .filter(|p| p.is_file())
        .collect();
    walk(&root.join("docs"), &mut |p| {
        if p.extension().is_some_and(|e| e == "md") {
            files.push(p.to_path_buf());
        }
    });
    walk(&root.join("crates"), &mut |p| {
        if p.file_name().is_some_and(|n| n == "README.md") {
            files.push(p.to_path_buf());
        }
    });
    files.sort();
    files
}

/// Calls `f` on every file under `dir`, skipping build output and hidden folders.
fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                walk(&p, f);
            }
        } else {
            f(&p);
        }
    }
}

/// A link target found in a document, with the line it is on (1-based).
#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    target: String,
}

/// The text with fenced code blocks and code spans blanked out (newlines kept, so that byte
/// offsets still give line numbers).
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<(char, usize)> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |m| trimmed.chars().take_while(|c| *c == m).count());
        match fence {
            None if indent <= 3 && run >= 3 => {
                fence = marker.map(|m| (m, run));
                out.push_str(&blank(line));
            }
            Some((m, n)) => {
                if indent <= 3
                    && marker == Some(m)
                    && run >= n
                    && trimmed.trim_end().chars().all(|c| c == m)
                {
                    fence = None;
                }
                out.push_str(&blank(line));
            }
            None => out.push_str(line),
        }
    }
    blank_code_spans(&out)
}

/// `s` with every character but newlines replaced by spaces.
fn blank(s: &str) -> String {
    s.chars()
        .map(|c| if c == '\n' { '\n' } else { ' ' })
        .collect()
}

/// Code spans (a run of backticks up to the next run of the same length) blanked out; a run
/// with no closing run is literal text.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let open = chars[i..].iter().take_while(|c| **c == '`').count();
        let mut j = i + open;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let run = chars[j..].iter().take_while(|c| **c == '`').count();
                if run == open {
                    close = Some(j + run);
                    break;
                }
                j += run;
            } else {
                j += 1;
            }
        }
        let end = close.unwrap_or(i + open);
        let span: String = chars[i..end].iter().collect();
        if close.is_some() {
            out.push_str(&blank(&span));
        } else {
            out.push_str(&span);
        }
        i = end;
    }
    out
}

/// The link targets of a Markdown document, in order.
fn links(text: &str) -> Vec<Link> {
    let text = prose(text);
    let line_of = |byte: usize| text[..byte].matches('\n').count() + 1;
    let mut found = Vec::new();
    // Inline links and images: `](` followed by the destination.
    for (at, _) in text.match_indices("](") {
        let rest = &text[at + 2..];
        let rest = rest.trim_start_matches([' ', '\t', '\n']);
        let target = if let Some(inner) = rest.strip_prefix('<') {
            inner.split('>').next().unwrap_or("").to_string()
        } else {
            destination(rest)
        };
        found.push((at, target));
    }
    // Reference definitions: `[label]: target` at the start of a line.
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() <= 3
            && let Some(rest) = trimmed.strip_prefix('[')
            && let Some(close) = rest.find("]:")
            && close > 0
        {
            let target = rest[close + 2..].trim_start();
            let target = target.strip_prefix('<').map_or_else(
                || target.split_whitespace().next().unwrap_or("").to_string(),
                |inner| inner.split('>').next().unwrap_or("").to_string(),
            );
            found.push((offset, target));
        }
        offset += line.len();
    }
    found.sort_by_key(|(at, _)| *at);
    found
        .into_iter()
        .map(|(at, target)| Link {
            line: line_of(at),
            target,
        })
        .collect()
}

/// An inline link's destination: up to whitespace or the `)` that closes the link (balanced
/// parentheses belong to the destination).
fn destination(rest: &str) -> String {
    let mut depth = 0usize;
    let mut out = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            '(' => {
                depth += 1;
                out.push(c);
            }
            ')' if depth == 0 => break,
            ')' => {
                depth -= 1;
                out.push(c);
            }
            c if c.is_whitespace() => break,
            c => out.push(c),
        }
    }
    out
}

/// Whether a target is a local path to check (not a URL with a scheme, not a pure anchor).
fn is_local(target: &str) -> bool {
    if target.is_empty() || target.starts_with('#') {
        return false;
    }
    // A scheme: letters, digits, `+`, `-`, `.`, then `:` before any `/`.
    let Some((scheme, _)) = target.split_once(':') else {
        return true;
    };
    let starts_with_letter = scheme.starts_with(|c: char| c.is_ascii_alphabetic());
    let is_scheme = scheme
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    !(starts_with_letter && is_scheme)
}

/// `%XX` escapes decoded (Markdown writes a space in a path as `%20`).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Ok(hex) = std::str::from_utf8(hex)
            && let Ok(v) = u8::from_str_radix(hex, 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` with `.` and `..` resolved lexically; `None` where `..` climbs above the start.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// What is wrong with the links of `text`, the contents of `file` under `root`: one line per
/// broken link, naming the file (relative to `root`), the line and the target.
fn broken_links(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let rel_file = file.strip_prefix(root).unwrap_or(file);
    let folder = rel_file.parent().unwrap_or(Path::new(""));
    let mut problems = Vec::new();
    for link in links(text) {
        if !is_local(&link.target) {
            continue;
        }
        let path = percent_decode(link.target.split(['#', '?']).next().unwrap_or(""));
        if path.is_empty() {
            continue;
        }
        let joined = match path.strip_prefix('/') {
            Some(from_root) => PathBuf::from(from_root),
            None => folder.join(&path),
        };
        let why = match normalise(&joined) {
            None => Some("points outside the repository"),
            Some(p) if !root.join(&p).exists() => Some("no such file or folder"),
            Some(_) => None,
        };
        if let Some(why) = why {
            problems.push(format!(
                "{}:{}: `{}`: {why}",
                rel_file.display(),
                link.line,
                link.target
            ));
        }
    }
    problems
}

#[test]
fn every_relative_link_of_the_documentation_points_to_a_file_that_exists() {
    let root = root();
    let files = documents(&root);
    assert!(
        files.iter().any(|f| f.ends_with("README.md")),
        "no README.md found under {}",
        root.display()
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        checked += links(&text).len();
        problems.extend(broken_links(&root, file, &text));
    }
    assert!(checked > 0, "no links found in {} files", files.len());
    assert!(
        problems.is_empty(),
        "{} broken links in {} files:\n{}",
        problems.len(),
        files.len(),
        problems.join("\n")
    );
}

#[test]
fn inline_links_images_and_reference_definitions_are_found_with_their_lines() {
    let text = "# Title\n\
                see [the model](crates/a/model.md#section) and ![a plot](docs/img/p.svg \"title\")\n\
                a [link that\nwraps](docs/x.md), [angle](<docs/with space.md>), [nested (parens)](a(b).md)\n\
                   [ref]: docs/ref.md\n";
    let found: Vec<(usize, String)> = links(text)
        .into_iter()
        .map(|l| (l.line, l.target))
        .collect();
    assert_eq!(
        found,
        [
            (2, "crates/a/model.md#section".to_string()),
            (2, "docs/img/p.svg".to_string()),
            (4, "docs/x.md".to_string()),
            (4, "docs/with space.md".to_string()),
            (4, "a(b).md".to_string()),
            (5, "docs/ref.md".to_string()),
        ]
    );
}

#[test]
fn links_inside_code_blocks_and_code_spans_are_not_links() {
    let text = "```rust\nlet x = a[0](1); // [x](missing.md)\n```\n\
                ~~~~\n[y](missing.md)\n~~~~\n\
                `[z](missing.md)` and ``a ` [w](missing.md)``\n\
                [real](present.md)\n";
    let targets: Vec<String> = links(text).into_iter().map(|l| l.target).collect();
    assert_eq!(targets, ["present.md"]);
}

#[test]
fn a_missing_file_fails_and_urls_anchors_and_existing_files_pass() {
    let root = root();
    let readme = root.join("README.md");
    let text = "[ok](GUARANTEES.md) [ok](docs/../GUARANTEES.md#1-the-numeric-range) [ok](src/)\n\
                [web](https://example.org/x.md) [mail](mailto:a@b.c) [anchor](#example)\n\
                [gone](no/such/file.md) [gone too](GUARANTEES.md.old#x)\n\
                [outside](../elsewhere/SPEC.md) [rooted](/src/lib.rs) [space](GUARANTEES%2Emd)\n";
    let problems = broken_links(&root, &readme, text);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].starts_with("README.md:3: `no/such/file.md`: no such file"));
    assert!(problems[1].starts_with("README.md:3: `GUARANTEES.md.old#x`: no such file"));
    assert!(problems[2].starts_with("README.md:4: `../elsewhere/SPEC.md`: points outside"));
    // Relative to the document's own folder.
    let nested = root.join("docs").join("page.md");
    assert!(broken_links(&root, &nested, "[up](../README.md)").is_empty());
    assert_eq!(broken_links(&root, &nested, "[here](README.md)").len(), 1);
}
