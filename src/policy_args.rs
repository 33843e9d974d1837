//! Who acts in `nenyax run` and `nenyax try`: the --policy flag and the model flags, checked
//! before anything loads, and the policy they make for an environment.

use clap::{Args, ValueEnum};
use serde_json::json;
use std::time::Duration;

use nenyax::{Endpoint, Environment, Error, Policy};

use crate::seconds;

/// The values of --policy.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum PolicyKind {
    /// The environment's reference (oracle) policy; `reference` is the same
    #[value(alias = "reference")]
    Oracle,
    /// The environment's null policy (does nothing useful)
    Null,
    /// Uniform actions from the action space the manifest declares, seeded per episode
    Random,
    /// An OpenAI-compatible chat-completions server (--base-url, --model)
    Endpoint,
}

impl PolicyKind {
    /// As written on the command line, for messages.
    fn name(self) -> &'static str {
        match self {
            PolicyKind::Oracle => "oracle",
            PolicyKind::Null => "null",
            PolicyKind::Random => "random",
            PolicyKind::Endpoint => "endpoint",
        }
    }
}

// The flags of `run` and `try` that choose who acts (plain comment: a doc comment here would
// become clap help text).
#[derive(Args)]
pub(crate) struct PolicyArgs {
    /// Who acts [default: endpoint when a model flag (--provider, --base-url, --model, ...) is
    /// given, else oracle]
    #[arg(long, value_enum)]
    policy: Option<PolicyKind>,
    /// Model provider by name (openai, groq, vllm, ollama, ...; see `nenyax integrations`)
    #[arg(long)]
    provider: Option<String>,
    /// Base URL of the endpoint, e.g. http://localhost:8000/v1
    #[arg(long)]
    base_url: Option<String>,
    /// Model name served by the endpoint
    #[arg(long)]
    model: Option<String>,
    /// Environment variable holding the endpoint's API key
    #[arg(long)]
    api_key_env: Option<String>,
    /// Sampling temperature sent to the endpoint (a finite number >= 0)
    #[arg(long, allow_negative_numbers = true)]
    temperature: Option<f64>,
    /// Completion token limit sent to the endpoint (at least 1)
    #[arg(long)]
    max_tokens: Option<u64>,
    /// Per-request timeout in seconds (more than 0, at most a year) [default: 600]
    #[arg(long, allow_negative_numbers = true)]
    timeout: Option<f64>,
    /// Retries on 429, 5xx and connection errors (at most 100) [default: 3]
    #[arg(long)]
    retries: Option<u32>,
}

/// Most retries of one model call: each waits up to the backoff cap, so more only hide an
/// endpoint that is down.
const MAX_RETRIES: u32 = 100;

impl PolicyArgs {
    /// The policy as telemetry names it: the model when one is given, else --policy's value.
    pub(crate) fn describe(&self) -> String {
        match (&self.model, self.policy) {
            (Some(m), _) => format!("model {m}"),
            (None, Some(p)) => p.name().to_string(),
            (None, None) => "default".into(),
        }
    }

    /// The model flags given: they only make sense with the endpoint policy.
    fn model_flags(&self) -> Vec<&'static str> {
        [
            ("--provider", self.provider.is_some()),
            ("--base-url", self.base_url.is_some()),
            ("--model", self.model.is_some()),
            ("--api-key-env", self.api_key_env.is_some()),
            ("--temperature", self.temperature.is_some()),
            ("--max-tokens", self.max_tokens.is_some()),
            ("--timeout", self.timeout.is_some()),
            ("--retries", self.retries.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// The policy asked for: model flags without --policy mean the endpoint, so that
    /// `--provider ollama --model qwen3` never silently runs the oracle instead.
    fn kind(&self) -> Result<PolicyKind, Error> {
        let flags = self.model_flags();
        match self.policy {
            None if flags.is_empty() => Ok(PolicyKind::Oracle),
            None => Ok(PolicyKind::Endpoint),
            Some(k) if k == PolicyKind::Endpoint || flags.is_empty() => Ok(k),
            Some(k) => Err(Error::Config(format!(
                "{} {} for a model, but --policy {} does not call one; use --policy endpoint \
                 (or leave --policy out), or drop {}",
                flags.join(", "),
                if flags.len() == 1 { "is" } else { "are" },
                k.name(),
                if flags.len() == 1 { "it" } else { "them" }
            ))),
        }
    }
}

/// Check the policy flags before anything is loaded, so that a wrong number costs no start-up.
pub(crate) fn check_policy_args(args: &PolicyArgs) -> Result<(), Error> {
    args.kind()?;
    if let Some(t) = args.temperature {
        if !(t.is_finite() && t >= 0.0) {
            return Err(Error::Config(format!(
                "--temperature must be a finite number >= 0, got {t}"
            )));
        }
    }
    if args.max_tokens == Some(0) {
        return Err(Error::Config("--max-tokens must be at least 1".into()));
    }
    if let Some(t) = args.timeout {
        seconds("--timeout", t)?;
    }
    if let Some(r) = args.retries.filter(|r| *r > MAX_RETRIES) {
        return Err(Error::Config(format!(
            "--retries must be at most {MAX_RETRIES}, got {r}"
        )));
    }
    Ok(())
}

/// The policy the flags ask for, for `env`.
pub(crate) fn resolve_policy(args: &PolicyArgs, env: &dyn Environment) -> Result<Policy, Error> {
    let missing = |what: &str| Error::UnsupportedCapability {
        env: env.id().to_string(),
        what: format!("provide a {what} policy; use --policy endpoint with a model instead"),
    };
    check_policy_args(args)?;
    match args.kind()? {
        PolicyKind::Oracle => env
            .reference_policy(None)
            .ok_or_else(|| missing("reference")),
        PolicyKind::Null => env.null_policy(None).ok_or_else(|| missing("null")),
        PolicyKind::Random => Policy::random(env.manifest()),
        PolicyKind::Endpoint => {
            if args.base_url.is_none() && args.provider.is_none() {
                return Err(Error::Config(
                    "--policy endpoint needs --provider (e.g. vllm, openai) or --base-url \
                     (e.g. http://localhost:8000/v1)"
                        .into(),
                ));
            }
            let model = args
                .model
                .clone()
                .ok_or_else(|| Error::Config("--policy endpoint needs --model".into()))?;
            let e = match (&args.base_url, &args.provider) {
                (Some(base), _) => Endpoint::new(base, &model),
                (None, Some(p)) => Endpoint::preset(p, &model)?,
                (None, None) => unreachable!("checked above"),
            };
            let mut e = e
                .timeout(seconds("--timeout", args.timeout.unwrap_or(600.0))?)
                .retries(args.retries.unwrap_or(3), Duration::from_millis(500));
            if let Some(var) = &args.api_key_env {
                e = e.api_key_from_env(var)?;
            }
            if let Some(t) = args.temperature {
                e = e.param("temperature", json!(t));
            }
            if let Some(m) = args.max_tokens {
                e = e.param("max_tokens", json!(m));
            }
            Ok(Policy::chat(e))
        }
    }
}
