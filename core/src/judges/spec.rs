//! Judges described as data: a `define:` file's `[judge]` table, or JSON across the C ABI.

use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

use super::base::Judge;
use super::custom::{EnvJudge, LlmRubric, Weighted};
use super::extract::Extract;
use super::matching::{Contains, ExactMatch, Numeric, RegexJudge};
use crate::error::{Error, Result};
use crate::policy::{ChatModel, EndpointSpec};

/// A judge described as data (a `define:` file's `[judge]` table, or JSON across the C ABI).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    /// `exact`, `contains`, `numeric`, `regex`, `env`, `llm_rubric`, `weighted` or `plugin`.
    #[serde(rename = "type", default = "default_kind")]
    pub kind: String,
    /// Task metadata field holding the expected answer.
    #[serde(default = "default_field")]
    pub field: String,
    /// How the answer is extracted (see [`Extract::parse`]); for a `plugin` judge, how an oracle
    /// writes its reply (the plugin reads it its own way), which enables the audit.
    #[serde(default)]
    pub extract: Option<String>,
    /// The pattern of a `regex` judge.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Compare case-sensitively.
    #[serde(default)]
    pub case_sensitive: bool,
    /// Absolute tolerance of a `numeric` judge.
    #[serde(default)]
    pub tolerance: Option<f64>,
    /// Relative tolerance of a `numeric` judge.
    #[serde(default)]
    pub rel_tolerance: Option<f64>,
    /// The rubric of an `llm_rubric` judge.
    #[serde(default)]
    pub rubric: Option<String>,
    /// The grader of an `llm_rubric` judge.
    #[serde(default)]
    pub endpoint: Option<EndpointSpec>,
    /// The parts of a `weighted` judge.
    #[serde(default)]
    pub parts: Vec<WeightedPart>,
    /// The judge plugin a `plugin` judge uses, by name (plugins config or C ABI registration).
    #[serde(default, rename = "use")]
    pub use_: Option<String>,
}

/// One part of a `weighted` judge spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedPart {
    /// Its weight (finite, >= 0).
    pub weight: f64,
    /// The judge.
    pub judge: JudgeSpec,
}

fn default_kind() -> String {
    "exact".into()
}

fn default_field() -> String {
    "answer".into()
}

impl Default for JudgeSpec {
    fn default() -> Self {
        JudgeSpec {
            kind: default_kind(),
            field: default_field(),
            extract: None,
            pattern: None,
            case_sensitive: false,
            tolerance: None,
            rel_tolerance: None,
            rubric: None,
            endpoint: None,
            parts: Vec::new(),
            use_: None,
        }
    }
}

/// Parse a judge spec from JSON, naming what does not fit.
pub fn judge_from_json(json: &str) -> Result<Arc<dyn Judge>> {
    let value: Value =
        serde_json::from_str(json).map_err(|e| Error::Config(format!("judge spec: {e}")))?;
    // Serde would read an array positionally into the struct; a spec is always an object.
    if !value.is_object() {
        return Err(Error::Config(format!(
            "judge spec must be a JSON object like {{\"type\": \"exact\"}}, got {}",
            crate::contract::preview_json(&value)
        )));
    }
    let spec: JudgeSpec =
        serde_json::from_value(value).map_err(|e| Error::Config(format!("judge spec: {e}")))?;
    Ok(judge_from_spec(&spec)?.0)
}

/// Build the judge a spec describes, with the extraction an oracle reply must satisfy (for
/// judges that compare with an expected answer).
pub fn judge_from_spec(spec: &JudgeSpec) -> Result<(Arc<dyn Judge>, Option<Extract>)> {
    let extract = |default: Extract| -> Result<Extract> {
        spec.extract.as_deref().map_or(Ok(default), Extract::parse)
    };
    if spec.use_.is_some() && spec.kind != "plugin" {
        return Err(Error::Config(format!(
            "`use` picks a judge plugin, but this judge's type is `{}`; write type = \"plugin\"",
            spec.kind
        )));
    }
    Ok(match spec.kind.as_str() {
        "exact" => {
            let e = extract(Extract::AnswerTag)?;
            let j = ExactMatch {
                field: spec.field.clone(),
                extract: e.clone(),
                case_sensitive: spec.case_sensitive,
            };
            (Arc::new(j), Some(e))
        }
        "contains" => {
            let e = extract(Extract::Whole)?;
            let j = Contains {
                field: spec.field.clone(),
                extract: e.clone(),
                case_sensitive: spec.case_sensitive,
            };
            (Arc::new(j), Some(e))
        }
        "numeric" => {
            let e = extract(Extract::AnswerTag)?;
            let j = Numeric {
                field: spec.field.clone(),
                extract: e.clone(),
                abs_tol: spec.tolerance.unwrap_or(1e-6),
                rel_tol: spec.rel_tolerance.unwrap_or(0.0),
            };
            (Arc::new(j), Some(e))
        }
        "regex" => {
            let p = spec
                .pattern
                .as_deref()
                .ok_or_else(|| Error::Config("a `regex` judge needs `pattern`".into()))?;
            (Arc::new(RegexJudge::new(p)?), None)
        }
        "env" => (Arc::new(EnvJudge), None),
        "llm_rubric" => {
            let rubric = spec
                .rubric
                .clone()
                .ok_or_else(|| Error::Config("an `llm_rubric` judge needs `rubric`".into()))?;
            let endpoint = spec.endpoint.as_ref().ok_or_else(|| {
                Error::Config("an `llm_rubric` judge needs `endpoint` = {base_url, model}".into())
            })?;
            let model: Arc<dyn ChatModel> = Arc::new(endpoint.build()?);
            (Arc::new(LlmRubric::new(model, rubric)), None)
        }
        "weighted" => {
            let parts = spec
                .parts
                .iter()
                .map(|p| Ok((judge_from_spec(&p.judge)?.0, p.weight)))
                .collect::<Result<Vec<_>>>()?;
            (Arc::new(Weighted::new(parts)?), None)
        }
        "plugin" => {
            let name = spec.use_.as_deref().ok_or_else(|| {
                Error::Config(
                    "a `plugin` judge needs `use` = the judge plugin's name (docs/plugins-abi.md)"
                        .into(),
                )
            })?;
            let oracle = spec.extract.as_deref().map(Extract::parse).transpose()?;
            (crate::plugins::library::find_judge(name)?, oracle)
        }
        other => {
            return Err(Error::Config(format!(
                "unknown judge type `{other}`; use exact, contains, numeric, regex, env, llm_rubric, weighted or plugin"
            )))
        }
    })
}
