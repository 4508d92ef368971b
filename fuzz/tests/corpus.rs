//! Replays every kept input of `fuzz/corpus/<target>/` through its target: the seeds (from the
//! test suites and NVIDIA's documented examples) and every reproducer a fuzzer found, so a fixed
//! crash stays fixed in plain `cargo test`, without libFuzzer.

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_target_has_a_seed_corpus_and_passes_it() {
    let mut failed = Vec::new();
    for (name, target) in gpuhook_fuzz::TARGETS {
        let files = inputs(name);
        assert!(files.len() >= 5, "corpus/{name} has {} seeds", files.len());
        for file in files {
            let data = std::fs::read(&file).expect("read seed");
            if std::panic::catch_unwind(|| target(&data)).is_err() {
                failed.push(format!("{name}: {}", file.display()));
            }
        }
    }
    assert!(failed.is_empty(), "failing inputs:\n{}", failed.join("\n"));
}
