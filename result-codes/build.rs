//! Derives everything else from the literal enums of `src/table.rs` (see the comment there):
//! writes `$OUT_DIR/derived.rs`, which `src/lib.rs` includes.
//!
//! The parser is deliberately strict — one doc line, then one `NAME = value,` line per code — so
//! that a table edit it does not understand fails the build instead of being half-read.

use std::fmt::Write as _;
use std::path::PathBuf;

struct Row {
    name: String,
    value: i64,
    doc: String,
}

struct Table {
    hccl: Vec<Row>,
    acl: Vec<Row>,
    /// (alias, target, doc)
    acl_aliases: Vec<(String, String, String)>,
}

fn parse(text: &str) -> Table {
    let mut t = Table {
        hccl: Vec::new(),
        acl: Vec::new(),
        acl_aliases: Vec::new(),
    };
    let mut section: Option<&str> = None;
    let mut doc: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let fail = |why: &str| -> ! { panic!("src/table.rs:{}: {why}: {raw:?}", i + 1) };
        if let Some(d) = line.strip_prefix("///") {
            if doc.is_some() {
                fail("one doc line per item");
            }
            doc = Some(d.trim().to_string());
            continue;
        }
        match section {
            None => {
                if line == "pub enum HcclResult {" {
                    section = Some("hccl");
                    doc = None;
                } else if line == "pub enum AclCode {" {
                    section = Some("acl");
                    doc = None;
                } else if let Some(rest) = line.strip_prefix("pub const ") {
                    // `pub const ALIAS: AclCode = AclCode::TARGET;`
                    let (alias, rest) = rest
                        .split_once(": AclCode = AclCode::")
                        .unwrap_or_else(|| fail("expected an AclCode alias"));
                    let target = rest
                        .strip_suffix(';')
                        .unwrap_or_else(|| fail("missing ';'"));
                    let d = doc
                        .take()
                        .unwrap_or_else(|| fail("alias without a doc line"));
                    t.acl_aliases
                        .push((alias.to_string(), target.to_string(), d));
                } else if line.is_empty() || line.starts_with("//") || line.starts_with("#[") {
                    doc = None;
                } else {
                    fail("unexpected line outside the enums");
                }
            }
            Some(which) => {
                if line == "}" {
                    section = None;
                    continue;
                }
                let (name, value) = line
                    .strip_suffix(',')
                    .and_then(|l| l.split_once(" = "))
                    .unwrap_or_else(|| fail("expected `NAME = value,`"));
                let value: i64 = value
                    .parse()
                    .unwrap_or_else(|_| fail("value is not an integer"));
                let d = doc
                    .take()
                    .unwrap_or_else(|| fail("code without a doc line"));
                if d.is_empty() || d.contains('"') || d.contains('\\') {
                    fail("the doc line must be a plain, non-empty description");
                }
                let row = Row {
                    name: name.to_string(),
                    value,
                    doc: d,
                };
                if which == "hccl" {
                    t.hccl.push(row)
                } else {
                    t.acl.push(row)
                }
            }
        }
    }
    assert!(section.is_none(), "src/table.rs: unterminated enum");
    assert!(
        !t.hccl.is_empty() && !t.acl.is_empty(),
        "src/table.rs: both enums are required"
    );
    for (alias, target, _) in &t.acl_aliases {
        assert!(
            t.acl.iter().any(|r| &r.name == target),
            "alias {alias} of unknown code {target}"
        );
    }
    t
}

/// `HCCL_E_OPEN_FILE_FAILURE` → `OpenFile`: CamelCase of the part after `HCCL_E_`, without a
/// trailing `_FAILURE` (the kind names the failure already).
fn kind_name(c_name: &str) -> Option<String> {
    let rest = c_name.strip_prefix("HCCL_E_")?;
    if rest == "RESERVED" {
        return None;
    }
    let rest = rest.strip_suffix("_FAILURE").unwrap_or(rest);
    Some(
        rest.split('_')
            .map(|w| {
                let mut c = w.chars();
                let first = c.next().expect("empty word").to_ascii_uppercase();
                std::iter::once(first)
                    .chain(c.map(|x| x.to_ascii_lowercase()))
                    .collect::<String>()
            })
            .collect(),
    )
}

/// Writes `/// doc` and `pub const fn sig { match scrutinee { arms } }`.
fn method(o: &mut String, doc: &str, sig: &str, scrutinee: &str, arms: &[String]) {
    writeln!(
        o,
        "    /// {doc}\n    pub const fn {sig} {{\n        match {scrutinee} {{"
    )
    .unwrap();
    for a in arms {
        writeln!(o, "            {a},").unwrap();
    }
    writeln!(o, "        }}\n    }}").unwrap();
}

/// Writes `/// doc` and `pub const NAME: [TY; n] = [items];`.
fn list(o: &mut String, doc: &str, name: &str, ty: &str, items: &[String]) {
    writeln!(
        o,
        "    /// {doc}\n    pub const {name}: [{ty}; {}] = [",
        items.len()
    )
    .unwrap();
    for i in items {
        writeln!(o, "        {i},").unwrap();
    }
    writeln!(o, "    ];").unwrap();
}

