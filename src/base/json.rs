//! A small, strict JSON (RFC 8259) parser and writer.
//!
//! Used for configuration input (rank tables) and machine-readable output (benchmarks), so it
//! favours precise error messages and exact round-trips over speed. Numbers keep their original
//! literal text so that 64-bit integers survive a parse/write cycle without passing through `f64`.

use std::collections::HashSet;
use std::fmt;

use crate::base::error::{Error, Result};

/// Maximum nesting depth of arrays/objects; bounds recursion so hostile input cannot overflow
/// the stack.
pub const MAX_DEPTH: usize = 128;

/// A parsed JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, stored as its literal text (e.g. `"-12"`, `"1.5e3"`). Use [`Json::as_f64`],
    /// [`Json::as_u64`] or [`Json::as_i64`] to read it. Build one with `Json::from(...)`;
    /// a hand-made literal that is not valid JSON is written out as `null`.
    Number(String),
    /// A string (escapes already decoded).
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object; members keep their document order. Parsed objects never hold duplicate keys.
    Object(Vec<(String, Json)>),
}

/// Parses a complete JSON document.
///
/// Errors are [`ErrorKind::Para`](crate::base::error::ErrorKind::Para) and name the line and
/// column (1-based, columns counted in characters) and what was expected there. A leading
/// UTF-8 byte-order mark is ignored (RFC 8259 §8.1 allows this); anything after the value other
/// than whitespace is rejected.
pub fn parse(text: &str) -> Result<Json> {
    let mut p = Parser {
        src: text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    if text.starts_with('\u{feff}') {
        p.pos = '\u{feff}'.len_utf8();
    }
    p.skip_ws();
    let value = p.parse_value(0)?;
    p.skip_ws();
    if p.pos != p.bytes.len() {
        return Err(p.expected("end of input"));
    }
    Ok(value)
}

impl Json {
    /// Member `key` of an object (`None` for non-objects or a missing key).
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string content, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// The boolean, if this is `true`/`false`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The members in document order, if this is an object.
    pub fn as_object(&self) -> Option<&[(String, Json)]> {
        match self {
            Json::Object(members) => Some(members),
            _ => None,
        }
    }

    /// The literal text of a number.
    pub fn number_text(&self) -> Option<&str> {
        match self {
            Json::Number(s) => Some(s),
            _ => None,
        }
    }

    /// The number as `f64`; `None` for non-numbers and for literals outside `f64` range.
    pub fn as_f64(&self) -> Option<f64> {
        let v: f64 = self.number_text()?.parse().ok()?;
        v.is_finite().then_some(v)
    }

    /// The number as `u64` if it denotes a non-negative integer exactly representable as one.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_integer().and_then(|v| u64::try_from(v).ok())
    }

    /// The number as `i64` if it denotes an integer exactly representable as one.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_integer().and_then(|v| i64::try_from(v).ok())
    }

    /// Integer value of a number literal. Plain integer literals are parsed exactly; literals
    /// with a fraction or exponent (`1e3`, `2.0`) are accepted only when integral and within
    /// 2^53, where `f64` is still exact.
    fn as_integer(&self) -> Option<i128> {
        let text = self.number_text()?;
        if !text.contains(['.', 'e', 'E']) {
            return text.parse().ok();
        }
        let v = self.as_f64()?;
        const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
        (v.fract() == 0.0 && v.abs() <= EXACT).then_some(v as i128)
    }

    /// Compact rendering: no whitespace between tokens.
    pub fn to_string_compact(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, None, 0);
        out
    }

    /// Human-readable rendering with two-space indentation and no trailing newline.
    pub fn to_string_pretty(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, Some(2), 0);
        out
    }

    fn write(&self, out: &mut String, indent: Option<usize>, level: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            // A caller-built literal could be anything; never emit invalid JSON.
            Json::Number(s) if is_number_literal(s) => out.push_str(s),
            Json::Number(_) => out.push_str("null"),
            Json::String(s) => write_string(out, s),
            Json::Array(items) => {
                if items.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline(out, indent, level + 1);
                    item.write(out, indent, level + 1);
                }
                newline(out, indent, level);
                out.push(']');
            }
            Json::Object(members) => {
                if members.is_empty() {
                    out.push_str("{}");
                    return;
                }
                out.push('{');
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline(out, indent, level + 1);
                    write_string(out, key);
                    out.push(':');
                    if indent.is_some() {
                        out.push(' ');
                    }
                    value.write(out, indent, level + 1);
                }
                newline(out, indent, level);
                out.push('}');
            }
        }
    }
}

