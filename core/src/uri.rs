//! Environment URIs: `scheme:target?key=value&...`, percent-decoded.
//!
//! Values are read as JSON when they parse (`size=20` is the number 20, `reset={"seed":1}` an
//! object) and as strings otherwise (`name=abc`), matching the Python reference; `007` stays a
//! string because JSON has no leading zeros. Drivers then check each value against their
//! declared parameters (see [`ParamSpec`]).

use serde_json::Value;

use crate::error::{suggest, Error, Result};

/// A parsed environment URI.
#[derive(Debug, Clone, PartialEq)]
pub struct Uri {
    /// The text as given.
    pub raw: String,
    /// The driver scheme, e.g. `builtin`.
    pub scheme: String,
    /// What the driver loads, e.g. `arithmetic` or `./tasks.toml`.
    pub target: String,
    /// Query parameters in the order given (later duplicates override earlier ones).
    pub params: Vec<(String, Value)>,
}

impl Uri {
    /// Parse `scheme:target?k=v&...`; the scheme is everything before the first `:`.
    pub fn parse(raw: &str) -> Result<Uri> {
        let bad = |reason: &str| Error::InvalidUri {
            uri: raw.to_string(),
            reason: reason.to_string(),
        };
        let raw_trim = raw.trim();
        if raw_trim.is_empty() {
            return Err(bad(
                "it is empty; expected `scheme:target`, e.g. `builtin:arithmetic`",
            ));
        }
        let (scheme, rest) = raw_trim.split_once(':').ok_or_else(|| {
            bad("it has no scheme; expected `scheme:target`, e.g. `builtin:arithmetic` or `define:./tasks.toml`")
        })?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(bad(&format!(
                "scheme `{scheme}` must be letters, digits, `_`, `-` or `.`"
            )));
        }
        let (target, query) = match rest.split_once('?') {
            Some((t, q)) => (t, Some(q)),
            None => (rest, None),
        };
        let target = percent_decode(target).map_err(|e| bad(&e))?;
        let mut params = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let k = percent_decode(&k.replace('+', " ")).map_err(|e| bad(&e))?;
            let v = percent_decode(&v.replace('+', " ")).map_err(|e| bad(&e))?;
            if k.is_empty() {
                return Err(bad(&format!("parameter `{pair}` has no name")));
            }
            let value = serde_json::from_str::<Value>(&v).unwrap_or(Value::String(v));
            params.retain(|(name, _)| name != &k);
            params.push((k, value));
        }
        Ok(Uri {
            raw: raw_trim.to_string(),
            scheme: scheme.to_string(),
            target,
            params,
        })
    }

    /// The value of a parameter, if given.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// The text of parameter `name` as written (percent-decoded), for messages: `size=1e20`
    /// parses to a number that prints as `1e+20`, but the user wrote `1e20`.
    pub fn raw_param(&self, name: &str) -> Option<String> {
        let (_, rest) = self.raw.split_once(':')?;
        let (_, query) = rest.split_once('?')?;
        query
            .split('&')
            // Later duplicates override earlier ones, as in `parse`.
            .rev()
            .find_map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let k = percent_decode(&k.replace('+', " ")).ok()?;
                (k == name)
                    .then(|| percent_decode(&v.replace('+', " ")).ok())
                    .flatten()
            })
    }
}

fn percent_decode(s: &str) -> std::result::Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .filter(|h| h.chars().all(|c| c.is_ascii_hexdigit()))
                // `%` and up to two characters after it, cut on character boundaries (`%€`).
                .ok_or_else(|| {
                    let shown: String = s[i..].chars().take(3).collect();
                    format!("bad percent escape at `{shown}`; write `%` as `%25`")
                })?;
            out.push(u8::from_str_radix(hex, 16).expect("checked hex"));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent escapes do not decode to UTF-8".to_string())
}

/// The type a parameter's value must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A whole number within `min..=max`.
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A finite number.
    Float,
    /// `true` or `false`.
    Bool,
    /// Any text.
    Str,
    /// Any JSON value.
    Json,
}

/// One accepted URI parameter of a driver.
#[derive(Debug, Clone)]
pub struct ParamSpec {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: ParamKind,
    /// Its default, shown in `nenyax drivers` and errors.
    pub default: &'static str,
    /// One line on what it does.
    pub help: &'static str,
}

impl ParamSpec {
    fn expected(&self) -> String {
        match self.kind {
            ParamKind::Int { min, max } if max == i64::MAX => format!("an integer >= {min}"),
            ParamKind::Int { min, max } => format!("an integer from {min} to {max}"),
            ParamKind::Float => "a finite number".into(),
            ParamKind::Bool => "true or false".into(),
            ParamKind::Str => "text".into(),
            ParamKind::Json => "a JSON value".into(),
        }
    }

