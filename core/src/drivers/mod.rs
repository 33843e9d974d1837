//! One module per native format, and the list of those built into this library.

pub mod builtin;
pub mod define;
pub mod harbor;
pub mod nemo_gym;
pub mod openenv;
pub mod python;

use crate::driver::Driver;

/// Every driver compiled into this build, in the order `nenyax drivers` lists them.
pub fn built_in() -> Vec<Box<dyn Driver>> {
    vec![
        Box::new(builtin::BuiltinDriver),
        Box::new(define::DefineDriver),
        Box::new(python::reasoning_gym()),
        Box::new(python::gymnasium()),
        Box::new(python::verifiers()),
        Box::new(openenv::OpenEnvDriver),
        Box::new(nemo_gym::NemoGymDriver),
        Box::new(harbor::HarborDriver),
    ]
}

/// A driver Nenyax has but this build left out (a Cargo feature turned off), so that its scheme
/// is reported as right but unavailable rather than as a typo.
pub struct LeftOut {
    /// URI scheme.
    pub scheme: &'static str,
    /// What it loads.
    pub what: &'static str,
    /// The Cargo feature of the `nenyax` crate that builds it.
    pub feature: &'static str,
}

impl LeftOut {
    /// Why it cannot load, and how to get it.
    pub fn missing(&self) -> String {
        format!(
            "the {} driver is not in this build of Nenyax (it was built without the `{}` \
             feature); rebuild with `--features {}`, or see `nenyax drivers` for what works here",
            self.what, self.feature, self.feature
        )
    }
}

/// The drivers this build left out.
pub const LEFT_OUT: &[LeftOut] = &[];
