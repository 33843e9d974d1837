//! One module per native format.

pub mod builtin;
