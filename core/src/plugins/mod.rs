//! Plugins: drivers as executables in any language (the bridge's JSON-lines protocol), and the
//! other kinds as shared libraries exporting a versioned C vtable, found through the plugins
//! config or registered at run time through the C ABI (docs/plugins.md).

#[cfg(feature = "python")]
pub mod external;
pub mod kinds;

pub use kinds::{Kind, PLUGIN_ABI_VERSION};
