//! Typed errors. Each names what was wrong and, where there is one, how to fix it.

/// Result with the Nenyax error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, by kind; `kind()` is stable and recorded in trajectories.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A URI that does not parse.
    #[error("invalid URI `{uri}`: {reason}")]
    InvalidUri {
        /// The URI as given.
        uri: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A scheme no driver handles.
    #[error("unknown scheme `{scheme}` in `{uri}`; known schemes: {}", known.join(", "))]
    UnknownScheme {
        /// The scheme as given.
        scheme: String,
        /// The URI as given.
        uri: String,
        /// Every scheme this build knows.
        known: Vec<String>,
    },
    /// A driver exists but cannot run here.
    #[error("driver `{driver}` is not ready: {missing}")]
    DriverUnavailable {
        /// The driver's scheme.
        driver: String,
        /// What is missing, and how to get it.
        missing: String,
    },
    /// A target (e.g. `builtin:nosuch`) the driver does not know.
    #[error("{driver} has no environment `{target}`; available: {}", available.join(", "))]
    UnknownTarget {
        /// The driver's scheme.
        driver: String,
        /// The target as given.
        target: String,
        /// What the driver offers.
        available: Vec<String>,
    },
    /// A URI parameter the driver does not accept.
    #[error("{driver} does not accept parameter `{param}`{}; accepted: {}", suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default(), accepted.join(", "))]
    UnknownParameter {
        /// The driver's scheme.
        driver: String,
        /// The parameter as given.
        param: String,
        /// The closest accepted name, when one is close.
        suggestion: Option<String>,
        /// Every accepted parameter.
        accepted: Vec<String>,
    },
    /// A parameter value of the wrong shape or out of range.
    #[error("{driver}: parameter `{param}` = `{value}` is invalid: expected {expected}")]
    InvalidParameter {
        /// The driver's scheme.
        driver: String,
        /// The parameter.
        param: String,
        /// The value as given.
        value: String,
        /// What is accepted.
        expected: String,
    },
    /// The environment cannot do what was asked, and says so rather than faking it.
    #[error("{env} cannot {what}")]
    UnsupportedCapability {
        /// The environment id.
        env: String,
        /// What was asked, and what to use instead.
        what: String,
    },
    /// The policy's kind cannot drive this environment.
    #[error("{0}")]
    PolicyMismatch(String),
    /// The policy failed, panicked or returned something unusable.
    #[error("{0}")]
    Policy(String),
    /// An action the environment cannot accept.
    #[error("{env} rejected action {action}: {reason}")]
    InvalidAction {
        /// The environment id.
        env: String,
        /// The action, abbreviated.
        action: String,
        /// What was expected.
        reason: String,
    },
    /// The environment itself failed (or panicked).
    #[error("{0}")]
    Environment(String),
    /// A judge produced a NaN or infinite score.
    #[error(
        "judge `{judge}` produced a non-finite score ({score}); scores must be finite numbers"
    )]
    NonFiniteScore {
        /// The judge's id.
        judge: String,
        /// The offending value.
        score: f64,
    },
    /// A judge could not reach a verdict (e.g. an unparseable rubric reply).
    #[error("{0}")]
    Judge(String),
    /// A `define:` file or definition that does not fit.
    #[error("{file}:{line}: {field}: {message}")]
    Define {
        /// The file (or `<inline>`).
        file: String,
        /// 1-based line, 0 when unknown.
        line: usize,
        /// The field at fault.
        field: String,
        /// What is wrong and what is expected.
        message: String,
    },
    /// A model endpoint failed after its retries. Shown with any login in a URL hidden.
    #[error(
        "endpoint {}: {}",
        crate::openai::redact_url(url),
        crate::openai::redact_url(message)
    )]
    Endpoint {
        /// The URL called.
        url: String,
        /// What happened.
        message: String,
    },
    /// Data that does not fit the contract.
    #[error("{0}")]
    Protocol(String),
    /// A server refused a new session because it is at its session limit.
    #[error("{server} is at capacity: {message} (wait for sessions to end, use fewer parallel rollouts, or limit them with the URI parameter `sessions=`)")]
    Capacity {
        /// The server.
        server: String,
        /// The server's own message.
        message: String,
    },
    /// A configuration value that does not fit.
    #[error("{0}")]
    Config(String),
    /// A training round could not update: a trainer callback failed or returned non-finite
    /// log-probabilities, or every trace of the batch was masked (the message says why).
    #[error("{0}")]
    Training(String),
    /// No usable GPU: no NVIDIA driver, no device, or no NVRTC; the CPU path still works.
    #[error("CUDA unavailable: {0}")]
    CudaUnavailable(String),
    /// A CUDA call failed on a GPU that is there.
    #[error("CUDA: {0}")]
    Cuda(String),
    /// A sandbox could not be made or used: the message says what and how to fix it.
    #[error("sandbox: {0}")]
    Sandbox(String),
    /// A file or stream failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The stable name of this kind, e.g. `UnknownScheme`; written as `"<Kind>: <message>"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidUri { .. } => "InvalidUri",
            Error::UnknownScheme { .. } => "UnknownScheme",
            Error::DriverUnavailable { .. } => "DriverUnavailable",
            Error::UnknownTarget { .. } => "UnknownTarget",
            Error::UnknownParameter { .. } => "UnknownParameter",
            Error::InvalidParameter { .. } => "InvalidParameter",
            Error::UnsupportedCapability { .. } => "UnsupportedCapability",
            Error::PolicyMismatch(_) => "PolicyMismatch",
            Error::Policy(_) => "PolicyError",
            Error::InvalidAction { .. } => "InvalidAction",
            Error::Environment(_) => "EnvironmentError",
            Error::NonFiniteScore { .. } => "NonFiniteScore",
            Error::Judge(_) => "JudgeError",
            Error::Define { .. } => "DefineError",
            Error::Endpoint { .. } => "EndpointError",
            Error::Protocol(_) => "ProtocolError",
            Error::Capacity { .. } => "CapacityReached",
            Error::Config(_) => "ConfigError",
            Error::Training(_) => "TrainingError",
            Error::CudaUnavailable(_) => "CudaUnavailable",
            Error::Cuda(_) => "CudaError",
            Error::Sandbox(_) => "SandboxError",
            Error::Io { .. } => "IoError",
        }
    }

    /// Wrap an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The message carried by a caught panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic with a non-string payload".to_string())
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest candidate within a small edit distance of `given`.
pub(crate) fn suggest<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(given, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_find_typos_only() {
        assert_eq!(
            suggest("szie", ["size", "seed", "digits"]),
            Some("size".into())
        );
        assert_eq!(suggest("temperature", ["size", "seed"]), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
