//! Plugins: drivers as executables in any language (the bridge's JSON-lines protocol), and the
//! other kinds as shared libraries exporting a versioned C vtable, found through the plugins
//! config or registered at run time through the C ABI (docs/plugins.md).

pub mod abi;
mod crash;
pub mod judge;
pub mod kinds;
pub mod library;

pub use abi::PluginInfo;
pub use kinds::{Kind, PLUGIN_ABI_VERSION};
pub use library::{find_judge, load_library, loaded, register};
