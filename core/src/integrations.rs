//! Everything Nenyax connects to, and whether each is ready here: model providers, hubs,
//! telemetry sinks, exporters, sandbox backends, learners and judges (`nenyax integrations`).
//!
//! A row is ready, or says exactly what is missing (the variable to export, the package to
//! install). Checks read the environment and probe local tools only; none reaches a remote
//! service, so listing is quick offline.

use serde::Serialize;
use serde_json::json;

use crate::error::Error;
use crate::openai::redact_url;

/// One integration and its readiness, as a row of `nenyax integrations --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Integration {
    /// The name it is chosen by (`--provider`, `nenyax search`, `--telemetry`, `--to`, ...).
    pub name: String,
    /// What it is, for people.
    pub title: String,
    /// `hosted` or `local` (model providers), `hub`, `telemetry`, `exporter`, `sandbox`,
    /// `learner` or `judge`.
    pub kind: String,
    /// The URL or location it talks to, logins hidden; `None` where there is none.
    pub base_url: Option<String>,
    /// The variable holding its key, when it takes one.
    pub key_var: Option<String>,
    /// Whether it works here as things stand.
    pub ready: bool,
    /// What is missing when not ready; for some ready rows, what it uses or what an optional
    /// part still needs.
    pub needs: Option<String>,
}

/// The kinds [`list`] covers, in its order (providers are `hosted` or `local`).
pub const KINDS: &[&str] = &[
    "hosted",
    "local",
    "hub",
    "telemetry",
    "exporter",
    "sandbox",
    "learner",
    "judge",
];

fn row(
    kind: &str,
    name: &str,
    title: &str,
    base_url: Option<String>,
    key_var: Option<&str>,
    ready: std::result::Result<Option<String>, String>,
) -> Integration {
    let (ready, needs) = match ready {
        Ok(note) => (true, note),
        Err(missing) => (false, Some(missing)),
    };
    Integration {
        name: name.into(),
        title: title.into(),
        kind: kind.into(),
        base_url: base_url.map(|u| redact_url(&u).into_owned()),
        key_var: key_var.map(str::to_string),
        ready,
        needs,
    }
}

/// Every integration with its readiness here.
pub fn list() -> Vec<Integration> {
    let mut out = providers();
    out.extend(hubs());
    out.extend(telemetry());
    out.extend(exporters());
    out.extend(sandboxes());
    out.extend(learners());
    out.extend(judges());
    out.extend(library_plugins());
    out
}

/// Hub and telemetry plugins (the plugins config's libraries, or registered by a host), listed
/// beside the built-ins they extend: ready when the library loads, else why not.
pub fn library_plugins() -> Vec<Integration> {
    use crate::plugins::kinds::Kind;
    use crate::plugins::library;
    let mut out = Vec::new();
    for name in library::plugin_names(Kind::Hub) {
        let ready = library::find_hub(&name)
            .map(|h| Some(format!("a library plugin: {}", h.info().source)))
            .map_err(|e| e.to_string());
        out.push(row("hub", &name, "hub plugin", None, None, ready));
    }
    for name in library::plugin_names(Kind::Telemetry) {
        let ready = library::find_sink(&name)
            .map(|t| Some(format!("a library plugin: {}", t.info().source)))
            .map_err(|e| e.to_string());
        out.push(row(
            "telemetry",
            &name,
            "telemetry plugin",
            None,
            None,
            ready,
        ));
    }
    out
}

/// The model providers (`--provider`).
pub fn providers() -> Vec<Integration> {
    use crate::providers::{ProviderKind, PROVIDERS};
    PROVIDERS
        .iter()
        .map(|p| {
            let kind = if p.kind == ProviderKind::Local {
                "local"
            } else {
                "hosted"
            };
            let mut r = row(
                kind,
                p.name,
                p.title,
                Some(p.base_url()),
                Some(p.key_var),
                p.readiness().map(|()| None),
            );
            r.key_var = Some(p.key_var.to_string());
            r
        })
        .collect()
}