fn generate(t: &Table) -> String {
    let mut o = String::new();
    let kinds: Vec<(String, &Row)> = t
        .hccl
        .iter()
        .filter_map(|r| kind_name(&r.name).map(|k| (k, r)))
        .collect();
    let each = |f: &dyn Fn(&Row) -> String| t.hccl.iter().map(f).collect::<Vec<_>>();
    let each_kind =
        |f: &dyn Fn(&str, &Row) -> String| kinds.iter().map(|(k, r)| f(k, r)).collect::<Vec<_>>();
    let each_acl = |f: &dyn Fn(&Row) -> String| t.acl.iter().map(f).collect::<Vec<_>>();

    o.push_str("impl HcclResult {\n");
    list(
        &mut o,
        "Every code, in table order.",
        "ALL",
        "HcclResult",
        &each(&|r| format!("HcclResult::{}", r.name)),
    );
    let mut from_raw = each(&|r| format!("{} => Some(HcclResult::{})", r.value, r.name));
    from_raw.push("_ => None".into());
    method(
        &mut o,
        "The code whose value is `raw`, if any.",
        "from_raw(raw: u32) -> Option<HcclResult>",
        "raw",
        &from_raw,
    );
    method(
        &mut o,
        "The C name, e.g. `HCCL_E_PARA`.",
        "name(self) -> &'static str",
        "self",
        &each(&|r| format!("HcclResult::{0} => \"{0}\"", r.name)),
    );
    method(
        &mut o,
        "The description `HcclGetErrorString` returns.",
        "describe(self) -> &'static ::std::ffi::CStr",
        "self",
        &each(&|r| format!("HcclResult::{} => c\"{}\"", r.name, r.doc)),
    );
    let mut kind = each_kind(&|k, r| format!("HcclResult::{} => Some(ErrorKind::{k})", r.name));
    kind.push("_ => None".into());
    method(
        &mut o,
        "The internal error kind of this code (`None` for success and the reserved value).",
        "kind(self) -> Option<ErrorKind>",
        "self",
        &kind,
    );
    o.push_str("}\n\n");

    o.push_str(
        "/// Category of an internal error: one per error code of [`HcclResult`], same value.\n",
    );
    o.push_str(
        "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]\n#[repr(u32)]\npub enum ErrorKind {\n",
    );
    for (k, r) in &kinds {
        writeln!(
            o,
            "    /// {} (`{}`).\n    {k} = {},",
            r.doc, r.name, r.value
        )
        .unwrap();
    }
    o.push_str("}\n\nimpl ErrorKind {\n");
    list(
        &mut o,
        "Every kind, in table order.",
        "ALL",
        "ErrorKind",
        &each_kind(&|k, _| format!("ErrorKind::{k}")),
    );
    o.push_str("    /// The `HcclResult` value of this kind.\n");
    o.push_str("    pub const fn code(self) -> u32 {\n        self as u32\n    }\n");
    method(
        &mut o,
        "The C result code of this kind.",
        "result(self) -> HcclResult",
        "self",
        &each_kind(&|k, r| format!("ErrorKind::{k} => HcclResult::{}", r.name)),
    );
    method(
        &mut o,
        "The kind whose code is `raw`, if any.",
        "from_code(raw: u32) -> Option<ErrorKind>",
        "HcclResult::from_raw(raw)",
        &["Some(r) => r.kind()".into(), "None => None".into()],
    );
    method(
        &mut o,
        "The description of this kind's code.",
        "describe(self) -> &'static str",
        "self",
        &each_kind(&|k, r| format!("ErrorKind::{k} => \"{}\"", r.doc)),
    );
    o.push_str("}\n\nimpl From<ErrorKind> for HcclResult {\n");
    o.push_str("    fn from(k: ErrorKind) -> HcclResult {\n        k.result()\n    }\n}\n\n");

    o.push_str("impl AclCode {\n");
    list(
        &mut o,
        "Every code, in table order.",
        "ALL",
        "AclCode",
        &each_acl(&|r| format!("AclCode::{}", r.name)),
    );
    let mut from_raw = each_acl(&|r| format!("{} => Some(AclCode::{})", r.value, r.name));
    from_raw.push("_ => None".into());
    method(
        &mut o,
        "The code whose value is `raw`, if any.",
        "from_raw(raw: i32) -> Option<AclCode>",
        "raw",
        &from_raw,
    );
    method(
        &mut o,
        "The C name, e.g. `ACL_ERROR_INVALID_PARAM`.",
        "name(self) -> &'static str",
        "self",
        &each_acl(&|r| format!("AclCode::{0} => \"{0}\"", r.name)),
    );
    method(
        &mut o,
        "The description of this code.",
        "describe(self) -> &'static str",
        "self",
        &each_acl(&|r| format!("AclCode::{} => \"{}\"", r.name, r.doc)),
    );
    o.push_str("    /// The `aclError` value.\n");
    o.push_str("    pub const fn value(self) -> i32 {\n        self as i32\n    }\n}\n\n");

    o.push_str(
        "/// Names that are aliases of a code: (alias, code, description), in table order.\n",
    );
    writeln!(
        o,
        "pub const ACL_ALIASES: [(&str, AclCode, &str); {}] = [",
        t.acl_aliases.len()
    )
    .unwrap();
    for (alias, target, doc) in &t.acl_aliases {
        writeln!(o, "    (\"{alias}\", AclCode::{target}, \"{doc}\"),").unwrap();
    }
    o.push_str("];\n\n");
    o.push_str(
        "/// The `aclError` values under their C names (aliases included).\npub mod acl {\n",
    );
    for r in &t.acl {
        writeln!(
            o,
            "    /// {}\n    pub const {}: i32 = {};",
            r.doc, r.name, r.value
        )
        .unwrap();
        for (alias, _, doc) in t.acl_aliases.iter().filter(|a| a.1 == r.name) {
            writeln!(
                o,
                "    /// {doc}\n    pub const {alias}: i32 = {};",
                r.value
            )
            .unwrap();
        }
    }
    o.push_str("}\n");
    o
}

fn main() {
    println!("cargo:rerun-if-changed=src/table.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string("src/table.rs").expect("read src/table.rs");
    let table = parse(&text);
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("derived.rs");
    std::fs::write(out, generate(&table)).expect("write derived.rs");
}
