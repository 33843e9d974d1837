//! The random policy: uniform actions from the action space an environment declares in its
//! manifest (`action_schema`), as the Python reference's `--policy random` samples Gymnasium's
//! `action_space`. Seeded per episode, so a run with the same seeds takes the same actions
//! whatever the number of threads.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::contract::{JsonMap, Manifest};
use crate::error::{Error, Result};
use crate::policy::Policy;
use crate::rng::Rng;

/// A declared action space that can be sampled.
#[derive(Debug, Clone, PartialEq)]
enum Space {
    /// One integer in `lo..=hi` (Gymnasium's Discrete).
    Discrete { lo: i64, hi: i64 },
    /// An array of `shape` with element-wise bounds (Box; MultiDiscrete and MultiBinary as
    /// integer boxes). Bounds are flattened; one bound applies to every element.
    Boxed {
        shape: Vec<usize>,
        low: Vec<f64>,
        high: Vec<f64>,
        integer: bool,
    },
}

/// Most elements of one sampled array; a schema asking for more is refused rather than
/// allocating without bound.
const MAX_ELEMENTS: usize = 1 << 20;

impl Space {
    /// The space `schema` declares, or why it declares none that can be sampled.
    fn parse(schema: &JsonMap) -> std::result::Result<Space, String> {
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let int = |k: &str| schema.get(k).and_then(Value::as_i64);
        if types.contains(&"integer") {
            return match (int("minimum"), int("maximum")) {
                (Some(lo), Some(hi)) if lo <= hi => Ok(Space::Discrete { lo, hi }),
                _ => Err("its integer action has no `minimum` and `maximum`".into()),
            };
        }
        if !types.contains(&"array") {
            return Err(match types.first() {
                Some(t) => format!("its actions are of type {t}"),
                None => "its action schema has no `type`".into(),
            });
        }
        let shape: Vec<usize> = match schema.get("shape").and_then(Value::as_array) {
            Some(s) => s
                .iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect::<Option<_>>()
                .ok_or("its `shape` is not a list of sizes")?,
            None => return Err("its array action has no `shape`".into()),
        };
        let n = shape
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(*d))
            .filter(|n| *n <= MAX_ELEMENTS)
            .ok_or(format!("its shape holds more than {MAX_ELEMENTS} elements"))?;
        let flat = |k: &str| -> Option<Vec<f64>> {
            fn walk(v: &Value, out: &mut Vec<f64>) {
                match v {
                    Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                    // JSON has no infinity: the bridge writes unbounded Box sides as "inf" /
                    // "-inf" (Rust parses both); anything else unreadable counts as unbounded.
                    Value::String(s) => out.push(s.parse().unwrap_or(f64::NAN)),
                    other => out.push(other.as_f64().unwrap_or(f64::NAN)),
                }
            }
            let mut out = Vec::new();
            walk(schema.get(k)?, &mut out);
            Some(out)
        };
        let dtype = schema.get("dtype").and_then(Value::as_str).unwrap_or("");
        let items = schema.get("items").and_then(Value::as_object);
        let (low, high, integer) = if let (Some(lo), Some(hi)) = (flat("low"), flat("high")) {
            (lo, hi, dtype.contains("int"))
        } else if let (Some(lo), Some(hi)) = (flat("minimum"), flat("maximum")) {
            // MultiDiscrete: inclusive integer bounds per element.
            (lo, hi, true)
        } else if let Some(items) = items.filter(|i| i.get("type") == Some(&json!("integer"))) {
            // MultiBinary: one integer range for every element.
            let b = |k: &str| items.get(k).and_then(Value::as_f64);
            match (b("minimum"), b("maximum")) {
                (Some(lo), Some(hi)) => (vec![lo], vec![hi], true),
                _ => return Err("its array items have no `minimum` and `maximum`".into()),
            }
        } else {
            return Err("its array action has no `low` and `high` bounds".into());
        };
        for b in [&low, &high] {
            if b.len() != 1 && b.len() != n {
                return Err(format!(
                    "its bounds hold {} values for a shape of {n} elements",
                    b.len()
                ));
            }
        }
        Ok(Space::Boxed {
            shape,
            low,
            high,
            integer,
        })
    }

    /// One action drawn from `rng`.
    fn sample(&self, rng: &mut Rng) -> Value {
        match self {
            Space::Discrete { lo, hi } => {
                // In i128, so the full i64 range cannot overflow.
                let span = (i128::from(*hi) - i128::from(*lo) + 1) as u128;
                let x = i128::from(*lo) + (u128::from(rng.next_u64()) % span) as i128;
                json!(x as i64)
            }
            Space::Boxed {
                shape,
                low,
                high,
                integer,
            } => {
                let n: usize = shape.iter().product();
                let bound = |b: &[f64], i: usize| if b.len() == 1 { b[0] } else { b[i] };
                let flat: Vec<Value> = (0..n)
                    .map(|i| {
                        let x = draw(rng, bound(low, i), bound(high, i));
                        if *integer {
                            json!(x.floor() as i64)
                        } else {
                            json!(x)
                        }
                    })
                    .collect();
                nest(&flat, shape)
            }
        }
    }
}

