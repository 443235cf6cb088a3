//! Being built for issue 20; this placeholder only keeps the workspace
//! compiling until the harness lands.
