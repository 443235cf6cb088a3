//! `cni-installer`: being built for issue 20; this placeholder only keeps
//! the workspace compiling until it lands.

fn main() {
    eprintln!("cni-installer: not built yet");
    std::process::exit(1);
}