/// The environment hubs (`nenyax search` / `nenyax fetch`): search needs nothing; `needs`
/// says what fetching still lacks.
pub fn hubs() -> Vec<Integration> {
    crate::hubs::HUBS
        .iter()
        .map(|h| {
            row(
                "hub",
                h.name,
                h.title,
                Some(h.endpoint()),
                h.key_var,
                h.readiness().map(|()| None),
            )
        })
        .collect()
}

/// A variable's value, unset when empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The OTLP/HTTP traces endpoint the otel sink would use (the standard variables, else the
/// collector default), or why its settings are refused.
pub fn otel_endpoint() -> std::result::Result<String, String> {
    crate::telemetry::otel::OtelConfig::resolve(&serde_json::Map::new(), &var)
        .map(|c| redact_url(&c.traces_endpoint).into_owned())
        .map_err(|e| e.to_string())
}

/// otel: ready unless its `OTEL_*` settings are refused; a collector that is down only drops
/// spans (counted). Its endpoint is the row's `base_url`.
pub fn otel_readiness() -> std::result::Result<Option<String>, String> {
    otel_endpoint().map(|_| None)
}

/// mlflow: the sink's own check (a usable `MLFLOW_TRACKING_URI`).
pub fn mlflow_readiness() -> std::result::Result<Option<String>, String> {
    crate::telemetry::mlflow::readiness().map(|()| None)
}

/// wandb: online with `WANDB_API_KEY`; offline (files for `wandb sync`) with an interpreter
/// where the sink's helper can import the wandb SDK.
pub fn wandb_readiness() -> std::result::Result<Option<String>, String> {
    let sdk = crate::telemetry::wandb::readiness();
    match (var("WANDB_API_KEY").is_some(), sdk) {
        (true, Ok(())) => Ok(None),
        (false, Ok(())) => Ok(Some(
            "offline mode only (files for `wandb sync`); online needs WANDB_API_KEY".into(),
        )),
        (true, Err(why)) => Err(why),
        (false, Err(why)) => Err(format!(
            "{why} (enough for offline runs; online runs also need WANDB_API_KEY)"
        )),
    }
}

/// The telemetry sinks (`--telemetry`), by the names in [`crate::telemetry::SINKS`].
pub fn telemetry() -> Vec<Integration> {
    crate::telemetry::SINKS
        .iter()
        .map(|&name| match name {
            "otel" => row(
                "telemetry",
                name,
                "OpenTelemetry traces and metrics over OTLP/HTTP (GenAI conventions)",
                otel_endpoint().ok(),
                None,
                otel_readiness(),
            ),
            "mlflow" => row(
                "telemetry",
                name,
                "MLflow runs over its REST API: parameters, metrics, the report",
                var("MLFLOW_TRACKING_URI"),
                None,
                mlflow_readiness(),
            ),
            "wandb" => row(
                "telemetry",
                name,
                "Weights & Biases runs (online, or offline for wandb sync)",
                None,
                Some("WANDB_API_KEY"),
                wandb_readiness(),
            ),
            other => row("telemetry", other, "", None, None, Ok(None)),
        })
        .collect()
}

/// The exporters (`nenyax export --to`).
pub fn exporters() -> Vec<Integration> {
    let hf = match var("HF_TOKEN") {
        Some(_) => Ok(None),
        None => Err(
            "export HF_TOKEN to push to the Hub (writing the rows locally needs nothing)".into(),
        ),
    };
    vec![
        row(
            "exporter",
            "jsonl",
            "JSON lines: raw, SFT or DPO rows",
            None,
            None,
            Ok(None),
        ),
        row(
            "exporter",
            "parquet",
            "Parquet files of raw, SFT, DPO or token rows",
            None,
            None,
            Ok(None),
        ),
        row(
            "exporter",
            "hf",
            "Hugging Face datasets rows, pushed to the Hub",
            None,
            Some("HF_TOKEN"),
            hf,
        ),
        row(
            "exporter",
            "atif",
            "ATIF v1.7 trajectories (Harbor, NeMo Gym)",
            None,
            None,
            Ok(None),
        ),
    ]
}

