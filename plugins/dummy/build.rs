// Linked statically like the loopback plugin; the reasons are there.
include!("../../plugins/loopback/build.rs");
