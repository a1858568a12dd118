//! Tidy checks, as rust-analyzer keeps them: `docs/ARCHITECTURE.md` names only files that exist
//! and names every source file, each of its invariants names the tests that hold it, the
//! invariants a reading of the source can check hold, and no crate has a cycle between its
//! modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Every file below `dir`, relative to the repository, `target` and hidden folders left out.
fn walk(dir: &Path, out: &mut Vec<String>) {
    let root = root();
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "target" || name.starts_with('.') && name != ".ci" || name == "node_modules" {
            continue;
        }
        if p.is_dir() {
            out.push(format!("{}/", p.strip_prefix(&root).unwrap().display()));
            walk(&p, out);
        } else {
            out.push(p.strip_prefix(&root).unwrap().display().to_string());
        }
    }
}

fn repo_files() -> Vec<String> {
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

/// The Rust source files of the crates (`crates/NAME/src/…`).
fn sources() -> Vec<String> {
    repo_files().into_iter().filter(|f| f.contains("/src/") && f.ends_with(".rs") && f.starts_with("crates/")).collect()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap()
}

/// A file's text without its unit tests (every item under `#[cfg(test)]`, blanked line for
/// line so line numbers stay): tests may do what the product may not, and what follows a test
/// module is product code like the rest.
fn product_code(rel: &str) -> String {
    strip_test_items(&read(rel))
}

/// `text` with each `#[cfg(test)]` item (a `mod … { … }` or `mod …;`, a function, an `impl`, a
/// `use`) replaced by empty lines. Braces are counted outside strings, characters and comments.
fn strip_test_items(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(at) = text[i..].find("#[cfg(test)]").map(|k| k + i) {
        out.push_str(&text[i..at]);
        let end = item_end(b, at + "#[cfg(test)]".len());
        out.extend(text[at..end].chars().filter(|c| *c == '\n'));
        i = end;
    }
    out.push_str(&text[i..]);
    out
}

/// Where the item that starts at or after `from` ends: after its `;` at depth 0, or after the
/// `}` that closes its first `{`.
fn item_end(b: &[u8], from: usize) -> usize {
    let (mut i, mut depth) = (from, 0usize);
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'r' if matches!(b.get(i + 1), Some(b'#') | Some(b'"'))
                && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) =>
            {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                i += 2 + hashes;
                while i < b.len() && !b[i..].starts_with(&close) {
                    i += 1;
                }
                i += close.len() - 1;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || (b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'')) => {
                i += if b[i + 1] == b'\\' { 3 } else { 2 };
            }
            b';' if depth == 0 => return i + 1,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

#[test]
fn test_items_are_stripped_and_what_follows_them_is_product_code() {
    let body = |n: usize| (0..n).map(|_| "    x();\n").collect::<String>();
    let text = format!(
        "fn a() {{\n}}\n#[cfg(test)]\nmod tests {{\n    fn t() {{ let s = \"}}\"; let c = '{{'; }}\n}}\n/// After.\nfn after() {{\n{}}}\n",
        body(100)
    );
    let code = strip_test_items(&text);
    assert_eq!(code.lines().count(), text.lines().count(), "lines kept: {code}");
    assert!(!code.contains("fn t()") && code.contains("fn after()"), "{code}");
    assert_eq!(long_functions("a.rs", &code, 100), vec!["a.rs:8: after (102 lines)"]);
    let one_line = "#[cfg(test)]\nmod tests;\nfn b() {}\n";
    assert!(strip_test_items(one_line).contains("fn b()"));
}

/// Test-only source files: a module's unit tests kept beside it.
fn is_test_file(rel: &str) -> bool {
    rel.ends_with("/tests.rs") || rel.ends_with("_tests.rs")
}

/// The backticked spans of `text`.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

fn architecture() -> String {
    read("docs/ARCHITECTURE.md")
}

/// The code map's row of each crate: `crates/NAME` → the row's text.
fn code_map_rows() -> BTreeMap<String, String> {
    let doc = architecture();
    let mut rows = BTreeMap::new();
    for line in doc.lines() {
        if let Some(rest) = line.strip_prefix("| `crates/")
            && let Some((name, _)) = rest.split_once('`')
        {
            rows.insert(name.to_string(), line.to_string());
        }
    }
    rows
}

const REPO_DIRS: &[&str] = &["crates/", "docs/", "docker/", "infra/", "tests/", "configs/", ".ci/"];

#[test]
fn every_path_the_architecture_names_exists() {
    let files = repo_files();
    let doc = architecture();
    let mut missing = BTreeSet::new();
    for span in code_spans(&doc) {
        let span = span.trim();
        let path_like = !span.is_empty()
            && span.chars().all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
            && (span.ends_with(".rs") || REPO_DIRS.iter().any(|d| span.starts_with(d)));
        if !path_like {
            continue;
        }
        let want = span.trim_end_matches('/');
        let found = files.iter().any(|f| {
            let f = f.trim_end_matches('/');
            f == want || f.ends_with(&format!("/{want}"))
        });
        if !found {
            missing.insert(span.to_string());
        }
    }
    assert!(missing.is_empty(), "docs/ARCHITECTURE.md names paths that do not exist: {missing:?}");
}

/// The `.rs` files a crate's row of the code map names that are not in that crate.
fn missing_in_row(krate: &str, row: &str, files: &[String]) -> Vec<String> {
    let prefix = format!("crates/{krate}/");
    code_spans(row)
        .into_iter()
        .flat_map(|s| s.split(|c: char| c.is_whitespace() || ",:()".contains(c)))
        .filter(|w| w.ends_with(".rs") && w.chars().all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c)))
        .filter(|w| !files.iter().any(|f| f.starts_with(&prefix) && (f.ends_with(&format!("/{w}")) || f == w)))
        .map(|w| format!("{krate}: {w}"))
        .collect()
}

