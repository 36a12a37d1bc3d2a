//! Reading untrusted JSON documents (rank tables, the whitelist) with serde_json, more strictly than
//! `serde_json::from_str` does: a key repeated in one object is an error (serde_json would keep
//! the last one silently), and arrays and objects may nest at most `max_depth` deep, so a
//! hostile document gets a clear error instead of exhausting the stack.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::base::error::Result;

/// Parses `text` as one JSON document. Errors are `ErrorKind::Para` and name the line and
/// column where the problem is.
pub fn parse(text: &str, max_depth: usize) -> Result<Value> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Node {
        depth: 0,
        max_depth,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v))
    .map_err(|e| crate::err!(Para, "JSON parse error: {e}"))?;
    Ok(value)
}

/// One value at nesting depth `depth` (the number of arrays and objects around it).
#[derive(Clone, Copy)]
struct Node {
    depth: usize,
    max_depth: usize,
}

impl Node {
    fn inner<E: de::Error>(self) -> std::result::Result<Node, E> {
        if self.depth >= self.max_depth {
            return Err(E::custom(format_args!(
                "arrays and objects nested more than {} deep",
                self.max_depth
            )));
        }
        Ok(Node {
            depth: self.depth + 1,
            ..self
        })
    }
}

impl<'de> DeserializeSeed<'de> for Node {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, b: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> std::result::Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> std::result::Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, x: f64) -> std::result::Result<Value, E> {
        Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, s: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> std::result::Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let inner = self.inner()?;
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(inner)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let inner = self.inner()?;
        let mut seen = HashSet::new();
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!("key {key:?} appears twice")));
            }
            let v = map.next_value_seed(inner)?;
            members.insert(key, v);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::ErrorKind;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn values_and_errors() {
        let v = parse(r#"{"a": [1, -2, 1.5, "x", null, true], "b": {}}"#, 8).unwrap();
        assert_eq!(v["a"][0].as_u64(), Some(1));
        assert_eq!(v["a"][1].as_i64(), Some(-2));
        assert_eq!(v["a"][3], "x");
        let e = parse(r#"{"a": 1, "a": 2}"#, 8).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        assert!(
            e.msg.contains("\"a\" appears twice") && e.msg.contains("line 1"),
            "{}",
            e.msg
        );
        for bad in ["", "{", "[1,]", "{} {}", "nul", "\"\\x\"", "1e999"] {
            let e = parse(bad, 8).unwrap_err();
            assert!(e.msg.starts_with("JSON parse error"), "{bad:?}: {}", e.msg);
        }
    }

    #[test]
    fn depth_at_and_past_the_bound() {
        assert!(parse(&nested(8), 8).is_ok());
        let e = parse(&nested(9), 8).unwrap_err();
        assert!(e.msg.contains("nested more than 8 deep"), "{}", e.msg);
        // Far deeper than any stack would take if the reader recursed without a bound.
        let e = parse(&nested(200_000), 32).unwrap_err();
        assert!(e.msg.contains("nested more than 32 deep"), "{}", e.msg);
        let e = parse(&"{\"a\":".repeat(200_000), 32).unwrap_err();
        assert!(e.msg.contains("nested more than 32 deep"), "{}", e.msg);
    }
}
