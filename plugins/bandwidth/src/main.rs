//! `bandwidth`: being built for issue 19; this placeholder only keeps the
//! workspace compiling until the plugin lands.

fn main() {
    eprintln!("bandwidth: not built yet");
    std::process::exit(1);
}
