//! Nenyax: one contract for every RL environment.
//!
//! Load an environment from any framework by URI, drive it with any policy or model, and get
//! back the same judged [`Trajectory`]; measure how far it really gets with [`conformance`].
//!
//! ```
//! use nenyax::{load, RolloutOptions};
//!
//! let env = load("builtin:arithmetic?size=10").unwrap();
//! let oracle = env.reference_policy(None).unwrap();
//! let traj = env.rollout(&oracle, &RolloutOptions::default());
//! assert_eq!(traj.score(), Some(1.0));
//! ```
//!
//! The library is synchronous (no async runtime) and every entry point that runs user or
//! environment code catches panics, so it is safe to embed behind a C ABI.

#![warn(missing_docs)]

pub mod atif;
#[cfg(feature = "python")]
pub mod bridge;
pub mod conformance;
pub mod contract;
pub mod define;
pub mod driver;
pub mod drivers;
pub mod env;
pub mod error;
pub mod export;
pub mod hubs;
// Entry points for the fuzz harness (tests/fuzz.rs); not part of the supported API.
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "servers")]
mod http_server;
pub mod integrations;
pub mod judges;
pub mod kernels;
pub mod learn;
pub mod limits;
pub mod models;
pub mod openai;
// Shared by the openenv: driver (client frames) and `nenyax serve` (server frames); each alone
// uses only its side.
#[cfg(any(feature = "openenv", feature = "servers"))]
#[cfg_attr(not(all(feature = "openenv", feature = "servers")), allow(dead_code))]
mod openenv_wire;
pub mod plugins;
pub mod policy;
mod random_policy;
// Without the `servers` feature, a stand-in with the same names whose `ModelServer::start` says
// so.
#[cfg_attr(not(feature = "servers"), path = "recorder_unavailable.rs")]
pub mod recorder;
pub mod replay;
pub mod rng;
pub mod router;
pub mod runner;
pub mod sandbox;
// Without the `servers` feature, a stand-in with the same names whose `Server::start` says so.
#[cfg_attr(not(feature = "servers"), path = "serve_unavailable.rs")]
pub mod serve;
pub mod telemetry;
pub mod train;
pub mod uri;

// Old homes of the provider presets and the Responses-API conversions.
pub use models::providers;

/// A Nenyax config file: the file variable `var` names, else `name` under
/// `$XDG_CONFIG_HOME/nenyax`, `~/.config/nenyax`, or (no home) `/etc/nenyax`; one rule for every
/// config so users find them all in one place.
pub fn config_file(var: &str, name: &str) -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("/etc"))
        .join("nenyax")
        .join(name)
}
pub use openai::responses;

pub use conformance::{check, check_uri, CheckOptions, Report, Tier};
pub use contract::*;
pub use driver::{Driver, Readiness};
pub use env::{Environment, Episode, RolloutOptions, Session};
pub use error::{Error, Result};
pub use judges::{with_judge, Judge};
pub use policy::{
    CallLog, ChatModel, ChatPolicy, Endpoint, EpisodeContext, FunctionModel, Phase, Policy,
};
pub use recorder::{Backend, ModelServer, Recording, Upstream};
pub use router::{load, Registry};
pub use runner::{plan, Job, Runner};
pub use serve::{ServeOptions, Server};
pub use telemetry::Telemetry;
pub use train::{train, Learner, TrainOptions, TrainReport};
