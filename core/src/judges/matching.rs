//! Judges that compare the extracted answer with the task's: exact, contains, regex, numeric.

use regex::Regex;

use super::base::{clip, compare, expected, verdict, Judge};
use super::extract::{last_number, Extract};
use crate::contract::{JudgeSource, Judgment, Trajectory};
use crate::error::{Error, Result};

/// A judge that extracts the answer and compares it with the task's by `hit(got, want)`, both
/// sides normalised: the exact-match and contains judges differ only in these.
macro_rules! comparing_judge {
    ($(#[$doc:meta])* $name:ident, $id:literal, $extract:expr, $hit:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            /// Task metadata field holding the expected answer.
            pub field: String,
            /// How the answer is extracted from the reply.
            pub extract: Extract,
            /// Compare case-sensitively.
            pub case_sensitive: bool,
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    field: "answer".into(),
                    extract: $extract,
                    case_sensitive: false,
                }
            }
        }

        impl Judge for $name {
            fn id(&self) -> String {
                format!(concat!($id, ":{}"), self.extract.name())
            }

            fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
                compare(
                    self.id(),
                    traj,
                    &self.field,
                    &self.extract,
                    self.case_sensitive,
                    $hit,
                )
            }
        }
    };
}

comparing_judge!(
    /// The extracted answer equals the task's expected answer (whitespace collapsed).
    ExactMatch,
    "exact_match",
    Extract::AnswerTag,
    |g: &str, w: &str| g == w
);

comparing_judge!(
    /// The extracted answer contains the task's expected answer.
    Contains,
    "contains",
    Extract::Whole,
    |g: &str, w: &str| g.contains(w)
);

/// The final text matches a pattern anywhere (a format rule).
#[derive(Debug, Clone)]
pub struct RegexJudge {
    pattern: Regex,
}

impl RegexJudge {
    /// A judge for `pattern`; an invalid pattern is a typed error.
    pub fn new(pattern: &str) -> Result<Self> {
        Ok(RegexJudge {
            pattern: Regex::new(pattern)
                .map_err(|e| Error::Config(format!("`{pattern}` is not a valid regex: {e}")))?,
        })
    }
}

impl Judge for RegexJudge {
    fn id(&self) -> String {
        format!("regex:{}", self.pattern.as_str())
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        let hit = self.pattern.is_match(&traj.final_text());
        Ok(Judgment::new(
            if hit { 1.0 } else { 0.0 },
            JudgeSource::Verifier,
            self.id(),
        )?
        .with_passed(hit))
    }
}

/// The extracted number is within a tolerance of the expected number.
#[derive(Debug, Clone)]
pub struct Numeric {
    /// Task metadata field holding the expected number.
    pub field: String,
    /// How the answer is extracted from the reply.
    pub extract: Extract,
    /// Absolute tolerance.
    pub abs_tol: f64,
    /// Relative tolerance (of the expected value).
    pub rel_tol: f64,
}

impl Default for Numeric {
    fn default() -> Self {
        Numeric {
            field: "answer".into(),
            extract: Extract::AnswerTag,
            abs_tol: 1e-6,
            rel_tol: 0.0,
        }
    }
}

impl Judge for Numeric {
    fn id(&self) -> String {
        format!("numeric:{}", self.extract.name())
    }

    fn judge(&self, traj: &Trajectory) -> Result<Judgment> {
        let want_text = expected(traj, &self.field, &self.id())?;
        let want = last_number(&want_text).ok_or_else(|| {
            Error::Judge(format!(
                "{}: expected answer `{}` is not a number",
                self.id(),
                clip(&want_text)
            ))
        })?;
        let got = self.extract.apply(&traj.final_text());
        let value = got.as_deref().and_then(last_number);
        let hit =
            value.is_some_and(|v| (v - want).abs() <= self.abs_tol.max(self.rel_tol * want.abs()));
        verdict(self.id(), hit, got.as_deref(), &want_text)
    }
}
