//! The extension points and the version of each one's interface: a leaf of `plugins` that the
//! loaders import, so that none of them imports the module that re-exports them.

use serde::Serialize;

/// Version of the plugin descriptor a shared library exports (`nenyax_plugin_t`); a library built
/// for another one is refused with both versions named.
pub const PLUGIN_ABI_VERSION: u32 = 1;

/// Version of the bridge's JSON-lines protocol (docs/bridge.md) that executable drivers speak.
pub const DRIVER_PROTOCOL_VERSION: u32 = 1;

/// Version of a provider entry of the plugins config (`base_url`, `key_var`).
pub const PROVIDER_CONFIG_VERSION: u32 = 1;

/// Version of `nenyax_judge_vtable_t`.
pub const JUDGE_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_telemetry_vtable_t` (telemetry sinks from libraries).
pub const TELEMETRY_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_hub_vtable_t` (environment hubs from libraries).
pub const HUB_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_learner_vtable_t` (a host's learner through the C ABI).
pub const LEARNER_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_learner_plugin_vtable_t` (a learner from a shared library).
pub const LEARNER_PLUGIN_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_driver_vtable_t` (in-process drivers from libraries; the requests and
/// replies are those of [`DRIVER_PROTOCOL_VERSION`]).
pub const DRIVER_VTABLE_VERSION: u32 = 1;

/// Version of `nenyax_sandbox_vtable_t` (sandbox backends from libraries).
pub const SANDBOX_VTABLE_VERSION: u32 = 1;

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

/// How a kind is extended from outside the library, as `nenyax plugins --kinds` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Interface {
    /// The kind.
    pub kind: Kind,
    /// What a plugin of this kind implements (a protocol, a C vtable).
    pub interface: &'static str,
    /// The interface's version; `None` where this kind takes no third-party plugins yet.
    pub version: Option<u32>,
    /// How a plugin of this kind gets in.
    pub how: &'static str,
}

impl Kind {
    /// This kind's extension point. Kinds without a plugin interface yet say so rather than
    /// pretend: their built-in set is all there is (docs/plugins.md).
    pub fn interface(self) -> Interface {
        let (interface, version, how) = match self {
            Kind::Driver => (
                "bridge JSON-lines protocol (docs/bridge.md)",
                Some(DRIVER_PROTOCOL_VERSION),
                "an executable `nenyax-driver-<scheme>` on PATH, or `command = [...]` in the \
                 plugins config; in-process: `library = \"...\"` exporting \
                 nenyax_driver_vtable_t (version 1), the same protocol as calls",
            ),
            Kind::Judge => (
                "nenyax_judge_vtable_t (include/nenyax.h)",
                Some(JUDGE_VTABLE_VERSION),
                "a shared library in the plugins config, or nenyax_plugin_register from a host; \
                 picked by `type = \"plugin\", use = \"<name>\"` in a judge spec",
            ),
            Kind::Learner => (
                "nenyax_learner_plugin_vtable_t (include/nenyax.h)",
                Some(LEARNER_PLUGIN_VTABLE_VERSION),
                "a shared library in the plugins config (or nenyax_plugin_register), picked by \
                 `use = \"<name>\"` in [learner] or --learner <name>; a host's own learner \
                 through nenyax_train (nenyax_learner_vtable_t, version 1)",
            ),
            Kind::Provider => (
                "an OpenAI-compatible API: a base URL and a key variable (no code)",
                Some(PROVIDER_CONFIG_VERSION),
                "`kind = \"provider\"`, `base_url`, `key_var` in the plugins config; picked by \
                 --provider NAME (or {\"provider\": NAME} in an endpoint spec)",
            ),
            Kind::Telemetry => (
                "nenyax_telemetry_vtable_t (include/nenyax.h)",
                Some(TELEMETRY_VTABLE_VERSION),
                "a shared library in the plugins config, or nenyax_plugin_register from a host; \
                 picked by `--telemetry <name>` or `[[telemetry]] name = \"<name>\"`",
            ),
            Kind::Hub => (
                "nenyax_hub_vtable_t (include/nenyax.h)",
                Some(HUB_VTABLE_VERSION),
                "a shared library in the plugins config, or nenyax_plugin_register from a host; \
                 used by `nenyax search <name>` and `nenyax fetch <name>`",
            ),
            Kind::Sandbox => (
                "nenyax_sandbox_vtable_t (include/nenyax.h)",
                Some(SANDBOX_VTABLE_VERSION),
                "a shared library in the plugins config, or nenyax_plugin_register from a host; \
                 picked by name wherever a backend is (`nenyax sandbox-check <name>`, \
                 `harbor:DIR?backend=<name>`, {\"backend\": \"<name>\"} in sandbox options)",
            ),
        };
        Interface {
            kind: self,
            interface,
            version,
            how,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
