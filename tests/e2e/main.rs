//! End-to-end tests.
fn main() {}
