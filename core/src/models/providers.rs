//! Model providers by name: where each serves its OpenAI-compatible API and which environment
//! variable holds its key, so that `Endpoint::preset("groq", "llama-3.3-70b")` or
//! `{"provider": "vllm", "model": "Qwen/Qwen3-8B"}` is all a caller writes.
//!
//! Every base URL can be overridden with `NENYAX_<NAME>_BASE_URL` (e.g. a vLLM on another host).
//! Keys are read from the environment when the endpoint is built and are never stored elsewhere.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::openai::{Client, RetryPolicy};

/// Where a provider runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// A hosted API that needs a key.
    Hosted,
    /// A server on this machine (the key, if any, is optional).
    Local,
}

/// One provider's OpenAI-compatible API.
#[derive(Debug, Clone, Copy)]
pub struct Provider {
    /// The name used in URIs, configs and `nenyax integrations`.
    pub name: &'static str,
    /// Who it is, for people.
    pub title: &'static str,
    /// The default base URL, ending in `/v1` or the provider's equivalent.
    pub base_url: &'static str,
    /// The environment variable holding the API key.
    pub key_var: &'static str,
    /// Hosted or local.
    pub kind: ProviderKind,
}

const fn hosted(
    name: &'static str,
    title: &'static str,
    base_url: &'static str,
    key_var: &'static str,
) -> Provider {
    Provider {
        name,
        title,
        base_url,
        key_var,
        kind: ProviderKind::Hosted,
    }
}

const fn local(
    name: &'static str,
    title: &'static str,
    base_url: &'static str,
    key_var: &'static str,
) -> Provider {
    Provider {
        kind: ProviderKind::Local,
        ..hosted(name, title, base_url, key_var)
    }
}

/// Every provider known by name.
pub const PROVIDERS: &[Provider] = &[
    hosted(
        "openai",
        "OpenAI",
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
    ),
    hosted(
        "anthropic",
        "Anthropic (OpenAI-compatible API)",
        "https://api.anthropic.com/v1",
        "ANTHROPIC_API_KEY",
    ),
    hosted(
        "gemini",
        "Google Gemini (OpenAI-compatible API)",
        "https://generativelanguage.googleapis.com/v1beta/openai",
        "GEMINI_API_KEY",
    ),
    hosted(
        "mistral",
        "Mistral",
        "https://api.mistral.ai/v1",
        "MISTRAL_API_KEY",
    ),
    hosted(
        "openrouter",
        "OpenRouter",
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
    ),
    hosted(
        "together",
        "Together AI",
        "https://api.together.xyz/v1",
        "TOGETHER_API_KEY",
    ),
    hosted(
        "fireworks",
        "Fireworks AI",
        "https://api.fireworks.ai/inference/v1",
        "FIREWORKS_API_KEY",
    ),
    hosted(
        "groq",
        "Groq",
        "https://api.groq.com/openai/v1",
        "GROQ_API_KEY",
    ),
    hosted(
        "cerebras",
        "Cerebras",
        "https://api.cerebras.ai/v1",
        "CEREBRAS_API_KEY",
    ),
    hosted(
        "deepinfra",
        "DeepInfra",
        "https://api.deepinfra.com/v1/openai",
        "DEEPINFRA_API_KEY",
    ),
    hosted(
        "hf",
        "Hugging Face Inference Providers",
        "https://router.huggingface.co/v1",
        "HF_TOKEN",
    ),
    hosted(
        "prime",
        "Prime Intellect Inference",
        "https://api.pinference.ai/api/v1",
        "PRIME_API_KEY",
    ),
    local(
        "vllm",
        "vLLM (vllm serve)",
        "http://localhost:8000/v1",
        "VLLM_API_KEY",
    ),
    local(
        "sglang",
        "SGLang (python -m sglang.launch_server)",
        "http://localhost:30000/v1",
        "SGLANG_API_KEY",
    ),
    local(
        "ollama",
        "Ollama",
        "http://localhost:11434/v1",
        "OLLAMA_API_KEY",
    ),
    local(
        "lmstudio",
        "LM Studio",
        "http://localhost:1234/v1",
        "LMSTUDIO_API_KEY",
    ),
    local(
        "mlx-lm",
        "mlx-lm (mlx_lm.server)",
        "http://localhost:8080/v1",
        "MLX_API_KEY",
    ),
    local(
        "llamacpp",
        "llama.cpp (llama-server)",
        "http://localhost:8080/v1",
        "LLAMACPP_API_KEY",
    ),
];