/// The sandbox backends, as `nenyax sandboxes` shows them.
pub fn sandboxes() -> Vec<Integration> {
    crate::sandbox::backends()
        .into_iter()
        .map(|b| {
            let title = format!("{:?} isolation", b.level).to_lowercase();
            let ready = match b.why_not {
                None => Ok(Some(b.needs)),
                Some(w) => Err(format!("{w} (needs {})", b.needs)),
            };
            row("sandbox", &b.name, &title, None, None, ready)
        })
        .collect()
}

/// What each learner is.
const LEARNERS: &[(&str, &str)] = &[
    (
        "incontext",
        "the model's own best episodes as worked examples in its prompt; no weights change",
    ),
    (
        "grpo",
        "GRPO: group mean/std advantages, clipped ratio, k3 KL (verl's conventions)",
    ),
    ("grpo_trl", "GRPO with TRL's conventions"),
    (
        "dr_grpo",
        "Dr. GRPO: group-centred advantages without std normalisation",
    ),
    (
        "dapo",
        "DAPO: clip-higher, token-level loss, groups without signal filtered",
    ),
    ("rloo", "RLOO: leave-one-out baseline"),
    ("reinforce", "REINFORCE with a batch-mean baseline"),
    (
        "reinforce_pp",
        "REINFORCE++: token-level returns, batch-normalised",
    ),
    ("gspo", "GSPO: sequence-level importance ratio"),
    (
        "pg",
        "every knob: estimator, surrogate, aggregation, clip, KL",
    ),
    (
        "rft",
        "rejection-sampling fine-tuning on each group's best episode",
    ),
    ("dpo", "DPO on each group's best-versus-worst pair"),
    (
        "tinker",
        "hosted LoRA training on Thinking Machines' Tinker",
    ),
];

/// The learners (`nenyax train --learner`), each with the registry's own verdict, so a
/// learner it refuses is never listed as ready.
pub fn learners() -> Vec<Integration> {
    crate::train::NAMES
        .iter()
        .map(|&name| {
            let title = LEARNERS
                .iter()
                .find(|(n, _)| *n == name)
                .map_or("", |(_, t)| *t);
            let verdict = match crate::train::check_learner(&json!({ "use": name })) {
                Err(Error::DriverUnavailable { missing, .. }) => Err(missing),
                // Built in, but its name alone is not a whole config (`pg`: every knob).
                Err(Error::Config(why)) => Ok(format!("its knobs in [learner]: {why}")),
                Err(e) => Err(e.to_string()),
                Ok(_) if name == "incontext" => {
                    Ok("a chat model: --provider/--model, --base-url, or [model]".to_string())
                }
                Ok(_) => Ok(
                    "a trainer: the built-in softmax policy (discrete actions, numeric \
                     observations, e.g. gymnasium:CartPole-v1), or a program's own through the \
                     C ABI (trainer = \"host\")"
                        .to_string(),
                ),
            };
            row("learner", name, title, None, None, verdict.map(Some))
        })
        .collect()
}

/// The judge types of `define:` files and `[judge]` tables.
const JUDGES: &[(&str, &str)] = &[
    ("exact", "the answer equals the expected text"),
    ("contains", "the answer contains the expected text"),
    (
        "numeric",
        "the answer is the expected number, within a tolerance",
    ),
    ("regex", "the answer matches a pattern"),
    ("env", "the environment's own verifier"),
    (
        "llm_rubric",
        "a chat model grades the answer against a rubric",
    ),
    ("weighted", "a weighted sum of other judges"),
];

/// The judge types; all are built in, and `llm_rubric` calls a chat model.
pub fn judges() -> Vec<Integration> {
    JUDGES
        .iter()
        .map(|&(name, title)| {
            let note = (name == "llm_rubric").then(|| {
                "a chat model: the judge's endpoint (provider, model, key variable)".to_string()
            });
            row("judge", name, title, None, None, Ok(note))
        })
        .collect()
}