/// A uniform number in `[lo, hi]` when both are finite; as Gymnasium's Box does otherwise: an
/// exponential tail from the one finite side, a standard normal when neither is.
fn draw(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    let mut unit = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    match (lo.is_finite(), hi.is_finite()) {
        (true, true) => lo + (hi - lo) * unit(),
        (true, false) => lo - (1.0 - unit()).ln(),
        (false, true) => hi + (1.0 - unit()).ln(),
        (false, false) => {
            let (u, v) = (1.0 - unit(), unit());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        }
    }
}

/// `flat` as nested arrays of `shape` (a scalar shape `[]` is the one element itself).
fn nest(flat: &[Value], shape: &[usize]) -> Value {
    match shape {
        [] => flat.first().cloned().unwrap_or(Value::Null),
        [_] => Value::Array(flat.to_vec()),
        [d, rest @ ..] => {
            let chunk = rest.iter().product::<usize>().max(1);
            Value::Array(flat.chunks(chunk).take(*d).map(|c| nest(c, rest)).collect())
        }
    }
}

impl Policy {
    /// Uniform random actions from the action space `manifest` declares (an integer with
    /// `minimum`/`maximum`, or an array with `shape` and bounds); an environment that declares
    /// none, or text actions, is an `UnsupportedCapability` error.
    pub fn random(manifest: &Manifest) -> Result<Policy> {
        let space = manifest
            .action_schema
            .as_ref()
            .ok_or_else(|| "it declares no action schema".to_string())
            .and_then(Space::parse)
            .map_err(|why| Error::UnsupportedCapability {
                env: manifest.id.clone(),
                what: format!(
                    "provide a random policy: {why}; random needs a declared action space, an \
                     integer with `minimum` and `maximum` (discrete) or an array with `shape`, \
                     `low` and `high` (box)"
                ),
            })?;
        Ok(Policy::per_episode(move |ctx, _| {
            // Each call draws from its own seed (episode seed, call index), so the actions of
            // an episode do not depend on which thread runs it.
            let (space, ctx, calls) = (space.clone(), ctx.clone(), AtomicU64::new(0));
            Ok(Policy::action(move |_| {
                let step = calls.fetch_add(1, Ordering::Relaxed);
                Ok(space.sample(&mut Rng::new(ctx.step_seed(step))))
            }))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Mode;

    fn manifest(schema: Value) -> Manifest {
        let mut m = Manifest::new("t:x", "x", "test", Mode::Step);
        m.action_schema = schema.as_object().cloned();
        m
    }

    #[test]
    fn spaces_parse_from_gymnasium_schemas() {
        let p = |v: Value| Space::parse(v.as_object().unwrap());
        assert_eq!(
            p(json!({"type": "integer", "minimum": 0, "maximum": 1})),
            Ok(Space::Discrete { lo: 0, hi: 1 })
        );
        let b = p(json!({"type": "array", "shape": [2], "dtype": "float32",
                         "low": [-1.0, "-inf"], "high": [1.0, "inf"]}))
        .unwrap();
        let mut rng = Rng::new(1);
        for _ in 0..100 {
            let a = b.sample(&mut rng);
            let x = a[0].as_f64().unwrap();
            assert!((-1.0..=1.0).contains(&x), "{a}");
            assert!(a[1].as_f64().unwrap().is_finite(), "{a}");
        }
        let md = p(json!({"type": "array", "shape": [2, 2], "dtype": "int64",
                          "nvec": [[2, 3], [4, 5]], "minimum": [[0, 0], [0, 0]],
                          "maximum": [[1, 2], [3, 4]]}))
        .unwrap();
        let a = md.sample(&mut rng);
        assert_eq!(a.as_array().unwrap().len(), 2, "{a}");
        assert!(
            a[1][1].as_i64().is_some_and(|x| (0..=4).contains(&x)),
            "{a}"
        );
        for (bad, why) in [
            (json!({"type": "string"}), "of type string"),
            (
                json!({"type": "array", "shape": [3], "low": [0, 0], "high": [1, 1]}),
                "bounds",
            ),
            (
                json!({"type": "array", "shape": [1048577], "low": 0, "high": 1}),
                "elements",
            ),
            (json!({"type": "integer"}), "minimum"),
        ] {
            let e = p(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn the_full_integer_range_does_not_overflow() {
        let s = Space::Discrete {
            lo: i64::MIN,
            hi: i64::MAX,
        };
        let mut rng = Rng::new(3);
        assert!(s.sample(&mut rng).is_i64());
    }

    #[test]
    fn without_a_space_the_error_says_what_random_needs() {
        let e = Policy::random(&manifest(json!({"type": "string"}))).unwrap_err();
        assert_eq!(e.kind(), "UnsupportedCapability");
        assert!(
            e.to_string().contains("t:x cannot provide a random policy"),
            "{e}"
        );
        assert!(Policy::random(&Manifest::new("t:y", "y", "test", Mode::Step)).is_err());
    }
}
