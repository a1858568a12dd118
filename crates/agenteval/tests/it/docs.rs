//! The commands that README.md and docs/ quote exist: every `cargo …` names a package and a
//! target of this workspace, every `agenteval …` a subcommand and flags the binary accepts, and
//! every config file they pass is in the repository. Cheap (`--help` and `cargo metadata`), so
//! the docs cannot drift from the code unnoticed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{repo, text};

/// Code in a markdown file: every line of a fenced block, and every inline code span.
fn code_snippets(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            out.push(line.to_string());
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let Some(code) = parts.next() {
            out.push(code.to_string());
            parts.next();
        }
    }
    out
}

/// The commands quoted in the docs: (file, command line starting with `cargo` or `agenteval`).
fn quoted_commands() -> Vec<(String, String)> {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut out = Vec::new();
    for f in files {
        let md = std::fs::read_to_string(&f).unwrap();
        for snippet in code_snippets(&md) {
            let s = snippet.trim().trim_start_matches("$ ").trim();
            // Commands may follow a `VAR=value` prefix.
            let s = s.split_whitespace().skip_while(|w| w.contains('=') && !w.starts_with('-')).collect::<Vec<_>>();
            // A command's next word is a subcommand or a flag, not prose (`agenteval version, …`).
            let command_like =
                s.get(1).is_some_and(|w| w.starts_with('-') || w.chars().all(|c| c.is_ascii_lowercase() || c == '-'));
            if matches!(s.first(), Some(&"cargo") | Some(&"agenteval")) && command_like {
                out.push((f.file_name().unwrap().to_string_lossy().into_owned(), s.join(" ")));
            }
        }
    }
    out
}

/// Package name → target names, per kind (`bench`, `test`, `bin`).
fn workspace_targets() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut map = BTreeMap::new();
    for p in v["packages"].as_array().unwrap() {
        let mut kinds: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for t in p["targets"].as_array().unwrap() {
            for k in t["kind"].as_array().unwrap() {
                kinds.entry(k.as_str().unwrap().to_string()).or_default().insert(t["name"].as_str().unwrap().into());
            }
        }
        map.insert(p["name"].as_str().unwrap().to_string(), kinds);
    }
    map
}

fn help(path: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_agenteval")).args(path).arg("--help").output().unwrap();
    assert!(out.status.success(), "agenteval {} --help: {}", path.join(" "), text(&out.stderr));
    text(&out.stdout)
}

