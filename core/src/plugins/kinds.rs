//! The extension points and the version of each one's interface: a leaf of `plugins` that the
//! loaders import, so that none of them imports the module that re-exports them.

use serde::Serialize;

/// Version of the plugin descriptor a shared library exports (`nenyax_plugin_t`); a library built
/// for another one is refused with both versions named.
pub const PLUGIN_ABI_VERSION: u32 = 1;

/// Version of `nenyax_judge_vtable_t`.
pub const JUDGE_VTABLE_VERSION: u32 = 1;

/// What a plugin extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Loads environments of a native format by URI scheme.
    Driver,
    /// Runs commands in isolation (Harbor tasks, code judges).
    Sandbox,
    /// Scores a finished episode.
    Judge,
    /// Improves a policy from judged groups.
    Learner,
    /// A model provider (an OpenAI-compatible service by name).
    Provider,
    /// Lists and fetches environments from a public hub.
    Hub,
    /// Receives episodes and metrics off the hot path.
    Telemetry,
}

impl Kind {
    /// Every kind, in the order `nenyax plugins --kinds` lists them.
    pub const ALL: [Kind; 7] = [
        Kind::Driver,
        Kind::Sandbox,
        Kind::Judge,
        Kind::Learner,
        Kind::Provider,
        Kind::Hub,
        Kind::Telemetry,
    ];

    /// The name configs and the CLI spell it with.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Driver => "driver",
            Kind::Sandbox => "sandbox",
            Kind::Judge => "judge",
            Kind::Learner => "learner",
            Kind::Provider => "provider",
            Kind::Hub => "hub",
            Kind::Telemetry => "telemetry",
        }
    }

    /// Parse a kind's name, with the accepted names in the error.
    pub fn parse(s: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown plugin kind `{s}`; the kinds are {}",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
