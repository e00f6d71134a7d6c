//! Helpers shared by the store's integration tests.

pub(crate) mod postgres;