/// The providers the plugins config adds (`kind = "provider"`, a base URL and a key variable),
/// read once per process; an unreadable config adds none (`nenyax plugins` says why).
pub fn configured() -> &'static [Provider] {
    static CONFIGURED: std::sync::OnceLock<Vec<Provider>> = std::sync::OnceLock::new();
    CONFIGURED.get_or_init(|| {
        // Interned once per process: a Provider's fields are `&'static str` like the built-ins'.
        let keep = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        crate::plugins::config::entries()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.kind == crate::plugins::kinds::Kind::Provider)
            .filter_map(|e| {
                let base_url = e.base_url.clone()?;
                let local = ["://localhost", "://127.", "://[::1]"]
                    .iter()
                    .any(|h| base_url.contains(h));
                let key_var = e.key_var.clone().unwrap_or_else(|| {
                    format!("{}_API_KEY", e.name.to_ascii_uppercase().replace('-', "_"))
                });
                Some(Provider {
                    title: keep(e.summary.clone().unwrap_or_else(|| e.name.clone())),
                    name: keep(e.name),
                    base_url: keep(base_url),
                    key_var: keep(key_var),
                    kind: if local {
                        ProviderKind::Local
                    } else {
                        ProviderKind::Hosted
                    },
                })
            })
            .collect()
    })
}

/// The provider called `name` (case-insensitive; `-` and `_` alike): a built-in one, else one
/// the plugins config adds.
pub fn provider(name: &str) -> Result<&'static Provider> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('_', "-");
    let want = norm(name);
    PROVIDERS
        .iter()
        .chain(configured())
        .find(|p| norm(p.name) == want)
        .ok_or_else(|| {
            let names: Vec<&str> = PROVIDERS
                .iter()
                .chain(configured())
                .map(|p| p.name)
                .collect();
            let hint = crate::error::suggest(&want, names.iter().copied())
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            Error::Config(format!(
                "unknown model provider `{name}`{hint}; known: {}",
                names.join(", ")
            ))
        })
}

impl Provider {
    /// The variable that overrides the base URL: `NENYAX_VLLM_BASE_URL`, ...
    pub fn base_url_var(&self) -> String {
        format!(
            "NENYAX_{}_BASE_URL",
            self.name.to_ascii_uppercase().replace('-', "_")
        )
    }

    /// The base URL in effect (the override, else the default).
    pub fn base_url(&self) -> String {
        std::env::var(self.base_url_var())
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| self.base_url.to_string())
    }

    /// Whether it can be used now, and if not what it still needs. Hosted: the key variable is
    /// set. Local: a server answers `GET /models` within half a second.
    pub fn readiness(&self) -> std::result::Result<(), String> {
        match self.kind {
            ProviderKind::Hosted => match std::env::var(self.key_var) {
                Ok(k) if !k.is_empty() => Ok(()),
                _ => Err(format!("export {} with your API key", self.key_var)),
            },
            ProviderKind::Local => {
                // Shown to the user: a login in the override stays hidden.
                let url = format!("{}/models", self.base_url());
                let shown = crate::openai::redact_url(&url);
                let probe = Client::new(RetryPolicy::once(Duration::from_millis(500)));
                match probe.get(&url, &[]) {
                    Ok(r) if (200..300).contains(&r.status()) => Ok(()),
                    Ok(r) => Err(format!("{shown} answered HTTP {}", r.status())),
                    Err(_) => Err(format!(
                        "no server at {shown}; start {} (or set {})",
                        self.title,
                        self.base_url_var()
                    )),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_and_typos_are_named() {
        assert_eq!(
            provider("OpenRouter").unwrap().base_url,
            "https://openrouter.ai/api/v1"
        );
        assert_eq!(provider("mlx_lm").unwrap().name, "mlx-lm");
        let e = provider("opnai").unwrap_err().to_string();
        assert!(e.contains("did you mean `openai`"), "{e}");
    }

    #[test]
    fn a_hosted_provider_without_its_key_says_which_variable() {
        // A variable no test environment sets.
        let p = Provider {
            key_var: "NENYAX_TEST_SURELY_UNSET_KEY",
            ..*provider("groq").unwrap()
        };
        let e = p.endpoint("m").unwrap_err().to_string();
        assert!(e.contains("NENYAX_TEST_SURELY_UNSET_KEY"), "{e}");
        assert!(p
            .readiness()
            .unwrap_err()
            .contains("NENYAX_TEST_SURELY_UNSET_KEY"));
    }

    #[test]
    fn a_local_provider_is_ready_only_when_a_server_answers() {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        std::thread::spawn(move || {
            for req in server.incoming_requests() {
                let _ = req.respond(tiny_http::Response::from_string(r#"{"data":[]}"#));
            }
        });
        let mut p = *provider("vllm").unwrap();
        let url = format!("http://127.0.0.1:{port}/v1");
        p.base_url = Box::leak(url.into_boxed_str());
        // The override variable would win; this test relies on it being unset.
        if std::env::var_os(p.base_url_var()).is_none() {
            assert_eq!(p.readiness(), Ok(()));
        }
        p.base_url = "http://127.0.0.1:9/v1";
        if std::env::var_os(p.base_url_var()).is_none() {
            assert!(p.readiness().unwrap_err().contains("no server"));
        }
    }
}