/// Every file a crate's row of the code map names is a file of that crate.
#[test]
fn every_file_a_crates_row_names_is_in_that_crate() {
    let files = repo_files();
    let mut missing = Vec::new();
    for (krate, row) in code_map_rows() {
        missing.extend(missing_in_row(&krate, &row, &files));
    }
    assert!(missing.is_empty(), "code map rows name files their crate does not have: {missing:#?}");
    let fake = "| `crates/agenteval-local` | `kind.rs` (the entry), `gone.rs` (no such file) |";
    assert_eq!(missing_in_row("agenteval-local", fake, &files), vec!["agenteval-local: gone.rs"]);
}

#[test]
fn every_source_file_is_named_in_its_crates_row_of_the_code_map() {
    let rows = code_map_rows();
    let mut unnamed = Vec::new();
    for f in sources() {
        let name = f.rsplit('/').next().unwrap();
        if matches!(name, "lib.rs" | "main.rs") || is_test_file(&f) {
            continue;
        }
        let krate = f.strip_prefix("crates/").unwrap().split('/').next().unwrap();
        let Some(row) = rows.get(krate) else {
            unnamed.push(format!("{f} (the crate has no row)"));
            continue;
        };
        let in_src = f.split_once("/src/").unwrap().1;
        let module = in_src.trim_end_matches(".rs").trim_end_matches("/mod");
        let stem = module.rsplit('/').next().unwrap();
        // Named as `file.rs`, `dir/file.rs`, `dir/`, the module path or its last segment.
        let words: BTreeSet<&str> = code_spans(row)
            .into_iter()
            .flat_map(|s| s.split(|c: char| c.is_whitespace() || ",:()".contains(c)))
            .map(|w| w.trim_end_matches('/'))
            .collect();
        let named = [stem.to_string(), format!("{stem}.rs"), in_src.to_string(), module.to_string()]
            .iter()
            .any(|c| words.contains(c.as_str()));
        if !named {
            unnamed.push(f);
        }
    }
    assert!(unnamed.is_empty(), "source files the code map of docs/ARCHITECTURE.md does not name: {unnamed:#?}");
}

#[test]
fn every_module_says_what_it_is_for() {
    let bare: Vec<String> = sources().into_iter().filter(|f| !read(f).trim_start().starts_with("//!")).collect();
    assert!(bare.is_empty(), "modules without a `//!` line: {bare:?}");
}

