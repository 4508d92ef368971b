//! `gpuhook-sim`: list the built-in node profiles and materialise one as a driver root.
fn main() {
    eprintln!("gpuhook-sim: not built yet");
    std::process::exit(2);
}