    fn check(&self, value: &Value) -> bool {
        match self.kind {
            ParamKind::Int { min, max } => value.as_i64().is_some_and(|v| (min..=max).contains(&v)),
            ParamKind::Float => value.as_f64().is_some_and(f64::is_finite),
            ParamKind::Bool => value.is_boolean(),
            ParamKind::Str | ParamKind::Json => true,
        }
    }
}

/// URI parameters checked against a driver's declared specs, with defaults filled in.
#[derive(Debug, Clone)]
pub struct Params {
    driver: String,
    values: Vec<(String, Value)>,
}

impl Params {
    /// Check `uri`'s parameters: unknown names and malformed values are typed errors that name
    /// the bad part and list what is accepted.
    pub fn check(driver: &str, uri: &Uri, specs: &[ParamSpec]) -> Result<Params> {
        let accepted = || {
            specs
                .iter()
                .map(|s| format!("{} ({}, default {})", s.name, s.expected(), s.default))
                .collect::<Vec<_>>()
        };
        let mut values = Vec::new();
        for (name, value) in &uri.params {
            let spec =
                specs
                    .iter()
                    .find(|s| s.name == name)
                    .ok_or_else(|| Error::UnknownParameter {
                        driver: driver.to_string(),
                        param: name.clone(),
                        suggestion: suggest(name, specs.iter().map(|s| s.name)),
                        accepted: if specs.is_empty() {
                            vec!["none".into()]
                        } else {
                            accepted()
                        },
                    })?;
            let value = match (spec.kind, value) {
                // `name=007` or `name=12` are text when the parameter is text.
                (ParamKind::Str, Value::String(_)) => value.clone(),
                (ParamKind::Str, other) => Value::String(other.to_string()),
                _ => value.clone(),
            };
            if !spec.check(&value) {
                return Err(Error::InvalidParameter {
                    driver: driver.to_string(),
                    param: name.clone(),
                    value: match value {
                        Value::String(s) => s,
                        v => uri.raw_param(name).unwrap_or_else(|| v.to_string()),
                    },
                    expected: spec.expected(),
                });
            }
            values.push((name.clone(), value));
        }
        Ok(Params {
            driver: driver.to_string(),
            values,
        })
    }

    /// The value given for `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// An integer parameter (already range-checked), or its default.
    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.get(name).and_then(Value::as_i64).unwrap_or(default)
    }

    /// A text parameter, or its default.
    pub fn string(&self, name: &str, default: &str) -> String {
        self.get(name)
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_string()
    }

    /// The driver these belong to.
    pub fn driver(&self) -> &str {
        &self.driver
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_scheme_target_and_json_or_string_values() {
        let u = Uri::parse("builtin:arithmetic?size=20&name=007&reset=%7B%22seed%22%3A1%7D&flag")
            .unwrap();
        assert_eq!(u.scheme, "builtin");
        assert_eq!(u.target, "arithmetic");
        assert_eq!(u.get("size"), Some(&json!(20)));
        assert_eq!(u.get("name"), Some(&json!("007")));
        assert_eq!(u.get("reset"), Some(&json!({"seed": 1})));
        assert_eq!(u.get("flag"), Some(&json!("")));
        let u = Uri::parse("define:./my%20tasks.toml").unwrap();
        assert_eq!(u.target, "./my tasks.toml");
        let u = Uri::parse("nemo_gym:http://h:8001?data=a.jsonl").unwrap();
        assert_eq!(u.target, "http://h:8001");
    }

    #[test]
    fn malformed_uris_are_named() {
        for (uri, needle) in [
            ("", "empty"),
            ("arithmetic", "no scheme"),
            ("bad scheme:x", "scheme"),
            ("builtin:x?size=%zz", "percent"),
            ("builtin:x?size=%€", "`%€`"),
            ("builtin:x%€y", "`%€y`"),
            ("builtin:x?=3", "no name"),
        ] {
            let e = Uri::parse(uri).unwrap_err().to_string();
            assert!(e.contains(needle), "{uri:?}: {e}");
        }
    }

    #[test]
    fn params_are_checked_against_specs() {
        let specs = [ParamSpec {
            name: "size",
            kind: ParamKind::Int { min: 1, max: 100 },
            default: "10",
            help: "",
        }];
        let u = Uri::parse("b:x?szie=3").unwrap();
        let e = Params::check("b", &u, &specs).unwrap_err().to_string();
        assert!(
            e.contains("`szie`") && e.contains("did you mean `size`"),
            "{e}"
        );
        let u = Uri::parse("b:x?size=abc").unwrap();
        let e = Params::check("b", &u, &specs).unwrap_err().to_string();
        assert!(e.contains("`abc`") && e.contains("from 1 to 100"), "{e}");
        let u = Uri::parse("b:x?size=0").unwrap();
        assert!(Params::check("b", &u, &specs).is_err());
        let u = Uri::parse("b:x?size=5").unwrap();
        assert_eq!(Params::check("b", &u, &specs).unwrap().int("size", 10), 5);
    }
}
