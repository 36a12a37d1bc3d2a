//! The READMEs name only things that exist: every environment variable they show in code is read
//! by the library, the tools or the scripts (or is a C constant of the installed headers), every
//! flag of one of our tools is accepted by that tool, and every repository path exists.
//!
//! Nothing here is a list of what the READMEs may say: variables are checked against the names
//! the library's parsers actually look up (recorded at run time) and the string literals of the
//! sources, flags by running the tool, paths against the file system. A new variable, flag or
//! section documented together with its code passes without touching this test.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use hccl::base::env::EnvConfig;
use hccl::comm::world;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The documents checked, relative to the repository.
const DOCS: [&str; 2] = ["README.md", "tools/README.md"];

/// Our binaries, by name.
fn binary(name: &str) -> Option<&'static str> {
    Some(match name {
        "all_reduce_test" => env!("CARGO_BIN_EXE_all_reduce_test"),
        "all_gather_test" => env!("CARGO_BIN_EXE_all_gather_test"),
        "broadcast_test" => env!("CARGO_BIN_EXE_broadcast_test"),
        "reduce_scatter_test" => env!("CARGO_BIN_EXE_reduce_scatter_test"),
        "reduce_test" => env!("CARGO_BIN_EXE_reduce_test"),
        "alltoall_test" => env!("CARGO_BIN_EXE_alltoall_test"),
        "alltoallv_test" => env!("CARGO_BIN_EXE_alltoallv_test"),
        "scatter_test" => env!("CARGO_BIN_EXE_scatter_test"),
        "send_recv_test" => env!("CARGO_BIN_EXE_send_recv_test"),
        "barrier_test" => env!("CARGO_BIN_EXE_barrier_test"),
        "hccl_bench" => env!("CARGO_BIN_EXE_hccl_bench"),
        "hcclrun" => env!("CARGO_BIN_EXE_hcclrun"),
        "hccl_diag" => env!("CARGO_BIN_EXE_hccl_diag"),
        "hccl_plot" => env!("CARGO_BIN_EXE_hccl_plot"),
        "hccl_sim" => env!("CARGO_BIN_EXE_hccl_sim"),
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------
// Reading the documents.

/// One piece of code in a document: an inline span, a code-block line, or a heading (which
/// names the tool a section is about).
#[derive(Debug)]
struct Piece {
    doc: &'static str,
    line: usize,
    text: String,
    heading: bool,
}

/// The code of `doc` in document order: fenced and indented blocks line by line, inline spans
/// (which may wrap across lines), and headings.
fn pieces(doc: &'static str, text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut prose = String::new();
    let mut prose_line = 1;
    // Inline spans of a paragraph: every other part between backticks, at the line it starts.
    let flush = |prose: &mut String, first: usize, out: &mut Vec<Piece>| {
        let mut line = first;
        for (i, part) in prose.split('`').enumerate() {
            if i % 2 == 1 {
                out.push(Piece {
                    doc,
                    line,
                    text: part.replace('\n', " "),
                    heading: false,
                });
            }
            line += part.matches('\n').count();
        }
        prose.clear();
    };
    let mut prev_blank = true;
    for (i, l) in text.lines().enumerate() {
        let no = i + 1;
        if l.trim_start().starts_with("```") {
            flush(&mut prose, prose_line, &mut out);
            fenced = !fenced;
            prev_blank = false;
            continue;
        }
        let indented = !fenced && l.starts_with("    ") && (prev_blank || is_block(&out, no));
        if fenced || indented {
            flush(&mut prose, prose_line, &mut out);
            out.push(Piece {
                doc,
                line: no,
                text: l.to_string(),
                heading: false,
            });
        } else if l.starts_with('#') {
            flush(&mut prose, prose_line, &mut out);
            out.push(Piece {
                doc,
                line: no,
                text: l.trim_start_matches('#').to_string(),
                heading: true,
            });
        } else if l.trim().is_empty() {
            flush(&mut prose, prose_line, &mut out);
        } else {
            if prose.is_empty() {
                prose_line = no;
            }
            prose.push_str(l);
            prose.push('\n');
        }
        prev_blank = l.trim().is_empty();
    }
    flush(&mut prose, prose_line, &mut out);
    out
}

/// Whether line `no` continues an indented block (the previous piece is its line before).
fn is_block(out: &[Piece], no: usize) -> bool {
    out.last()
        .is_some_and(|p| p.line + 1 == no && p.text.starts_with("    "))
}

fn where_(p: &Piece) -> String {
    format!("{}:{}", p.doc, p.line)
}

// ---------------------------------------------------------------------------------------------
// Environment variables.

/// Words that look like environment variables: upper case, digits and `_`, at least one `_`.
/// A trailing `_*` or `_<…>` (a family, e.g. `HCCL_RDMA_*`, `NS_<rank>`) gives a prefix ending
/// in `_`.
fn env_words(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !word(b[i]) || (i > 0 && word(b[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && word(b[i]) {
            i += 1;
        }
        let w = &text[start..i];
        let upper = w
            .bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_');
        let family = w.ends_with('_') && i < b.len() && (b[i] == b'*' || b[i] == b'<');
        // Part of a hyphenated word (`H-D_R`) is no variable.
        let hyphenated = (start > 0 && b[start - 1] == b'-') || (i < b.len() && b[i] == b'-');
        if upper
            && !hyphenated
            && w.as_bytes()[0].is_ascii_uppercase()
            && w.contains('_')
            && (!w.ends_with('_') || family)
        {
            out.push(w.to_string());
        }
    }
    out
}

/// The variables the library's own parsers look up, recorded by running them.
fn library_lookups() -> BTreeSet<String> {
    let seen = std::sync::Mutex::new(BTreeSet::new());
    let record = |k: &str| {
        seen.lock().unwrap().insert(k.to_string());
    };
    let _ = EnvConfig::from_lookup(|k| {
        record(k);
        None
    });
    // The launcher's world, down each branch: no launcher, ours with a root address, torchrun
    // with and without MASTER_PORT, a launcher spanning hosts.
    let worlds: [&[(&str, &str)]; 5] = [
        &[],
        &[
            ("HCCL_RANK", "0"),
            ("HCCL_WORLD_SIZE", "2"),
            ("HCCL_ROOT_ADDR", "h:1"),
        ],
        &[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ],
        &[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")],
        &[("PMI_RANK", "0"), ("PMI_SIZE", "2")],
    ];
    for w in worlds {
        let _ = world::detect(&|k| {
            record(k);
            w.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        });
    }
    seen.into_inner().unwrap()
}

/// Every file under `dir` whose name ends with one of `exts`.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if !p.ends_with("target") {
                files(&p, exts, out);
            }
        } else if exts.iter().any(|x| p.to_string_lossy().ends_with(x)) {
            out.push(p);
        }
    }
}

/// Names that the code can read or define: string literals of the Rust sources that are exactly
/// a name, words of the installed headers (C constants), words of the scripts (and of `bench/`).
struct Sources {
    literals: BTreeSet<String>,
    headers: BTreeSet<String>,
    scripts: BTreeSet<String>,
    lookups: BTreeSet<String>,
}

impl Sources {
    fn load() -> Sources {
        let root = repo();
        let words_of = |paths: &[PathBuf]| -> BTreeSet<String> {
            paths
                .iter()
                .flat_map(|p| {
                    let t = std::fs::read_to_string(p).unwrap_or_default();
                    t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .filter(|w| !w.is_empty())
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let mut rust = Vec::new();
        for d in ["src", "tools/src", "ascendcl/src", "net-ofi/src"] {
            files(&root.join(d), &[".rs"], &mut rust);
        }
        let mut literals = BTreeSet::new();
        for p in &rust {
            let t = std::fs::read_to_string(p).unwrap();
            for (i, part) in t.split('"').enumerate() {
                if i % 2 == 1 && !part.is_empty() && env_words(part).concat() == part {
                    literals.insert(part.to_string());
                }
            }
        }
        let mut headers = Vec::new();
        files(&root.join("include"), &[".h"], &mut headers);
        let mut scripts = Vec::new();
        files(&root.join("scripts"), &[".sh"], &mut scripts);
        // The comparison programs and their build script read variables too.
        files(&root.join("bench"), &[".sh", ".c"], &mut scripts);
        // The net plugin's C shim names libfabric's constants.
        files(&root.join("net-ofi/csrc"), &[".c"], &mut scripts);
        scripts.push(root.join(".ci/run"));
        Sources {
            literals,
            headers: words_of(&headers),
            scripts: words_of(&scripts),
            lookups: library_lookups(),
        }
    }

    /// Whether `name` (a prefix when it ends in `_`) is something the code knows.
    fn knows(&self, name: &str) -> bool {
        let sets = [&self.lookups, &self.literals, &self.headers, &self.scripts];
        if name.ends_with('_') {
            sets.iter()
                .any(|s| s.iter().any(|w| w.starts_with(name) && w != name))
                || self.scripts.contains(name)
        } else {
            // A script that prints a numbered family (`IP_$i`) defines `IP_0`, `IP_1`, …
            let numbered = name.rsplit_once('_').is_some_and(|(stem, n)| {
                n.bytes().all(|c| c.is_ascii_digit()) && self.scripts.contains(&format!("{stem}_"))
            });
            numbered || sets.iter().any(|s| s.contains(name))
        }
    }
}

/// Variables of other programs the READMEs mention (the dynamic loader's, torch's, libfabric's):
/// not ours to read.
const FOREIGN_VARS: [&str; 6] = [
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "TORCH_DISTRIBUTED_DEBUG",
    "TORCH_FR_BUFFER_SIZE",
    "FI_VERBS_IFACE",
    "FI_TCP_IFACE",
];

fn check_env(all: &[Piece], src: &Sources) -> Vec<String> {
    let mut bad = Vec::new();
    for p in all.iter().filter(|p| !p.heading) {
        for w in env_words(&p.text) {
            if !FOREIGN_VARS.contains(&w.as_str()) && !src.knows(&w) {
                bad.push(format!(
                    "{}: `{w}` is read by no code (library, tools, scripts) and is no C constant",
                    where_(p)
                ));
            }
        }
    }
    bad
}

// ---------------------------------------------------------------------------------------------
// Tool flags.

#[derive(Clone, Debug, PartialEq)]
enum Owner {
    /// No tool of ours (a system command, `cargo`, `mpirun`, a program run by `hcclrun`).
    Foreign,
    Binary(&'static str, &'static str),
    Script(PathBuf),
}

/// A tool name in `tok`: a binary of ours by name or path, or one of our scripts.
fn owner_of(tok: &str) -> Option<Owner> {
    let base = tok.rsplit('/').next().unwrap_or(tok);
    if let Some(b) = binary(base) {
        let name: &'static str = Box::leak(base.to_string().into_boxed_str());
        return Some(Owner::Binary(name, b));
    }
    let script = if base.ends_with(".sh") || base.ends_with(".py") {
        repo().join("scripts").join(base)
    } else if tok == ".ci/run" {
        repo().join(tok)
    } else {
        return None;
    };
    script.is_file().then_some(Owner::Script(script))
}

fn is_flag(tok: &str) -> bool {
    let t = tok.trim_start_matches('-');
    (tok.starts_with('-') && tok.len() > 1 && tok != "--")
        && t.starts_with(|c: char| c.is_ascii_alphabetic())
        && t.split('=')
            .next()
            .unwrap()
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Splits code into words, dropping the brackets and punctuation of usage synopses.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| "[](),;:.…|".contains(c) && c != '-')
                .to_string()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// (owner, flag, the word after it) for every flag of one of our tools in the documents. A
/// piece that starts with a flag continues the binary the section is about: the one its heading
/// names, or the last one shown with arguments since (a piece that only names a tool is a
/// mention, not a command line). A piece that starts with another command is that command's
/// until one of our tools is named; after `hcclrun`'s `--`, or the program it runs, the words
/// are the program's.
fn flags(all: &[Piece]) -> Vec<(Owner, String, Option<String>, String)> {
    let mut out = Vec::new();
    let mut current = Owner::Foreign;
    for p in all {
        let ws = words(&p.text);
        if p.heading {
            current = ws
                .iter()
                .find_map(|w| owner_of(w))
                .unwrap_or(Owner::Foreign);
            continue;
        }
        let mut owner = match ws.first() {
            Some(w) if is_flag(w) && matches!(current, Owner::Binary(..)) => current.clone(),
            _ => Owner::Foreign,
        };
        let mention = ws.len() == 1;
        for (i, w) in ws.iter().enumerate() {
            if let Some(o) = owner_of(w) {
                owner = o.clone();
                if !mention {
                    current = o;
                }
                continue;
            }
            let in_hcclrun = matches!(owner, Owner::Binary("hcclrun", _));
            if w == "--" && in_hcclrun {
                owner = Owner::Foreign;
                continue;
            }
            if is_flag(w) {
                let flag = w.split('=').next().unwrap().to_string();
                let value = ws.get(i + 1).filter(|v| !v.starts_with('-')).cloned();
                if owner != Owner::Foreign {
                    out.push((owner.clone(), flag, value, where_(p)));
                }
            } else if in_hcclrun {
                // A word that is not the value of hcclrun's previous flag is its program.
                let prev_takes_value = i > 0 && is_flag(&ws[i - 1]) && ws[i - 1] != "--no-prefix";
                if !prev_takes_value {
                    owner = Owner::Foreign;
                }
            }
        }
    }
    out
}

/// Whether `bin` accepts `flag`: our parsers read flags in order and stop at `--help`, so
/// `bin FLAG [VALUE] --help --help` exits 0 exactly when FLAG (with a valid VALUE) was accepted.
/// The second `--help` keeps a flag that takes a value and got none from swallowing the only
/// one and starting a real run.
fn accepts(bin: &str, flag: &str, value: Option<&str>) -> bool {
    let mut values: Vec<Option<&str>> = vec![None];
    values.extend(value.map(Some));
    values.extend(
        [
            "1",
            "8",
            "64",
            "fp32",
            "sum",
            "bus",
            "memory",
            "allreduce",
            "x",
        ]
        .map(Some),
    );
    values.into_iter().any(|v| {
        let mut c = Command::new(bin);
        c.arg(flag);
        if let Some(v) = v {
            c.arg(v);
        }
        c.args(["--help", "--help"])
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Whether a script handles `flag`: the flag appears in its text as a whole word.
fn script_has(script: &Path, flag: &str) -> bool {
    let text = std::fs::read_to_string(script).unwrap_or_default();
    text.match_indices(flag).any(|(i, _)| {
        let after = text[i + flag.len()..].chars().next();
        let before = text[..i].chars().next_back();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

fn check_flags(all: &[Piece]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut done = BTreeSet::new();
    for (owner, flag, value, at) in flags(all) {
        let ok = match &owner {
            Owner::Binary(name, bin) => {
                if !done.insert((name.to_string(), flag.clone())) {
                    continue;
                }
                accepts(bin, &flag, value.as_deref())
            }
            Owner::Script(s) => script_has(s, &flag),
            Owner::Foreign => true,
        };
        if !ok {
            bad.push(format!("{at}: {owner:?} does not accept `{flag}`"));
        }
    }
    bad
}

// ---------------------------------------------------------------------------------------------
// Paths.

/// Words that name a file or directory of the repository: made of path characters, with a `/`,
/// and either a known extension, a trailing `/`, or a first component that is a top-level entry
/// of the repository. Placeholders (`PREFIX/…`, `$VAR/…`, `<…>`), absolute paths, paths outside
/// the repository (`../…`) and build output (`target/…`) are not checked.
fn repo_paths(text: &str) -> Vec<String> {
    const EXTS: [&str; 10] = [
        ".rs", ".sh", ".c", ".cc", ".cpp", ".h", ".png", ".md", ".toml", ".py",
    ];
    let top: BTreeSet<String> = std::fs::read_dir(repo())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| "`'\"()[],;:".contains(c)))
        .filter(|w| {
            w.contains('/')
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
                && !w.starts_with('/')
                && !w.starts_with("..")
                && !w.starts_with("target/")
                && !w.starts_with('-')
                && !w
                    .split('/')
                    .next()
                    .unwrap()
                    .chars()
                    .all(|c| c.is_ascii_uppercase())
        })
        .filter(|w| {
            EXTS.iter().any(|x| w.ends_with(x))
                || w.ends_with('/')
                || top.contains(w.split('/').next().unwrap())
        })
        .map(str::to_string)
        .collect()
}

fn check_paths(all: &[Piece]) -> Vec<String> {
    let root = repo();
    let mut bad = Vec::new();
    for p in all.iter().filter(|p| !p.heading) {
        let dir = root.join(p.doc).parent().unwrap().to_path_buf();
        for w in repo_paths(&p.text) {
            let found = [&dir, &root, &root.join("include")]
                .iter()
                .any(|base| base.join(&w).exists());
            if !found {
                bad.push(format!("{}: path `{w}` does not exist", where_(p)));
            }
        }
    }
    bad
}

// ---------------------------------------------------------------------------------------------

fn all_pieces() -> Vec<Piece> {
    DOCS.iter()
        .flat_map(|d| {
            let text = std::fs::read_to_string(repo().join(d)).unwrap();
            pieces(d, &text)
        })
        .collect()
}

#[test]
fn readme_variables_exist() {
    let src = Sources::load();
    // The recorder works: the library's parser reads these.
    for v in [
        "HCCL_BUFFSIZE",
        "HCCL_ALGO",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
    ] {
        assert!(
            src.lookups.contains(v),
            "{v} not recorded: {:?}",
            src.lookups
        );
    }
    let bad = check_env(&all_pieces(), &src);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn readme_flags_exist() {
    let all = all_pieces();
    let found = flags(&all);
    // The reader finds flags of several tools (so an empty result cannot pass silently).
    for tool in [
        "all_reduce_test",
        "hcclrun",
        "hccl_diag",
        "hccl_plot",
        "hccl_sim",
    ] {
        assert!(
            found
                .iter()
                .any(|(o, ..)| matches!(o, Owner::Binary(n, _) if *n == tool)),
            "no flag of {tool} found in the READMEs"
        );
    }
    let bad = check_flags(&all);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn readme_paths_exist() {
    let all = all_pieces();
    let n: usize = all.iter().map(|p| repo_paths(&p.text).len()).sum();
    assert!(n > 10, "only {n} repository paths found in the READMEs");
    let bad = check_paths(&all);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The checks reject what does not exist (so they can fail).
#[test]
fn checks_reject_what_does_not_exist() {
    let doc = "Set `HCCL_NO_SUCH_VARIABLE=1`, run `hcclrun -n 2 --no-such-flag -- x` and \
               `all_reduce_test -b 8 --bogus`, then read `src/no/such_file.rs`; \
               `scripts/netns.sh up 2 --no-such-option`.\n";
    let all = pieces("fake.md", doc);
    let src = Sources::load();
    let env = check_env(&all, &src);
    assert!(
        env.len() == 1 && env[0].contains("HCCL_NO_SUCH_VARIABLE"),
        "{env:?}"
    );
    let fl = check_flags(&all);
    assert!(
        fl.len() == 3
            && fl[0].contains("--no-such-flag")
            && fl[1].contains("--bogus")
            && fl[2].contains("--no-such-option"),
        "{fl:?}"
    );
    let pa = check_paths(&all);
    assert!(
        pa.len() == 1 && pa[0].contains("src/no/such_file.rs"),
        "{pa:?}"
    );
}
