// Linked statically like the loopback plugin; the reasons are there.
include!("../loopback/build.rs");
