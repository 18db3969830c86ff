//! Every relative link in the repository's markdown resolves: the README and
//! the pages beside the parts they describe (`host/docs/`,
//! `guest-plugins/docs/`, `wit/README.md`, ...) link to one another, and a
//! page that moves, or a heading that is renamed, must not leave a link
//! behind that leads nowhere.
//!
//! For each `*.md` file of the repository (build output, dependencies and
//! hidden directories left out), every inline link `[text](dest)`, image
//! `![alt](dest)` and reference definition `[label]: dest` outside fenced
//! code blocks and code spans is checked: `http://`, `https://` and
//! `mailto:` destinations are left alone; any other names a file or
//! directory relative to the markdown file (`#anchor` alone: the file
//! itself), which must exist, and an anchor into a markdown file must be the
//! GitHub slug of one of its headings. Standard library only.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Directories never searched, by name, wherever they are.
const SKIP_DIRS: &[&str] = &["target", "target-guest", "node_modules"];
/// Directories never searched, by their path from the repository root.
const SKIP_PATHS: &[&str] = &["host/fuzz/corpus", "host/fuzz/artifacts"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lies inside the repository")
        .to_path_buf()
}

/// Every `*.md` file under `root`, sorted, without following symbolic links.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries =
            fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.expect("a directory entry");
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = entry.file_type().expect("the entry's file type");
            if kind.is_dir() {
                let rel = relative(root, &path);
                if name.starts_with('.')
                    || SKIP_DIRS.contains(&name.as_str())
                    || SKIP_PATHS.contains(&rel.as_str())
                {
                    continue;
                }
                dirs.push(path);
            } else if kind.is_file() && name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `path` from `root`, with `/` separators, for messages and skip lists.
fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// The code fence `line` is, if any: its character, its length and what
/// follows it (the info string). Up to three spaces of indentation.
fn fence(line: &str) -> Option<(char, usize, &str)> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    for ch in ['`', '~'] {
        let n = trimmed.chars().take_while(|&c| c == ch).count();
        if n >= 3 {
            // The fence character is ASCII: n characters are n bytes.
            return Some((ch, n, &trimmed[n..]));
        }
    }
    None
}

/// The file's lines, `None` for each line of a fenced code block (its
/// fences included).
fn outside_fences(text: &str) -> Vec<Option<&str>> {
    let mut out = Vec::new();
    let mut open: Option<(char, usize)> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        match open {
            None => match fence(line) {
                // A backtick fence's info string holds no backtick (else the
                // line is inline code, not a fence).
                Some((ch, n, info)) if !(ch == '`' && info.contains('`')) => {
                    open = Some((ch, n));
                    out.push(None);
                }
                _ => out.push(Some(line)),
            },
            Some((ch, n)) => {
                if let Some((c, m, rest)) = fence(line) {
                    if c == ch && m >= n && rest.trim().is_empty() {
                        open = None;
                    }
                }
                out.push(None);
            }
        }
    }
    out
}

/// The text of an ATX heading (`# ...` to `###### ...`), without its
/// closing `#`s.
fn heading(line: &str) -> Option<&str> {
    let s = line.trim_start_matches(' ');
    if line.len() - s.len() > 3 {
        return None;
    }
    let level = s.chars().take_while(|&c| c == '#').count();
    if level == 0 || level > 6 {
        return None;
    }
    let rest = &s[level..];
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
        return None;
    }
    let rest = rest.trim();
    let open = rest.trim_end_matches('#');
    if open.len() != rest.len() && (open.is_empty() || open.ends_with(' ') || open.ends_with('\t'))
    {
        return Some(open.trim());
    }
    Some(rest)
}

