//! One module per native format, and the list of those built into this library.

pub mod builtin;
pub mod define;
#[cfg(feature = "harbor")]
pub mod harbor;
#[cfg(feature = "nemo_gym")]
pub mod nemo_gym;
#[cfg(feature = "openenv")]
pub mod openenv;
#[cfg(feature = "python")]
pub mod python;

use crate::driver::Driver;

/// Every driver compiled into this build, in the order `nenyax drivers` lists them.
pub fn built_in() -> Vec<Box<dyn Driver>> {
    vec![
        Box::new(builtin::BuiltinDriver),
        Box::new(define::DefineDriver),
        #[cfg(feature = "python")]
        Box::new(python::reasoning_gym()),
        #[cfg(feature = "python")]
        Box::new(python::gymnasium()),
        #[cfg(feature = "python")]
        Box::new(python::verifiers()),
        #[cfg(feature = "openenv")]
        Box::new(openenv::OpenEnvDriver),
        #[cfg(feature = "nemo_gym")]
        Box::new(nemo_gym::NemoGymDriver),
        #[cfg(feature = "harbor")]
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
pub const LEFT_OUT: &[LeftOut] = &[
    #[cfg(not(feature = "python"))]
    LeftOut {
        scheme: "reasoning_gym",
        what: "reasoning_gym (Python bridge)",
        feature: "python",
    },
    #[cfg(not(feature = "python"))]
    LeftOut {
        scheme: "gymnasium",
        what: "Gymnasium (Python bridge)",
        feature: "python",
    },
    #[cfg(not(feature = "python"))]
    LeftOut {
        scheme: "verifiers",
        what: "Verifiers (Python bridge)",
        feature: "python",
    },
    #[cfg(not(feature = "openenv"))]
    LeftOut {
        scheme: "openenv",
        what: "OpenEnv",
        feature: "openenv",
    },
    #[cfg(not(feature = "nemo_gym"))]
    LeftOut {
        scheme: "nemo_gym",
        what: "NeMo Gym",
        feature: "nemo_gym",
    },
    #[cfg(not(feature = "harbor"))]
    LeftOut {
        scheme: "harbor",
        what: "Harbor",
        feature: "harbor",
    },
];
