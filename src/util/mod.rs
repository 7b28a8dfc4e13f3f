//! Small shared helpers.

pub mod rng;