/// A heading as GitHub renders it to text: a link's text for the link,
/// without code and emphasis markers.
fn rendered(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(c) = rest.chars().next() {
        if c == '[' {
            if let Some(j) = rest.find("](") {
                if let Some(k) = rest[j + 2..].find(')') {
                    out.push_str(&rendered(&rest[1..j]));
                    rest = &rest[j + 2 + k + 1..];
                    continue;
                }
            }
        }
        if c != '`' && c != '*' {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// GitHub's anchor for a heading: lowercase; letters, digits, `-` and `_`
/// kept, spaces made `-`, everything else dropped.
fn slug(heading: &str) -> String {
    rendered(heading)
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown text's headings; a repeated one gets `-1`,
/// `-2`, ... as on GitHub.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashSet::new();
    for line in outside_fences(text).into_iter().flatten() {
        let Some(h) = heading(line) else { continue };
        let base = slug(h);
        match seen.get_mut(&base) {
            Some(n) => {
                *n += 1;
                out.insert(format!("{base}-{n}"));
            }
            None => {
                seen.insert(base.clone(), 0);
                out.insert(base);
            }
        }
    }
    out
}

/// The index just past the run of backticks that starts at `i`.
fn run_end(chars: &[char], i: usize) -> usize {
    let mut j = i;
    while j < chars.len() && chars[j] == '`' {
        j += 1;
    }
    j
}

/// `block` with every code span (its backticks included) blanked out,
/// newlines kept so that positions still give line numbers. A run of
/// backticks with no closing run of the same length is literal text.
fn mask_code_spans(block: &str) -> Vec<char> {
    let mut chars: Vec<char> = block.chars().collect();
    let n = chars.len();
    let mut i = 0;
    while i < n {
        if chars[i] == '\\' {
            i += 2;
            continue;
        }
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let open_end = run_end(&chars, i);
        let mut k = open_end;
        let mut close = None;
        while k < n {
            if chars[k] == '`' {
                let m = run_end(&chars, k);
                if m - k == open_end - i {
                    close = Some(m);
                    break;
                }
                k = m;
            } else {
                k += 1;
            }
        }
        match close {
            None => i = open_end,
            Some(end) => {
                for c in &mut chars[i..end] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = end;
            }
        }
    }
    chars
}

/// The destination of an inline link whose `(` ends just before `start`,
/// and the index it begins at.
fn destination(chars: &[char], start: usize) -> (String, usize) {
    let n = chars.len();
    let mut i = start;
    while i < n && matches!(chars[i], ' ' | '\t' | '\n') {
        i += 1;
    }
    if i < n && chars[i] == '<' {
        let end = chars[i..]
            .iter()
            .position(|&c| c == '>')
            .map_or(n, |p| i + p);
        return (chars[i + 1..end].iter().collect(), i);
    }
    let mut depth = 0usize;
    let mut j = i;
    while j < n {
        match chars[j] {
            ' ' | '\t' | '\n' => break,
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            _ => {}
        }
        j += 1;
    }
    (chars[i..j].iter().collect(), i)
}

/// A reference definition `[label]: dest` on one line.
fn reference_definition(line: &str) -> Option<String> {
    let s = line.trim_start_matches(' ');
    if line.len() - s.len() > 3 || !s.starts_with('[') || s.starts_with("[^") {
        return None;
    }
    let close = s.find(']')?;
    let rest = s[close + 1..].strip_prefix(':')?;
    let dest = rest.split_whitespace().next()?;
    let dest = dest
        .strip_prefix('<')
        .and_then(|d| d.strip_suffix('>'))
        .unwrap_or(dest);
    Some(dest.to_string())
}

/// Every link destination in a markdown text outside code, with its line
/// (1-based; for an inline link, the line its destination is on).
fn links(text: &str) -> Vec<(usize, String)> {
    let lines = outside_fences(text);
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(dest) = line.and_then(reference_definition) {
            out.push((i + 1, dest));
        }
    }
    // Links and code spans may run over lines, never over a blank line or
    // a fence: take the text block by block.
    let mut blocks: Vec<(usize, String)> = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in lines.iter().enumerate() {
        match line {
            Some(l) if !l.trim().is_empty() => match current.as_mut() {
                Some((_, block)) => {
                    block.push('\n');
                    block.push_str(l);
                }
                None => current = Some((i + 1, l.to_string())),
            },
            _ => blocks.extend(current.take()),
        }
    }
    blocks.extend(current);
    for (first, block) in blocks {
        let chars = mask_code_spans(&block);
        let n = chars.len();
        let mut i = 0;
        while i < n {
            if chars[i] == '\\' {
                i += 2;
                continue;
            }
            if chars[i] != '[' {
                i += 1;
                continue;
            }
            let mut depth = 0usize;
            let mut j = i;
            let mut close = None;
            while j < n {
                match chars[j] {
                    '\\' => {
                        j += 2;
                        continue;
                    }
                    '[' => depth += 1,
                    ']' => {
                        depth -= 1;
                        if depth == 0 {
                            close = Some(j);
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            if let Some(c) = close {
                if chars.get(c + 1) == Some(&'(') {
                    let (dest, at) = destination(&chars, c + 2);
                    let line = first + chars[..at].iter().filter(|&&ch| ch == '\n').count();
                    out.push((line, dest));
                }
            }
            i += 1;
        }
    }
    out.sort();
    out
}

/// Why `dest`, linked from `file`, leads nowhere; `None` if it resolves.
fn broken(
    root: &Path,
    file: &Path,
    dest: &str,
    headings: &mut HashMap<PathBuf, HashSet<String>>,
) -> Option<String> {
    if dest.is_empty()
        || ["http://", "https://", "mailto:"]
            .iter()
            .any(|p| dest.starts_with(p))
    {
        return None;
    }
    let (path, anchor) = dest.split_once('#').unwrap_or((dest, ""));
    let target = if path.is_empty() {
        file.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        root.join(from_root)
    } else {
        file.parent().expect("a file has a directory").join(path)
    };
    if !target.exists() {
        return Some("no such file or directory".to_string());
    }
    let is_markdown = target.is_file() && target.extension().is_some_and(|e| e == "md");
    if anchor.is_empty() || !is_markdown {
        return None;
    }
    let known = headings.entry(target.clone()).or_insert_with(|| {
        let text = fs::read_to_string(&target)
            .unwrap_or_else(|e| panic!("reading {}: {e}", target.display()));
        anchors(&text)
    });
    if known.contains(anchor) {
        None
    } else {
        Some(format!("no heading with anchor #{anchor}"))
    }
}

#[test]
fn every_relative_link_in_the_markdown_resolves() {
    let root = repo_root();
    let files = markdown_files(&root);
    assert!(
        files.contains(&root.join("README.md")),
        "no README.md found under {}",
        root.display()
    );
    let mut headings = HashMap::new();
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text =
            fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for (line, dest) in links(&text) {
            checked += 1;
            if let Some(why) = broken(&root, file, &dest, &mut headings) {
                failures.push(format!("{}:{line}: {dest} ({why})", relative(&root, file)));
            }
        }
    }
    assert!(
        checked > 0,
        "no links found in {} markdown files",
        files.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} links in {} markdown files lead nowhere:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug("Cluster-wide IPAM on etcd"),
        "cluster-wide-ipam-on-etcd"
    );
    assert_eq!(
        slug("`plugin test` with fault injection"),
        "plugin-test-with-fault-injection"
    );
    assert_eq!(
        slug("The daemon's logs, metrics, traces and health"),
        "the-daemons-logs-metrics-traces-and-health"
    );
    assert_eq!(slug("`wasm-cni status`"), "wasm-cni-status");
    assert_eq!(
        slug("A chain, and the SDK's fake"),
        "a-chain-and-the-sdks-fake"
    );
    assert_eq!(slug("Upgrade & uninstall"), "upgrade--uninstall");
    assert_eq!(
        slug("See [the trust boundary](x.md)"),
        "see-the-trust-boundary"
    );
    assert_eq!(slug("snake_case **bold**"), "snake_case-bold");
}

#[test]
fn anchors_number_repeated_headings_and_skip_code() {
    let text = "# Title\n\n## Set up\n\ntext\n\n## Set up\n\n```sh\n# not a heading\n```\n\n### Set up ###\n#nospace\n";
    let got = anchors(text);
    let want: HashSet<String> = ["title", "set-up", "set-up-1", "set-up-2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn links_outside_code_are_extracted_with_their_lines() {
    let text = "\
See [a](a.md) and ![img](pic.svg).

```sh
[fenced](no1.md)
```

`[spanned](no2.md)` but [b](b.md#part), ``[double `tick`](no3.md)``
over [two
lines](c.md) and `a code span
[over lines](no4.md)` then [d](<d e.md>)

   ~~~
[tilde](no5.md)
   ~~~
[ref]: refs/target.md
[`code label`]: ../up.md
[e](https://example.com) [f](#local)
";
    let got: Vec<(usize, String)> = links(text);
    let want: Vec<(usize, String)> = vec![
        (1, "a.md".into()),
        (1, "pic.svg".into()),
        (7, "b.md#part".into()),
        (9, "c.md".into()),
        (10, "d e.md".into()),
        (15, "refs/target.md".into()),
        (16, "../up.md".into()),
        (17, "#local".into()),
        (17, "https://example.com".into()),
    ];
    assert_eq!(got, want);
}