/// Compact rendering, so `value.to_string()` yields valid JSON.
impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_compact())
    }
}

impl From<bool> for Json {
    fn from(v: bool) -> Json {
        Json::Bool(v)
    }
}

impl From<&str> for Json {
    fn from(v: &str) -> Json {
        Json::String(v.to_owned())
    }
}

impl From<String> for Json {
    fn from(v: String) -> Json {
        Json::String(v)
    }
}

macro_rules! json_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Json {
            fn from(v: $t) -> Json {
                Json::Number(v.to_string())
            }
        }
    )*};
}
json_from_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

/// Non-finite values have no JSON representation and become `null`.
impl From<f64> for Json {
    fn from(v: f64) -> Json {
        if v.is_finite() {
            // `Debug` prints the shortest round-tripping form and switches to exponent notation
            // for very large/small magnitudes, unlike `Display` which would print 300 digits.
            Json::Number(format!("{v:?}"))
        } else {
            Json::Null
        }
    }
}

impl From<Vec<Json>> for Json {
    fn from(v: Vec<Json>) -> Json {
        Json::Array(v)
    }
}

impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(v: Option<T>) -> Json {
        v.map_or(Json::Null, Into::into)
    }
}

fn newline(out: &mut String, indent: Option<usize>, level: usize) {
    if let Some(width) = indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', width * level));
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            // Other control characters must be escaped (RFC 8259 §7); DEL is escaped too so
            // output stays printable.
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Whether `s` is exactly one number per the RFC 8259 grammar.
fn is_number_literal(s: &str) -> bool {
    let mut p = Parser {
        src: s,
        bytes: s.as_bytes(),
        pos: 0,
    };
    p.parse_number().is_ok() && p.pos == s.len()
}

struct Parser<'a> {
    src: &'a str,
    bytes: &'a [u8],
    /// Byte offset; always on a char boundary because the parser only steps over ASCII bytes
    /// or whole runs ending before an ASCII delimiter.
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// An error located at byte offset `at`.
    fn error_at(&self, at: usize, what: impl fmt::Display) -> Error {
        let before = &self.src[..at];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        crate::err!(
            Para,
            "JSON parse error at line {line}, column {column}: {what}"
        )
    }

    /// "expected X, found Y" at the current position.
    fn expected(&self, what: &str) -> Error {
        let found = match self.src[self.pos..].chars().next() {
            None => "end of input".to_owned(),
            Some(c) => format!("{c:?}"),
        };
        self.error_at(self.pos, format!("expected {what}, found {found}"))
    }

    fn parse_value(&mut self, depth: usize) -> Result<Json> {
        match self.peek() {
            Some(b'{') => self.parse_object(depth + 1),
            Some(b'[') => self.parse_array(depth + 1),
            Some(b'"') => Ok(Json::String(self.parse_string()?)),
            Some(b't') => self.parse_literal("true", Json::Bool(true)),
            Some(b'f') => self.parse_literal("false", Json::Bool(false)),
            Some(b'n') => self.parse_literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.parse_number(),
            _ => Err(self.expected("a value")),
        }
    }

    fn parse_literal(&mut self, word: &str, value: Json) -> Result<Json> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.expected(&format!("'{word}'")))
        }
    }

    fn check_depth(&self, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(self.error_at(
                self.pos,
                format!("nesting deeper than {MAX_DEPTH} arrays/objects"),
            ));
        }
        Ok(())
    }

    fn parse_array(&mut self, depth: usize) -> Result<Json> {
        self.check_depth(depth)?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Json::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.parse_value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.expected("',' or ']'")),
            }
        }
    }

    fn parse_object(&mut self, depth: usize) -> Result<Json> {
        self.check_depth(depth)?;
        self.pos += 1; // '{'
        let mut members = Vec::new();
        // Duplicate keys make lookups ambiguous (RFC 8259 §4 leaves behaviour undefined), so a
        // strict parser rejects them instead of silently picking one.
        let mut seen = HashSet::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.expected("a string key"));
            }
            let key_pos = self.pos;
            let key = self.parse_string()?;
            if !seen.insert(key.clone()) {
                return Err(self.error_at(key_pos, format!("duplicate object key {key:?}")));
            }
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.expected("':'"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.parse_value(depth)?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.expected("',' or '}'")),
            }
        }
    }

    fn parse_digits(&mut self) -> Result<()> {
        if !matches!(self.peek(), Some(b'0'..=b'9')) {
            return Err(self.expected("a digit"));
        }
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        Ok(())
    }

    fn parse_number(&mut self) -> Result<Json> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            // No leading zeros: "0" stands alone as the integer part.
            Some(b'0') => self.pos += 1,
            _ => self.parse_digits()?,
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.parse_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.parse_digits()?;
        }
        Ok(Json::Number(self.src[start..self.pos].to_owned()))
    }

    /// Parses a string starting at the opening quote.
    fn parse_string(&mut self) -> Result<String> {
        self.pos += 1; // '"'
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            while matches!(self.peek(), Some(b) if b != b'"' && b != b'\\' && b >= 0x20) {
                self.pos += 1;
            }
            out.push_str(&self.src[run_start..self.pos]);
            match self.peek() {
                None => return Err(self.expected("'\"' to close the string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    out.push(self.parse_escape()?);
                }
                Some(_) => {
                    return Err(
                        self.error_at(self.pos, "control character in string (must be escaped)")
                    )
                }
            }
        }
    }

    /// Parses the escape after a backslash.
    fn parse_escape(&mut self) -> Result<char> {
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let esc_pos = self.pos - 1;
                self.pos += 1;
                let hi = self.parse_hex4()?;
                let code = match hi {
                    0xD800..=0xDBFF => {
                        // A high surrogate must be followed by an escaped low surrogate; the
                        // pair encodes one supplementary-plane character.
                        if !self.bytes[self.pos..].starts_with(b"\\u") {
                            return Err(self.error_at(
                                esc_pos,
                                "high surrogate not followed by a \\u low surrogate",
                            ));
                        }
                        self.pos += 2;
                        let lo = self.parse_hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return Err(self.error_at(
                                esc_pos,
                                "high surrogate not followed by a low surrogate",
                            ));
                        }
                        0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                    }
                    0xDC00..=0xDFFF => {
                        return Err(self.error_at(esc_pos, "unpaired low surrogate"));
                    }
                    _ => hi,
                };
                // Cannot fail: surrogates are excluded above and pairs stay below 0x110000.
                return char::from_u32(code)
                    .ok_or_else(|| self.error_at(esc_pos, "invalid \\u escape"));
            }
            _ => return Err(self.expected("an escape character (\"\\/bfnrtu)")),
        };
        self.pos += 1;
        Ok(c)
    }

    fn parse_hex4(&mut self) -> Result<u32> {
        let mut v = 0;
        for _ in 0..4 {
            let d = match self.peek() {
                Some(b) if b.is_ascii_hexdigit() => (b as char).to_digit(16).unwrap_or(0),
                _ => return Err(self.expected("a hex digit")),
            };
            v = v * 16 + d;
            self.pos += 1;
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::ErrorKind;

    fn err_msg(text: &str) -> String {
        let e = parse(text).expect_err(text);
        assert_eq!(e.kind, ErrorKind::Para, "{text}");
        e.msg
    }

    #[test]
    fn scalars() {
        assert_eq!(parse("null").unwrap(), Json::Null);
        assert_eq!(parse(" true ").unwrap(), Json::Bool(true));
        assert_eq!(parse("\tfalse\r\n").unwrap(), Json::Bool(false));
        assert_eq!(parse("\"x\"").unwrap().as_str(), Some("x"));
        assert_eq!(parse("0").unwrap(), Json::Number("0".into()));
        assert_eq!(parse("-1.5e+3").unwrap().as_f64(), Some(-1500.0));
        assert_eq!(parse("2E-2").unwrap().as_f64(), Some(0.02));
    }

    #[test]
    fn integers_round_trip_exactly() {
        let big = "18446744073709551615"; // u64::MAX, not representable in f64
        let v = parse(big).unwrap();
        assert_eq!(v.as_u64(), Some(u64::MAX));
        assert_eq!(v.as_i64(), None);
        assert_eq!(v.to_string_compact(), big);
        assert_eq!(
            parse("-9223372036854775808").unwrap().as_i64(),
            Some(i64::MIN)
        );
        assert_eq!(parse("-1").unwrap().as_u64(), None);
        assert_eq!(parse("-0").unwrap().as_u64(), Some(0));
        assert_eq!(parse("1e3").unwrap().as_u64(), Some(1000));
        assert_eq!(parse("2.0").unwrap().as_i64(), Some(2));
        assert_eq!(parse("2.5").unwrap().as_i64(), None);
        assert_eq!(parse("1e30").unwrap().as_u64(), None);
        assert_eq!(parse("1e400").unwrap().as_f64(), None);
        assert_eq!(parse("\"1\"").unwrap().as_u64(), None);
    }

    #[test]
    fn containers_and_accessors() {
        let v = parse(r#"{"a": [1, {"b": null}], "c": {}, "d": []}"#).unwrap();
        let a = v.get("a").unwrap().as_array().unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].as_u64(), Some(1));
        assert!(a[1].get("b").unwrap().is_null());
        assert_eq!(v.get("c").unwrap().as_object().unwrap().len(), 0);
        assert_eq!(v.get("d").unwrap().as_array().unwrap().len(), 0);
        assert!(v.get("missing").is_none());
        assert!(a[0].get("a").is_none());
        let keys: Vec<&str> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["a", "c", "d"]);
    }

    #[test]
    fn string_escapes() {
        let v = parse(r#""q\" b\\ s\/ \b\f\n\r\t \u0041\u00e9\u4e2d \ud83d\ude00""#).unwrap();
        assert_eq!(
            v.as_str().unwrap(),
            "q\" b\\ s/ \u{8}\u{c}\n\r\t A\u{e9}\u{4e2d} \u{1f600}"
        );
        // Raw non-ASCII passes through untouched.
        assert_eq!(parse("\"héllo 中\"").unwrap().as_str(), Some("héllo 中"));
        assert_eq!(
            parse("\"\\uD83D\\uDE00\"").unwrap().as_str(),
            Some("\u{1f600}")
        );
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let doc = r#"{"a": [1, -2.5e-3, true, false, null], "s": "x\u00e9\ud83d\ude00\n中", "o": {"k": {}}}"#;
        assert!(parse(doc).is_ok());
        for (i, _) in doc.char_indices() {
            assert!(parse(&doc[..i]).is_err(), "prefix {:?}", &doc[..i]);
        }
    }

    #[test]
    fn bom_is_skipped() {
        assert_eq!(parse("\u{feff}[1]").unwrap().as_array().unwrap().len(), 1);
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let cases = [
            "",
            "   ",
            "nul",
            "tru",
            "True",
            "NaN",
            "Infinity",
            "-",
            "+1",
            "01",
            "-01",
            "1.",
            ".5",
            "1e",
            "1e+",
            "0x10",
            "1 2",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[",
            "]",
            "{",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{a:1}",
            "{'a':1}",
            "{\"a\":1 \"b\":2}",
            "{\"a\":1,\"a\":2}",
            "\"abc",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\u12G4\"",
            "\"\\ud800\"",
            "\"\\ud800x\"",
            "\"\\ud800\\u0041\"",
            "\"\\udc00\"",
            "\"a\nb\"",
            "\"\t\"",
            "\"\\",
            "[1]x",
            "{} {}",
            "\u{feff}",
            "/* comment */ 1",
            "[1] // c",
            "\u{a0}1",
        ];
        for text in cases {
            err_msg(text);
        }
    }

    #[test]
    fn error_positions_and_expectations() {
        let msg = err_msg("{\n  \"a\": 1,\n  \"b\" 2\n}");
        assert!(msg.contains("line 3, column 7"), "{msg}");
        assert!(msg.contains("expected ':'"), "{msg}");
        assert!(msg.contains("found '2'"), "{msg}");
        let msg = err_msg("[1, 2");
        assert!(msg.contains("line 1, column 6"), "{msg}");
        assert!(msg.contains("found end of input"), "{msg}");
        // Columns count characters, not bytes.
        let msg = err_msg("[\"中\" x]");
        assert!(msg.contains("line 1, column 6"), "{msg}");
        let msg = err_msg("{\"k\":1,\"k\":2}");
        assert!(msg.contains("duplicate object key \"k\""), "{msg}");
        assert!(msg.contains("column 8"), "{msg}");
    }

    #[test]
    fn depth_limit() {
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(&ok).is_ok());
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(err_msg(&deep).contains("nesting deeper than 128"));
        let objs = "{\"a\":".repeat(MAX_DEPTH + 1) + "1" + &"}".repeat(MAX_DEPTH + 1);
        err_msg(&objs);
        // Far deeper than the limit must still be an error, not a stack overflow.
        err_msg(&"[".repeat(100_000));
    }

    #[test]
    fn writer_compact_and_pretty() {
        let v = Json::Object(vec![
            ("name".into(), Json::from("all\"reduce\n")),
            ("bytes".into(), Json::from(u64::MAX)),
            ("gbps".into(), Json::from(12.5)),
            (
                "tags".into(),
                Json::Array(vec![Json::Null, Json::from(true)]),
            ),
            ("empty".into(), Json::Object(vec![])),
            ("none".into(), Json::Array(vec![])),
        ]);
        assert_eq!(
            v.to_string_compact(),
            r#"{"name":"all\"reduce\n","bytes":18446744073709551615,"gbps":12.5,"tags":[null,true],"empty":{},"none":[]}"#
        );
        assert_eq!(
            v.to_string_pretty(),
            "{\n  \"name\": \"all\\\"reduce\\n\",\n  \"bytes\": 18446744073709551615,\n  \
             \"gbps\": 12.5,\n  \"tags\": [\n    null,\n    true\n  ],\n  \"empty\": {},\n  \
             \"none\": []\n}"
        );
        assert_eq!(v.to_string(), v.to_string_compact());
        assert_eq!(parse(&v.to_string_pretty()).unwrap(), v);
        assert_eq!(parse(&v.to_string_compact()).unwrap(), v);
    }

    #[test]
    fn writer_escapes_everything_needed() {
        let all: String =
            (0u32..0x80).filter_map(char::from_u32).collect::<String>() + "é中\u{1f600}\u{2028}";
        let text = Json::from(all.as_str()).to_string_compact();
        assert!(text.contains("\\u0000") && text.contains("\\u001f") && text.contains("\\u007f"));
        assert!(text.contains("\\b") && text.contains("\\f") && text.contains("\\t"));
        assert!(!text[1..text.len() - 1].bytes().any(|b| b < 0x20));
        assert_eq!(parse(&text).unwrap().as_str(), Some(all.as_str()));
    }

    #[test]
    fn writer_numbers() {
        assert_eq!(Json::from(-3i32).to_string(), "-3");
        assert_eq!(Json::from(1.0).to_string(), "1.0");
        assert_eq!(Json::from(1e300).to_string(), "1e300");
        assert_eq!(Json::from(1e-7).to_string(), "1e-7");
        assert_eq!(Json::from(f64::NAN), Json::Null);
        assert_eq!(Json::from(f64::INFINITY), Json::Null);
        assert_eq!(Json::from(None::<u32>), Json::Null);
        // Every finite f64 rendering must parse back to the same value.
        for v in [0.1, -0.0, 123456.789, f64::MAX, f64::MIN_POSITIVE, 5e-324] {
            let text = Json::from(v).to_string();
            assert_eq!(parse(&text).unwrap().as_f64(), Some(v), "{text}");
        }
        // Hand-built invalid literals never produce invalid JSON.
        assert_eq!(Json::Number("NaN".into()).to_string(), "null");
        assert_eq!(Json::Number("01".into()).to_string(), "null");
        assert_eq!(Json::Number("1 ".into()).to_string(), "null");
    }
}
