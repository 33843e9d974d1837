//! The `define:` scheme: an environment from a TOML file of tasks and a declarative judge, no
//! code. The file format and the builders live in [`crate::define`]; this is only its driver.

use std::path::Path;
use std::sync::Arc;

use crate::define::load_file;
use crate::driver::Driver;
use crate::env::Environment;
use crate::error::Result;
use crate::uri::{ParamSpec, Params, Uri};

/// The `define:` scheme: an environment from a TOML file, no code.
pub struct DefineDriver;

impl Driver for DefineDriver {
    fn scheme(&self) -> &'static str {
        "define"
    }

    fn format(&self) -> &'static str {
        "nenyax.define"
    }

    fn summary(&self) -> &'static str {
        "an environment from a TOML file of tasks and a declarative judge: define:./capitals.toml"
    }

    fn params(&self, _target: &str) -> Vec<ParamSpec> {
        Vec::new()
    }

    fn load(&self, uri: &Uri) -> Result<Arc<dyn Environment>> {
        Params::check("define", uri, &self.params(&uri.target))?;
        load_file(Path::new(&uri.target), &uri.raw)
    }
}