#[test]
fn only_the_aws_crate_names_the_aws_sdk_and_only_the_binary_anyhow() {
    let mut wrong = Vec::new();
    for f in repo_files().into_iter().filter(|f| f.starts_with("crates/") && !f.ends_with("tests/it/tidy.rs")) {
        if !(f.ends_with(".rs") || f.ends_with("Cargo.toml")) {
            continue;
        }
        let text = read(&f);
        if (text.contains("aws_sdk") || text.contains("aws-sdk")) && !f.starts_with("crates/agenteval-aws/") {
            wrong.push(format!("{f}: aws-sdk"));
        }
        if f.ends_with("Cargo.toml") && text.contains("anyhow") && f != "crates/agenteval/Cargo.toml" {
            wrong.push(format!("{f}: anyhow"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}

#[test]
fn the_core_starts_no_process_and_opens_no_socket() {
    let mut wrong = Vec::new();
    for f in sources().into_iter().filter(|f| f.starts_with("crates/agenteval-core/") && !is_test_file(f)) {
        let code = product_code(&f);
        // Address types (`std::net::IpAddr`) are data; sockets are not.
        for banned in ["std::process", "TcpStream", "TcpListener", "UdpSocket", "tokio::process", "tokio::net"] {
            if code.contains(banned) {
                wrong.push(format!("{f}: {banned}"));
            }
        }
        // Reading files is the config loader's job (the config, a prices or schema file it
        // names); nothing else in the core touches the filesystem.
        if code.contains("std::fs") && !f.ends_with("config/load.rs") {
            wrong.push(format!("{f}: std::fs"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}

/// The config's fields that name a place to connect to: `pub NAME: …String…` lines whose name
/// holds `url` or `endpoint`.
fn endpoint_fields(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|l| l.trim().strip_prefix("pub ")?.split_once(':'))
        .map(|(name, ty)| (name.trim(), ty))
        .filter(|(name, ty)| {
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && (name.contains("url") || name.contains("endpoint"))
                && ty.contains("String")
        })
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Every config field that names a place agenteval connects to is in the transport table
/// (`config::ENDPOINT_FIELDS`), which says how its transport is held (the `base_url` rule, or why
/// another reading applies): a new endpoint field cannot skip the rule unsaid.
#[test]
fn every_endpoint_field_of_the_config_is_in_the_transport_table() {
    let known: BTreeSet<&str> = agenteval_core::config::ENDPOINT_FIELDS.iter().map(|(f, _)| *f).collect();
    let mut unsaid = Vec::new();
    let mut seen = 0;
    for f in sources().into_iter().filter(|f| f.starts_with("crates/agenteval-core/src/config/") && !is_test_file(f)) {
        for name in endpoint_fields(&product_code(&f)) {
            seen += 1;
            if !known.contains(name.as_str()) {
                unsaid.push(format!("{f}: {name}"));
            }
        }
    }
    assert!(seen >= 4, "the finder found {seen} endpoint fields");
    assert!(unsaid.is_empty(), "endpoint fields the transport table does not name: {unsaid:?}");
    let scratch = "    pub collector_url: Option<String>,\n    pub endpoint: Endpoint,\n    pub fn check_url(url: &str) -> String {";
    assert_eq!(endpoint_fields(scratch), ["collector_url"]);
}

/// Where a line of product code decides something by which backend a run uses — a comparison or
/// a `match` on `backend.id`, or a backend's name compared as a string — instead of asking the
/// registered `BackendKind`.
fn backend_choice(line: &str) -> bool {
    let l = line.trim_start();
    if l.starts_with("//") {
        return false;
    }
    let on_id = l.contains("backend.id") && (l.contains("==") || l.contains("!=") || l.starts_with("match "));
    let by_name = ["\"local\"", "\"aws\""].iter().any(|name| {
        [format!("== {name}"), format!("!= {name}"), format!("Some({name})"), format!("{name} =>")]
            .iter()
            .any(|p| l.contains(p.as_str()))
    });
    let variant = l.split("BackendId::").skip(1).any(|rest| !(rest.starts_with("default") || rest.starts_with("new")));
    on_id || by_name || variant
}

/// Adding a backend is its crate and one line in the binary's `wiring/`: nothing else may
/// choose by backend, so nothing else needs to learn a new one.
#[test]
fn only_the_wiring_chooses_by_backend() {
    let mut wrong = Vec::new();
    for f in sources().into_iter().filter(|f| !is_test_file(f)) {
        // The wiring holds the registry; a backend crate's own kind may name itself.
        if f.starts_with("crates/agenteval/src/wiring/") || f.ends_with("/kind.rs") {
            continue;
        }
        for (n, line) in product_code(&f).lines().enumerate() {
            if backend_choice(line) {
                wrong.push(format!("{f}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "choices by backend outside crates/agenteval/src/wiring/: {wrong:#?}");
}

#[test]
fn the_backend_choice_finder_finds_choices() {
    for choice in [
        "if config.backend.id != BackendId::Local {",
        "match cfg.backend.id.as_str() {",
        "} else if args.backend.as_deref() == Some(\"aws\") {",
        "        \"local\" => Ok(Local),",
        "if cfg.backend.id.as_str() == \"aws\" {",
    ] {
        assert!(backend_choice(choice), "{choice}");
    }
    for fine in ["agenteval.backend = ctx.config.backend.id.as_str(),", "// backend.id == aws would be wrong"] {
        assert!(!backend_choice(fine), "{fine}");
    }
}

/// Functions of product code over `max` lines whose comment block above says no `Long:` reason,
/// as `file:line: name (n lines)`.
fn long_functions(rel: &str, code: &str, max: usize) -> Vec<String> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let sig = [
            "pub fn ",
            "fn ",
            "pub async fn ",
            "async fn ",
            "pub(crate) fn ",
            "pub(super) fn ",
            "pub(crate) async fn ",
            "pub(super) async fn ",
        ];
        let Some(rest) = sig.iter().find_map(|s| body.strip_prefix(s)) else { continue };
        // A declaration (`fn f();`) or a body on its own line (`fn f() {}`) ends where it starts.
        if rest.trim_end().ends_with(';') || rest.trim_end().ends_with('}') {
            continue;
        }
        let name = rest.split(['(', '<']).next().unwrap_or_default();
        let close = format!("{indent}}}");
        let Some(end) = lines[i + 1..].iter().position(|l| *l == close) else { continue };
        let n = end + 2;
        let reasoned = lines[..i]
            .iter()
            .rev()
            .take_while(|l| {
                let t = l.trim_start();
                t.starts_with("//") || t.starts_with("#[")
            })
            .any(|l| l.trim_start().starts_with("// Long:"));
        if n > max && !reasoned {
            out.push(format!("{rel}:{}: {name} ({n} lines)", i + 1));
        }
    }
    out
}

/// No function of the shipped crates is over 100 lines without a reason written above it
/// (`// Long: …`): a long function mixes concerns more often than not.
#[test]
fn no_long_function_without_a_reason() {
    let mut wrong = Vec::new();
    for f in sources().into_iter().filter(|f| !is_test_file(f) && !f.starts_with("crates/agenteval-testkit/")) {
        wrong.extend(long_functions(&f, &product_code(&f), 100));
    }
    assert!(wrong.is_empty(), "functions over 100 lines with no `// Long:` reason above them: {wrong:#?}");
}

#[test]
fn the_long_function_finder_counts_bodies_and_reads_reasons() {
    let body = |n: usize| (0..n).map(|_| "    x();\n").collect::<String>();
    let long = format!("/// Does it.\nfn f() {{\n{}}}\n", body(100));
    assert_eq!(long_functions("a.rs", &long, 100), vec!["a.rs:2: f (102 lines)"]);
    let reasoned = format!("/// Does it.\n// Long: one arm per key.\n#[allow(x)]\nfn f() {{\n{}}}\n", body(100));
    assert!(long_functions("a.rs", &reasoned, 100).is_empty());
    let short = format!("    pub async fn g(&self) {{\n{}    }}\n", body(10));
    assert!(long_functions("a.rs", &short, 100).is_empty());
    // A trait's one-line defaults and declarations, then a short method far below them.
    let one_liners = format!("    fn a(&self) {{}}\n    fn b(&self);\n{}    fn c() {{\n    }}\n", body(120));
    assert!(long_functions("a.rs", &one_liners, 100).is_empty(), "{:?}", long_functions("a.rs", &one_liners, 100));
}

#[test]
fn library_functions_return_typed_errors() {
    let mut wrong = Vec::new();
    for f in sources().into_iter().filter(|f| !f.starts_with("crates/agenteval/") && !is_test_file(f)) {
        let code = product_code(&f);
        let lines: Vec<&str> = code.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let l = line.trim_start();
            if l.starts_with("pub fn") || l.starts_with("pub async fn") {
                // The whole signature, however many lines it takes.
                let sig: String = lines[n..].iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
                let sig = sig.split(['{', ';']).next().unwrap_or_default();
                let returns = sig.rsplit_once("->").map_or("", |(_, r)| r);
                if returns.contains("Result<") && returns.contains(", String>") {
                    wrong.push(format!("{f}:{}: {}", n + 1, sig.trim()));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "public functions of library crates returning `Result<_, String>`: {wrong:#?}");
}

/// The top-level modules a file's product code refers to through `crate::`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        // `agenteval_core::` and the like are other crates.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(group.len(), |(j, _)| j);
            let mut depth = 0;
            let mut start = 0;
            let inner = &group[..end];
            for (j, c) in inner.char_indices().chain(std::iter::once((inner.len(), ','))) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let item: String =
                            inner[start..j].trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                        if !item.is_empty() {
                            out.insert(item);
                        }
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            let item: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !item.is_empty() {
                out.insert(item);
            }
        }
    }
    out
}

/// A cycle in `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| p == n).unwrap();
                let mut cycle = path[start..].to_vec();
                cycle.push(n.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    graph.keys().find_map(|n| visit(n, graph, &mut state, &mut Vec::new()))
}

/// Each crate's graph of top-level modules, from what its product code names through `crate::`.
fn module_graphs() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for f in sources().into_iter().filter(|f| !is_test_file(f)) {
        let krate = f.strip_prefix("crates/").unwrap().split('/').next().unwrap().to_string();
        let in_src = f.split_once("/src/").unwrap().1;
        let top = in_src.split('/').next().unwrap().trim_end_matches(".rs").to_string();
        if matches!(top.as_str(), "lib" | "main") {
            continue;
        }
        let graph = graphs.entry(krate).or_default();
        let refs = crate_refs(&product_code(&f));
        let edges = graph.entry(top.clone()).or_default();
        edges.extend(refs.into_iter().filter(|r| *r != top));
    }
    // Only edges to modules: `crate::Error` and the like are re-exports from the crate root.
    for graph in graphs.values_mut() {
        let modules: BTreeSet<String> = graph.keys().cloned().collect();
        for edges in graph.values_mut() {
            edges.retain(|e| modules.contains(e));
        }
    }
    graphs
}

#[test]
fn no_crate_has_a_module_cycle() {
    let cycles: Vec<String> = module_graphs()
        .iter()
        .filter_map(|(krate, graph)| find_cycle(graph).map(|c| format!("{krate}: {}", c.join(" → "))))
        .collect();
    assert!(cycles.is_empty(), "module cycles: {cycles:#?}");
}

#[test]
fn the_cycle_finder_finds_cycles_and_the_reader_reads_groups() {
    let refs = crate_refs("use crate::{model::{A, B}, evaluator};\nfn f() { crate::config::X; agenteval_core::y(); }");
    assert_eq!(refs, ["config", "evaluator", "model"].iter().map(|s| s.to_string()).collect());
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["c".to_string()].into());
    g.insert("c".into(), BTreeSet::new());
    assert!(find_cycle(&g).is_none());
    g.get_mut("c").unwrap().insert("a".into());
    assert_eq!(find_cycle(&g).unwrap(), ["a", "b", "c", "a"]);
}

/// A source file's module path inside its crate: `src/lib.rs` is `[]`, `src/a/mod.rs` and
/// `src/a.rs` are `[a]`, `src/a/b.rs` is `[a, b]`.
fn module_of(in_src: &str) -> Vec<String> {
    let mut parts: Vec<String> = in_src.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// Every path `code` names through `crate::`, `super::` or `self::`, as the module path it
/// starts from (`crate` `[]`, `super` the parent of `module`, `self` `module`) followed by its
/// segments; a `{…}` group gives one path per item. Bare `child::` paths (how a module file
/// names its children) are added for each of `children`.
fn paths_named(code: &str, module: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    fn ident(s: &str) -> &str {
        let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
        &s[..end]
    }
    /// The paths of `rest` (what follows a `::`) below `base`.
    fn read(rest: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut start = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        let item = group[start..j].trim();
                        if !item.is_empty() && item != "self" {
                            read(item, base.clone(), out);
                        }
                        start = j + 1;
                        if c == '}' {
                            break;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            return;
        }
        let name = ident(rest);
        if name.is_empty() {
            return;
        }
        let mut path = base;
        path.push(name.to_string());
        match rest[name.len()..].strip_prefix("::") {
            Some(more) if more.starts_with('{') || more.starts_with(|c: char| c.is_alphabetic() || c == '_') => {
                read(more, path, out)
            }
            _ => out.push(path),
        }
    }
    let mut out = Vec::new();
    let starts_path =
        |i: usize| code[..i].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'));
    for (i, _) in code.match_indices("crate::").filter(|(i, _)| starts_path(*i)) {
        read(&code[i + "crate::".len()..], Vec::new(), &mut out);
    }
    for (i, _) in code.match_indices("self::").filter(|(i, _)| starts_path(*i)) {
        read(&code[i + "self::".len()..], module.to_vec(), &mut out);
    }
    for (i, _) in code.match_indices("super::").filter(|(i, _)| starts_path(*i)) {
        let mut base = module.to_vec();
        let mut rest = &code[i..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        read(rest, base, &mut out);
    }
    for child in children {
        let bare = format!("{child}::");
        for (i, _) in code.match_indices(&bare).filter(|(i, _)| starts_path(*i)) {
            let mut base = module.to_vec();
            base.push(child.clone());
            read(&code[i + bare.len()..], base, &mut out);
        }
    }
    out
}

/// For each module folder (`crate/a/b`), the graph between its files and sub-folders: an edge
/// `x → y` when code in `x` (or below it) names something in `y` (or below it). The folder's
/// own `mod.rs` (or `lib.rs`) is not a node: it is the module's face, declaring its files and
/// re-exporting what they make, so every file may name it. Built from `(path in src, product
/// code)` of one crate's files.
fn folder_graphs(files: &[(String, String)]) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(f, _)| module_of(f)).collect();
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (f, code) in files {
        let module = module_of(f);
        let is_folder = f.ends_with("/mod.rs") || matches!(f.as_str(), "lib.rs" | "main.rs");
        let children: BTreeSet<String> = if is_folder {
            modules
                .iter()
                .filter(|m| m.len() == module.len() + 1 && m.starts_with(&module))
                .map(|m| m.last().unwrap().clone())
                .collect()
        } else {
            BTreeSet::new()
        };
        for path in paths_named(code, &module, &children) {
            // The longest prefix of the path that is a module: where the named item lives.
            let Some(target) = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains(p)) else {
                continue;
            };
            let common = module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            let folder = &module[..common];
            // The node of each side in the folder's graph: the next segment, or `mod`.
            let node = |m: &[String]| m.get(common).cloned().unwrap_or_else(|| "mod".into());
            let (from, to) = (node(&module), node(&target));
            if from != to && from != "mod" && to != "mod" {
                let graph = graphs.entry(folder.join("/")).or_default();
                graph.entry(to.clone()).or_default();
                graph.entry(from).or_default().insert(to);
            }
        }
    }
    graphs
}

#[test]
fn no_module_folder_has_a_cycle_between_its_files() {
    let mut by_crate: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for f in sources().into_iter().filter(|f| !is_test_file(f)) {
        let krate = f.strip_prefix("crates/").unwrap().split('/').next().unwrap().to_string();
        let in_src = f.split_once("/src/").unwrap().1.to_string();
        by_crate.entry(krate).or_default().push((in_src, product_code(&f)));
    }
    let mut cycles = Vec::new();
    for (krate, files) in &by_crate {
        for (folder, graph) in folder_graphs(files) {
            if let Some(c) = find_cycle(&graph) {
                cycles.push(format!("{krate}/src/{folder}: {}", c.join(" → ")));
            }
        }
    }
    assert!(cycles.is_empty(), "cycles between the files of a module: {cycles:#?}");
}

#[test]
fn a_circle_of_three_files_inside_one_module_is_found() {
    let file = |path: &str, code: &str| (path.to_string(), code.to_string());
    let mut files = vec![
        file("lib.rs", "mod worker;"),
        file("worker/mod.rs", "mod ctx; mod run; mod sink;\nfn go() { run::task(); }"),
        file("worker/ctx.rs", "use super::sink::Sink;"),
        file("worker/run.rs", "use crate::worker::{ctx::Ctx, sink};"),
        file("worker/sink.rs", "fn f() {}"),
    ];
    let graphs = folder_graphs(&files);
    assert_eq!(graphs["worker"]["run"], ["ctx".to_string(), "sink".to_string()].into());
    assert!(!graphs["worker"].contains_key("mod"), "the module's face is not a node: {graphs:?}");
    assert!(find_cycle(&graphs["worker"]).is_none(), "{graphs:?}");
    files[4] = file("worker/sink.rs", "fn f() { super::run::task(); }");
    let cycle = find_cycle(&folder_graphs(&files)["worker"]).expect("ctx → sink → run → ctx");
    assert_eq!(cycle.len(), 4, "{cycle:?}");
    // One deeper: a file below a sub-folder counts as the sub-folder.
    files[4] = file("worker/sink.rs", "fn f() {}");
    files.push(file("worker/act/mod.rs", "mod live;"));
    files.push(file("worker/act/live.rs", "use crate::worker::ctx::Ctx;"));
    files[1] = file("worker/mod.rs", "mod act; mod ctx; mod run; mod sink;");
    files[2] = file("worker/ctx.rs", "use super::act::Act;");
    let cycle = find_cycle(&folder_graphs(&files)["worker"]).expect("act → ctx → act");
    assert!(cycle.contains(&"act".to_string()) && cycle.contains(&"ctx".to_string()), "{cycle:?}");
}

/// Text that states (part of) the task-state rule: its comparisons of ranks and attempts, and
/// its `completed` guard, in Rust, SQL or a DynamoDB condition.
const STATE_RULE_TERMS: &[&str] =
    &["rank() < ", "rank() > ", "rank < ", "rank > ", "#rk < ", "!= 'completed'", "<> 'completed'", "<> :completed"];

#[test]
fn the_task_state_rule_is_written_once() {
    let home = "crates/agenteval-core/src/model.rs";
    let mut elsewhere = Vec::new();
    for f in sources().into_iter().filter(|f| !is_test_file(f) && f != home) {
        let code = product_code(&f);
        for term in STATE_RULE_TERMS.iter().filter(|t| code.contains(*t)) {
            elsewhere.push(format!("{f}: `{term}`"));
        }
    }
    assert!(
        elsewhere.is_empty(),
        "the task-state rule is `model::state_rule`'s alone; also written in: {elsewhere:#?}"
    );
    let rule = product_code(home);
    assert!(rule.contains("pub fn state_rule<"), "the rule's one home moved: update this test");
    for reader in ["crates/agenteval-local/src/sqlite_index.rs", "crates/agenteval-aws/src/dynamo_index.rs"] {
        assert!(product_code(reader).contains("state_rule(&"), "{reader} applies its own rule");
    }
}

/// The span names product code makes: each `info_span!`'s literal name, or its `otel.name`'s
/// fixed start when it has one (`evaluator.{kind}` → `evaluator.`), and each span built by
/// name (`span_builder(format!("chat {…}"))` → `chat `).
fn span_names(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("info_span!(") {
        rest = &rest[at + "info_span!(".len()..];
        let call = &rest[..rest.find(");").unwrap_or(rest.len()).min(rest.len())];
        let quoted = |s: &str| s.split('"').nth(1).map(str::to_string);
        let named = call.find("otel.name = format!(").and_then(|i| quoted(&call[i..]));
        let name = named.map(|n| n.split('{').next().unwrap_or_default().to_string()).or_else(|| {
            // The first literal after an optional `parent: …,`.
            let body = call.trim_start();
            let body = if body.starts_with("parent:") { &body[body.find(',').map_or(0, |i| i + 1)..] } else { body };
            body.trim_start().starts_with('"').then(|| quoted(body)).flatten()
        });
        out.extend(name);
    }
    let mut rest = code;
    while let Some(at) = rest.find("span_builder(format!(\"") {
        rest = &rest[at + "span_builder(format!(\"".len()..];
        out.insert(rest.split(['{', '"']).next().unwrap_or_default().to_string());
    }
    out
}

/// The names of docs/telemetry.md's span tree, placeholders cut at their `<` (`chat <model>`
/// → `chat `, `evaluator.<kind>` → `evaluator.`).
fn documented_spans() -> BTreeSet<String> {
    let doc = read("docs/telemetry.md");
    let tree = doc.split("## The span tree").nth(1).and_then(|t| t.split("```").nth(1)).unwrap_or_default();
    tree.lines()
        .filter_map(|l| {
            let l = l.trim_start_matches(|c: char| "│├└─ ".contains(c));
            let name: String = l.split("  ").next()?.trim().to_string();
            if name.is_empty() { None } else { Some(name.split('<').next().unwrap_or_default().to_string()) }
        })
        .collect()
}

/// Every span product code makes is in docs/telemetry.md's span tree, and every span there is
/// made by the code (ARCHITECTURE.md says the tree is the table of names).
#[test]
fn every_span_is_in_the_span_tree_and_every_span_there_is_made() {
    let mut made = BTreeSet::new();
    for f in sources().into_iter().filter(|f| !is_test_file(f) && !f.starts_with("crates/agenteval-testkit/")) {
        made.extend(span_names(&product_code(&f)));
    }
    let documented = documented_spans();
    let undocumented: Vec<&String> = made.difference(&documented).collect();
    let unmade: Vec<&String> = documented.difference(&made).collect();
    assert!(undocumented.is_empty(), "spans the code makes that docs/telemetry.md's tree lacks: {undocumented:?}");
    assert!(unmade.is_empty(), "spans docs/telemetry.md's tree names that no code makes: {unmade:?}");
}

#[test]
fn the_span_name_reader_reads_literals_parents_and_otel_names() {
    let code = r#"
        let a = tracing::info_span!("benchmark.grade", x = 1);
        let b = tracing::info_span!(
            parent: run_span,
            "eval.job",
            y = Empty,
        );
        let c = tracing::info_span!("evaluator", otel.name = format!("evaluator.{}", k), z = 2);
        let d = tracer.span_builder(format!("chat {model}"));
    "#;
    let names: Vec<String> = span_names(code).into_iter().collect();
    assert_eq!(names, ["benchmark.grade", "chat ", "eval.job", "evaluator."]);
}

/// The invariants of docs/ARCHITECTURE.md, one per top-level bullet of its `## Invariants`
/// section.
fn invariants(doc: &str) -> Vec<String> {
    let Some(section) = doc.split("\n## Invariants\n").nth(1) else { return Vec::new() };
    let section = section.split("\n## ").next().unwrap_or("");
    let mut out: Vec<String> = Vec::new();
    for line in section.lines() {
        if line.starts_with("- ") {
            out.push(line.to_string());
        } else if let Some(last) = out.last_mut()
            && (line.starts_with(' ') || !line.trim().is_empty())
        {
            last.push('\n');
            last.push_str(line);
        }
    }
    out
}

/// The tests an invariant names after its `Held by`: backticked `it::MODULE::test` (the binary's
/// test binary) or `CRATE::module::…::test` (a crate's unit test).
fn held_by(invariant: &str) -> Vec<String> {
    invariant
        .split_once("Held by")
        .map(|(_, rest)| code_spans(rest).into_iter().map(|s| s.trim().to_string()).collect())
        .unwrap_or_default()
}

/// Whether `text` declares the test `name`: a function with `#[test]` or `#[tokio::test…]`
/// above it (doc comments and other attributes between them allowed).
fn declares_test(text: &str, name: &str) -> bool {
    let lines: Vec<&str> = text.lines().collect();
    lines.iter().enumerate().any(|(i, l)| {
        let decl = l.trim_start();
        let decl = decl.strip_prefix("async ").unwrap_or(decl);
        decl.starts_with(&format!("fn {name}(")) && {
            lines[..i]
                .iter()
                .rev()
                .take_while(|a| a.trim_start().starts_with("#[") || a.trim_start().starts_with("///"))
                .any(|a| a.trim_start().starts_with("#[test]") || a.trim_start().starts_with("#[tokio::test"))
        }
    })
}

/// Where a test an invariant names is, if it exists: `it::tidy::x` is `fn x` in
/// `crates/agenteval/tests/it/tidy.rs`; `agenteval-engine::controller::decide::tests::x` is
/// `fn x` in a file of `crates/agenteval-engine/src` whose path has every module named (an inline
/// `tests` module may be in the file); `agenteval-aws::conformance::x` is in the crate's
/// `tests/conformance.rs`.
fn find_test(files: &[String], reference: &str) -> Option<String> {
    let parts: Vec<&str> = reference.split("::").collect();
    let (name, modules) = parts.split_last()?;
    let (krate, modules) = modules.split_first()?;
    let candidates: Vec<&String> = match *krate {
        "it" => {
            let [module] = modules else { return None };
            files.iter().filter(|f| **f == format!("crates/agenteval/tests/it/{module}.rs")).collect()
        }
        k => files
            .iter()
            .filter(|f| {
                (f.starts_with(&format!("crates/{k}/src/")) || f.starts_with(&format!("crates/{k}/tests/")))
                    && f.ends_with(".rs")
            })
            .filter(|f| {
                let path: Vec<&str> =
                    f.trim_end_matches(".rs").split('/').skip(3).filter(|p| *p != "mod" && *p != "lib").collect();
                let wanted: Vec<&str> = modules.iter().copied().filter(|m| *m != "tests").collect();
                path == wanted || path.iter().copied().filter(|p| *p != "tests").eq(wanted.iter().copied())
            })
            .collect(),
    };
    candidates.into_iter().find(|f| declares_test(&read(f), name)).cloned()
}

#[test]
fn every_invariant_names_the_tests_that_hold_it_and_they_exist() {
    let files = repo_files();
    let doc = architecture();
    let all = invariants(&doc);
    assert!(all.len() >= 20, "the invariants were not found in docs/ARCHITECTURE.md: {}", all.len());
    let mut problems = Vec::new();
    for inv in &all {
        let title: String = inv.lines().next().unwrap_or("").chars().take(90).collect();
        let tests = held_by(inv);
        if tests.is_empty() {
            problems.push(format!("names no test (`Held by` …): {title}"));
        }
        for t in tests {
            if find_test(&files, &t).is_none() {
                problems.push(format!("names `{t}`, which is no test: {title}"));
            }
        }
    }
    assert!(problems.is_empty(), "docs/ARCHITECTURE.md's invariants:\n{}", problems.join("\n"));
}

#[test]
fn the_invariant_reader_finds_tests_named_and_refuses_what_is_not_one() {
    let doc = "# A\n\n## Invariants\n\n- **One.** Words.\n  More. Held by `it::tidy::only_the_wiring_chooses_by_backend`.\n- **Two.** No test here.\n\n## Next\n- not an invariant\n";
    let all = invariants(doc);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(held_by(&all[0]), ["it::tidy::only_the_wiring_chooses_by_backend"]);
    assert!(held_by(&all[1]).is_empty());
    let files = repo_files();
    assert!(find_test(&files, "it::tidy::only_the_wiring_chooses_by_backend").is_some());
    assert!(find_test(&files, "it::tidy::no_such_test").is_none());
    // A helper is not a test.
    assert!(find_test(&files, "it::tidy::invariants").is_none());
    assert!(find_test(&files, "agenteval-engine::controller::decide::tests::no_such").is_none());
    assert!(
        find_test(&files, "agenteval-engine::controller::concurrency::tests::fixed_never_moves").is_some(),
        "a unit test in its module's inline tests"
    );
    assert!(
        find_test(&files, "agenteval-engine::worker::concurrency::tests::fixed_never_moves").is_none(),
        "the module path counts"
    );
}

/// The crates a crate's `Cargo.toml` names under `[dependencies]`.
fn dependencies(krate: &str) -> Vec<String> {
    let text = read(&format!("crates/{krate}/Cargo.toml"));
    let Some(section) = text.split("[dependencies]").nth(1) else { return Vec::new() };
    let section = section.split("\n[").next().unwrap_or("");
    section
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split(['.', ' ', '=']).next().map(str::to_string))
        .collect()
}

/// The core is the domain and its ports: no other agenteval crate, no cloud, HTTP, telemetry
/// exporter, database or CLI crate. The engine runs the fleet: no backend crate, no AWS SDK, no
/// OpenTelemetry SDK or exporter, no CLI.
#[test]
fn the_core_and_the_engine_depend_on_no_cloud_exporter_or_cli_crate() {
    let outside = |deps: &[String], forbidden: &[&str]| -> Vec<String> {
        deps.iter().filter(|d| forbidden.iter().any(|f| d.starts_with(f))).cloned().collect()
    };
    let core = dependencies("agenteval-core");
    assert!(core.contains(&"serde".to_string()), "the reader read the core's Cargo.toml: {core:?}");
    let core_forbidden = [
        "agenteval-",
        "aws-",
        "opentelemetry",
        "tracing-opentelemetry",
        "reqwest",
        "hyper",
        "axum",
        "tonic",
        "rusqlite",
        "bollard",
        "clap",
        "indicatif",
        "anyhow",
    ];
    assert_eq!(outside(&core, &core_forbidden), Vec::<String>::new(), "agenteval-core's dependencies");
    let engine = dependencies("agenteval-engine");
    assert!(engine.contains(&"agenteval-core".to_string()), "{engine:?}");
    let engine_forbidden = [
        "aws-",
        "agenteval-aws",
        "agenteval-local",
        "opentelemetry_sdk",
        "opentelemetry-sdk",
        "opentelemetry-otlp",
        "clap",
        "anyhow",
    ];
    assert_eq!(outside(&engine, &engine_forbidden), Vec::<String>::new(), "agenteval-engine's dependencies");
}

/// The engine holds the run machinery only: benchmarks, agents and evaluators that need nothing
/// of it are crates of their own, so the engine stays at most a fifth of the product's code
/// (lines that are neither blank nor comments, tests and the test kit left out).
#[test]
fn the_engine_is_at_most_a_fifth_of_the_products_code() {
    let code =
        |rel: &str| product_code(rel).lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("//")).count();
    let product: Vec<String> = sources()
        .into_iter()
        .filter(|f| !is_test_file(f) && !f.ends_with("/testing.rs") && !f.starts_with("crates/agenteval-testkit/"))
        .collect();
    let all: usize = product.iter().map(|f| code(f)).sum();
    let engine: usize = product.iter().filter(|f| f.starts_with("crates/agenteval-engine/")).map(|f| code(f)).sum();
    assert!(all > 10_000, "the product's code was not found: {all} lines");
    eprintln!("the engine: {engine} of the product's {all} lines of code");
    assert!(
        engine * 5 <= all,
        "the engine is {engine} of the product's {all} lines of code ({:.1}%, at most 20%): move what needs nothing of it into a crate of its own",
        100.0 * engine as f64 / all as f64
    );
}

/// Where the code names a component's kind (`AgentConfig::Llm`, `BenchmarkConfig::Harbor`,
/// `EvaluatorConfig::Tests`, `EnvironmentKind::Docker`, or the enum under another name, `use
/// BenchmarkConfig as B`) outside the kind's own folders and the tables of kinds (the config's,
/// which says each kind's facts as methods, and the binary's wiring, which registers the
/// environments): each such place is a fact about a kind derived again, which a new kind would
/// have to find. There are none; a new one fails here.
#[test]
fn no_place_names_a_kind_outside_its_folder() {
    let homes: [(&str, &[&str]); 4] = [
        (
            "AgentConfig::",
            &[
                "crates/agenteval-engine/src/agents/",
                "crates/agenteval-agents/",
                "crates/agenteval-installed/",
                "crates/agenteval-llm/",
            ],
        ),
        (
            "BenchmarkConfig::",
            &[
                "crates/agenteval-engine/src/benchmarks/",
                "crates/agenteval-benchmarks/",
                "crates/agenteval-harbor/",
                "crates/agenteval-tau2/",
            ],
        ),
        ("EvaluatorConfig::", &["crates/agenteval-engine/src/evaluators/", "crates/agenteval-evaluators/"]),
        (
            "EnvironmentKind::",
            &[
                "crates/agenteval-engine/src/environments/",
                "crates/agenteval-docker/",
                "crates/agenteval-envlink/",
                "crates/agenteval/src/wiring/mod.rs",
            ],
        ),
    ];
    let mut found = Vec::new();
    for f in sources().into_iter().filter(|f| {
        !is_test_file(f)
            && !f.ends_with("/testing.rs")
            && !f.starts_with("crates/agenteval-testkit/")
            && !f.starts_with("crates/agenteval-core/src/config/")
    }) {
        for (n, line) in product_code(&f).lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            let named = homes.iter().find(|(kind, home)| {
                let name = kind.trim_end_matches("::");
                let aliased = [" as ", "::{", "::*"].iter().any(|a| l.contains(&format!("{name}{a}")));
                (aliased
                    || l.match_indices(kind).any(|(at, _)| {
                        l[at + kind.len()..].starts_with(|c: char| c.is_ascii_uppercase())
                            && (at == 0 || !l[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
                    }))
                    && !home.iter().any(|h| f.starts_with(h))
            });
            if let Some((kind, _)) = named {
                found.push(format!("{f}:{}: {}", n + 1, kind.trim_end_matches("::")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} places name a kind outside its folder and the tables of kinds: say the fact as a method of the \
         kind's config (`crates/agenteval-core/src/config/`) or a function of its folder: {found:#?}",
        found.len()
    );
}

/// The variants of `pub enum NAME` in `src` (each at the enum's first indent, a capital first).
fn enum_variants(src: &str, name: &str) -> Vec<String> {
    let start = src.find(&format!("pub enum {name} {{")).unwrap_or_else(|| panic!("no `pub enum {name}`"));
    src[start..]
        .lines()
        .skip(1)
        .take_while(|l| *l != "}")
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| l.split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default().to_string())
        .collect()
}

/// The product files that name every variant of `name` (under any alias the file gives it):
/// the matches that list every kind, which the compiler sends a new kind to.
fn files_naming_every_kind(name: &str, variants: &[String]) -> Vec<String> {
    sources()
        .into_iter()
        .filter(|f| !is_test_file(f) && !f.ends_with("/testing.rs") && !f.starts_with("crates/agenteval-testkit/"))
        .filter(|f| {
            let code = product_code(f);
            let mut names = vec![name.to_string()];
            let alias = format!("{name} as ");
            names.extend(code.lines().filter_map(|l| {
                let at = l.find(&alias)?;
                Some(l[at + alias.len()..].trim_end_matches(';').trim().to_string())
            }));
            variants.iter().all(|v| names.iter().any(|n| code.contains(&format!("{n}::{v}"))))
        })
        .collect()
}

/// Each recipe that adds a kind names every file whose matches list every kind (so the
/// compiler lists no site the recipe leaves out) and only files that exist: a new exhaustive
/// match outside them, or a recipe left behind by a move, fails here.
#[test]
fn each_add_a_kind_recipe_names_every_file_that_matches_every_kind() {
    let doc = architecture();
    let recipes = &doc[doc.find("## Recipes").expect("a Recipes section")..];
    let recipe = |title: &str| -> String {
        let at = recipes.find(&format!("- **{title}**")).unwrap_or_else(|| panic!("no recipe `{title}`"));
        let rest = &recipes[at + 2..];
        rest[..rest.find("\n- **").unwrap_or(rest.len())].to_string()
    };
    let core = read("crates/agenteval-core/src/config/mod.rs") + &read("crates/agenteval-core/src/config/evaluator.rs");
    let mut problems = Vec::new();
    for (title, kind) in [
        ("Add an agent kind", "AgentConfig"),
        ("Add a benchmark", "BenchmarkConfig"),
        ("Add an evaluator", "EvaluatorConfig"),
    ] {
        let variants = enum_variants(&core, kind);
        assert!(variants.len() >= 5, "{kind}'s variants were not found: {variants:?}");
        let text = recipe(title);
        let named: BTreeSet<&str> = code_spans(&text).into_iter().filter(|s| s.starts_with("crates/")).collect();
        for f in files_naming_every_kind(kind, &variants) {
            if !named.contains(f.as_str()) {
                problems.push(format!("`{title}` does not name {f}, whose matches list every {kind}"));
            }
        }
        for f in named.iter().filter(|f| !f.contains('<')) {
            if !root().join(f).exists() {
                problems.push(format!("`{title}` names {f}, which does not exist"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
