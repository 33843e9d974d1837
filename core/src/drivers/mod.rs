//! One module per native format.

pub mod builtin;
pub mod harbor;
pub mod nemo_gym;
pub mod openenv;
