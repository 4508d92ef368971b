//! The config-dir watcher notices a change however many entries the directory holds (#22: it
//! looked at the first 256 entries in directory order only).

use super::*;

/// A directory of `n` config files (`cfg-0000`…); returns the name of the entry at position
/// `at` in directory order.
fn crowded(dir: &Path, n: usize, at: usize) -> PathBuf {
    for i in 0..n {
        std::fs::write(dir.join(format!("cfg-{i:04}")), "version: v1\n").expect("write");
    }
    std::fs::read_dir(dir)
        .expect("read_dir")
        .nth(at)
        .expect("entry")
        .expect("entry")
        .path()
}

#[test]
fn a_change_behind_the_first_256_entries_is_noticed() {
    let d = tempfile::tempdir().expect("tmp");
    let late = crowded(d.path(), 300, 280);
    let before = stamp(&[d.path().to_path_buf()]);
    // Edited in place: neither the directory nor any other entry changes.
    std::fs::write(&late, "version: v1\nflags: {}\n").expect("edit");
    let after = stamp(&[d.path().to_path_buf()]);
    assert_ne!(before, after, "{} changed unnoticed", late.display());
}

#[test]
fn a_configmap_data_swap_is_noticed_however_crowded() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path();
    crowded(dir, MAX_ENTRIES + 50, 0);
    let gen = |n: u32, text: &str| {
        let g = dir.join(format!("..2026_11_28_0{n}"));
        std::fs::create_dir(&g).expect("mkdir");
        std::fs::write(g.join("t4"), text).expect("write");
        g
    };
    let first = gen(1, "version: v1\n");
    std::os::unix::fs::symlink(first.file_name().expect("name"), dir.join(DATA_LINK))
        .expect("link");
    let before = stamp(&[dir.to_path_buf()]);
    assert!(
        before
            .iter()
            .any(|m| m.path == dir.join(DATA_LINK) && m.link.is_some()),
        "..data is stamped"
    );
    // The kubelet's atomic writer: new generation, `..data_tmp` renamed over `..data`.
    let second = gen(2, "version: v1\n");
    std::os::unix::fs::symlink(second.file_name().expect("name"), dir.join("..data_tmp"))
        .expect("link");
    std::fs::rename(dir.join("..data_tmp"), dir.join(DATA_LINK)).expect("swap");
    let data = |s: &Stamp| {
        s.iter()
            .find(|m| m.path == dir.join(DATA_LINK))
            .map(|m| m.link.clone())
    };
    let after = stamp(&[dir.to_path_buf()]);
    assert_ne!(data(&before), data(&after));
    assert!(after.len() <= MAX_ENTRIES + 2, "bounded: {}", after.len());
}
