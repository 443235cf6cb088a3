// Linked statically like the plugins (the reasons are in the loopback
// plugin's build script): the installer runs from a `FROM scratch` image.
include!("../../plugins/loopback/build.rs");
