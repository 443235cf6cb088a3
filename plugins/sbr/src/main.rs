//! `sbr`: being written (issue 18).
fn main() {}