/// The subcommands a help text lists.
fn subcommands(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Checks an `agenteval …` command: its subcommands exist, its flags are accepted, its config
/// file is in the repository. Returns a problem, if any.
fn check_agenteval(words: &[&str]) -> Option<String> {
    // Placeholders and prose end the command: `RUN`, `<run_id>`, `[--json]`, `…`, `#`.
    let words: Vec<&str> = words
        .iter()
        .skip(1)
        .take_while(|w| !w.starts_with(['[', '<', '#', '|', '(', '…']) && !w.contains('…'))
        .copied()
        .collect();
    let mut path: Vec<&str> = Vec::new();
    let mut commands = subcommands(&help(&[]));
    for w in &words {
        // Hidden commands (`worker`) are not listed but answer `--help`.
        let hidden = || {
            path.is_empty()
                && !w.starts_with('-')
                && Command::new(env!("CARGO_BIN_EXE_agenteval")).args([*w, "--help"]).output().unwrap().status.success()
        };
        if commands.contains(*w) || hidden() {
            path.push(w);
            commands = subcommands(&help(&path));
        } else {
            break;
        }
    }
    if path.is_empty() {
        return words.first().map(|w| format!("`{w}` is not an agenteval command"));
    }
    let shown = help(&path);
    for (i, w) in words.iter().enumerate() {
        let flag = w.split('=').next().unwrap();
        if flag.starts_with("--") && !shown.contains(flag) {
            return Some(format!("`agenteval {}` has no flag {flag}", path.join(" ")));
        }
        if *w == "--config"
            && let Some(file) = words.get(i + 1)
            && file.starts_with("configs/")
            && !repo().join(file).is_file()
        {
            return Some(format!("{file} does not exist"));
        }
    }
    None
}

fn check_cargo(words: &[&str], targets: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Option<String> {
    if let Some(dd) = words.iter().position(|w| *w == "--") {
        let mut rest = vec!["agenteval"];
        rest.extend(&words[dd + 1..]);
        return check_agenteval(&rest);
    }
    let arg = |flag: &str| words.iter().position(|w| *w == flag).and_then(|i| words.get(i + 1)).copied();
    let package = match arg("-p").or(arg("--package")) {
        Some(p) => match targets.get(p) {
            Some(t) => Some(t),
            None => return Some(format!("no package {p} in the workspace")),
        },
        None => None,
    };
    for (flag, kind) in [("--bench", "bench"), ("--test", "test"), ("--bin", "bin")] {
        if let Some(name) = arg(flag) {
            let found = match package {
                Some(p) => p.get(kind).is_some_and(|names| names.contains(name)),
                None => targets.values().any(|p| p.get(kind).is_some_and(|names| names.contains(name))),
            };
            if !found {
                return Some(format!(
                    "no {kind} target {name}{}",
                    arg("-p").map(|p| format!(" in {p}")).unwrap_or_default()
                ));
            }
        }
    }
    None
}

#[test]
fn every_command_the_docs_quote_exists() {
    let commands = quoted_commands();
    assert!(commands.iter().any(|(_, c)| c.starts_with("cargo bench")), "found no cargo commands: {commands:?}");
    assert!(commands.iter().any(|(_, c)| c.starts_with("agenteval submit")), "found no agenteval commands");
    let targets = workspace_targets();
    let mut problems = Vec::new();
    for (file, cmd) in &commands {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let problem = if words[0] == "cargo" { check_cargo(&words, &targets) } else { check_agenteval(&words) };
        if let Some(p) = problem {
            problems.push(format!("{file}: `{cmd}`: {p}"));
        }
    }
    assert!(problems.is_empty(), "commands in the docs that do not exist:\n{}", problems.join("\n"));
}

#[test]
fn the_checker_catches_a_wrong_name() {
    let targets = workspace_targets();
    let words = |s: &'static str| s.split_whitespace().collect::<Vec<_>>();
    assert!(check_cargo(&words("cargo bench -p agenteval-aws --bench aws"), &targets).is_some());
    assert!(check_cargo(&words("cargo bench -p agenteval --bench nope"), &targets).is_some());
    assert!(check_cargo(&words("cargo bench -p agenteval --bench fleet"), &targets).is_none());
    assert!(check_agenteval(&words("agenteval submit --colour red")).is_some());
    assert!(check_agenteval(&words("agenteval frobnicate")).is_some());
    assert!(check_agenteval(&words("agenteval submit --config configs/missing.yaml")).is_some());
    assert!(check_agenteval(&words("agenteval runs show RUN --tasks")).is_none());
    assert!(Path::new(&repo()).join("README.md").is_file());
}

/// The flags a help text defines (its `Options:` lines).
fn defined_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Options:"))
        .filter(|l| l.trim_start().starts_with('-'))
        .flat_map(|l| {
            // The definition ends where its description starts: the first word that is neither
            // a flag nor a value name.
            l.split_whitespace()
                .map(|w| w.trim_end_matches(','))
                .take_while(|w| w.starts_with('-') || w.starts_with('<') || w.starts_with('['))
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(|w| w.split('=').next().unwrap_or(w).trim_end_matches('.').to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The `--flags` a help text's prose mentions.
fn mentioned_flags(help: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in help.match_indices("--") {
        let rest = &help[i + 2..];
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        let before = help[..i].chars().last();
        // A flag starts a word (not `a--b`, not a `---` rule).
        if !name.is_empty()
            && name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            out.insert(format!("--{}", name.trim_end_matches('-')));
        }
    }
    out
}

/// Every `--flag` a `--help` text mentions is one that some command of this binary defines:
/// help that names a flag nobody has (`--token` once, in `ui --help`) sends users nowhere.
#[test]
fn every_flag_a_help_text_mentions_exists() {
    let mut helps: Vec<(String, String)> = Vec::new();
    let mut stack: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = stack.pop() {
        let words: Vec<&str> = path.iter().map(String::as_str).collect();
        let h = help(&words);
        for sub in subcommands(&h) {
            if sub != "help" {
                let mut p = path.clone();
                p.push(sub);
                stack.push(p);
            }
        }
        helps.push((path.join(" "), h));
    }
    assert!(helps.len() > 20, "the command tree was not walked: {}", helps.len());
    let defined: BTreeSet<String> = helps.iter().flat_map(|(_, h)| defined_flags(h)).collect();
    assert!(defined.contains("--config") && defined.contains("--cassette-mode"), "{defined:?}");
    let mut wrong = Vec::new();
    for (path, h) in &helps {
        for flag in mentioned_flags(h) {
            if !defined.contains(&flag) {
                wrong.push(format!("agenteval {path} --help mentions {flag}"));
            }
        }
    }
    assert!(wrong.is_empty(), "flags no command has: {wrong:#?}");
}

#[test]
fn the_flag_finders_read_definitions_and_prose() {
    let h = "Usage: x\n\nOptions:\n  -c, --config <FILE>  The config; see --set and a---rule\n      --no-token\n  -v, --verbose...  More\n";
    let defined = BTreeSet::from(["--config".to_string(), "--no-token".to_string(), "--verbose".to_string()]);
    assert_eq!(defined_flags(h), defined);
    assert_eq!(mentioned_flags(h), BTreeSet::from(["--config", "--no-token", "--set", "--verbose"].map(String::from)));
}
