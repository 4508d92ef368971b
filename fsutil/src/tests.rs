use super::*;
use std::os::unix::fs::MetadataExt;

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn content_is_replaced_by_a_new_inode_and_no_temp_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    fs::write(&p, b"old").unwrap();
    let ino = fs::metadata(&p).unwrap().ino();
    write_atomic(&p, b"new", 0o644).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"new");
    assert_ne!(
        fs::metadata(&p).unwrap().ino(),
        ino,
        "renamed, not rewritten"
    );
    assert_eq!(entries(dir.path()), ["config.json"]);
}

#[test]
fn a_new_file_gets_the_mode_exactly_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.toml");
    // 0o666 is more than any usual umask lets open() give.
    write_atomic(&p, b"a = 1\n", 0o666).unwrap();
    assert_eq!(mode(&p), 0o666);
    let q = dir.path().join("state");
    AtomicWriter::new(0o600)
        .keep_mode()
        .write(&q, b"s")
        .unwrap();
    assert_eq!(mode(&q), 0o600, "keep_mode: a new file gets the default");
}

#[test]
fn keep_mode_keeps_the_replaced_files_mode_a_fixed_mode_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.toml");
    fs::write(&p, b"old").unwrap();
    fs::set_permissions(&p, Permissions::from_mode(0o640)).unwrap();
    let w = AtomicWriter::new(0o644).keep_mode().keep_owner();
    assert_eq!(w.write(&p, b"new").unwrap(), Outcome::Written);
    assert_eq!(mode(&p), 0o640);
    write_atomic(&p, b"newer", 0o644).unwrap();
    assert_eq!(mode(&p), 0o644);
}

#[test]
fn keep_owner_keeps_uid_and_gid_as_root() {
    if !nix_is_root() {
        return; // chown needs root; CI runs as root.
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("owned");
    fs::write(&p, b"old").unwrap();
    std::os::unix::fs::chown(&p, Some(1234), Some(5678)).unwrap();
    AtomicWriter::new(0o644)
        .keep_owner()
        .write(&p, b"new")
        .unwrap();
    let m = fs::metadata(&p).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    write_atomic(&p, b"newer", 0o644).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().uid(), 0, "not kept unless asked");
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_failed_rename_keeps_what_was_there_and_leaves_no_temp() {
    let dir = tempfile::tempdir().unwrap();
    // A non-empty directory that appeared after the check: the rename itself fails.
    let busy = dir.path().join("busy");
    fs::create_dir(&busy).unwrap();
    fs::write(busy.join("keep"), b"x").unwrap();
    let err = AtomicWriter::new(0o644)
        .publish(dir.path(), "busy".as_ref(), &busy, b"data", 0o644, None)
        .unwrap_err();
    assert!(
        matches!(
            err,
            WriteError::Io {
                step: Step::Rename,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("cannot rename into place"),
        "{err}"
    );
    assert!(busy.join("keep").exists());
    assert_eq!(entries(dir.path()), ["busy"]);
}

#[test]
fn a_missing_directory_is_named_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("f");
    let err = write_atomic(&missing, b"x", 0o644).unwrap_err();
    assert!(
        matches!(
            err,
            WriteError::Io {
                step: Step::CreateTemp,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("no-such-dir"), "{err}");
    assert_eq!(err.path(), dir.path().join("no-such-dir"));
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn refuses_a_symlink_a_directory_and_a_fifo_and_leaves_them() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    fs::write(&target, b"victim").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let sub = dir.path().join("sub");
    fs::create_dir(&sub).unwrap();
    fs::write(sub.join("keep"), b"x").unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (p, what) in [(&link, "symlink"), (&sub, "directory"), (&fifo, "FIFO")] {
        for w in [
            AtomicWriter::new(0o644),
            AtomicWriter::new(0o644).skip_unchanged(),
        ] {
            let err = w.write(p, b"new").unwrap_err();
            assert!(
                matches!(&err, WriteError::NotRegular { what: w, .. } if *w == what),
                "{err}"
            );
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }
    }
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read(&target).unwrap(), b"victim");
    assert!(sub.join("keep").exists());
    assert_eq!(entries(dir.path()), ["fifo", "link", "sub", "target"]);
}

#[test]
fn an_ownership_check_refusal_leaves_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("spec.json");
    fs::write(&p, b"vendor: other").unwrap();
    let check = |old: &[u8]| {
        if old.starts_with(b"vendor: us") {
            Ok(())
        } else {
            Err(NotOurs::new("another vendor wrote it"))
        }
    };
    let w = AtomicWriter::new(0o644).owner_check(&check, 1024);
    let err = w.write(&p, b"vendor: us\n").unwrap_err();
    assert!(matches!(err, WriteError::NotOurs { .. }), "{err}");
    assert!(err.to_string().contains("another vendor wrote it"), "{err}");
    assert_eq!(fs::read(&p).unwrap(), b"vendor: other");
    assert_eq!(entries(dir.path()), ["spec.json"]);
    // Ours: replaced. Too large to check: refused.
    fs::write(&p, b"vendor: us, old").unwrap();
    assert_eq!(w.write(&p, b"vendor: us\n").unwrap(), Outcome::Written);
    fs::write(&p, vec![b'v'; 2000]).unwrap();
    let err = w.write(&p, b"vendor: us\n").unwrap_err();
    assert!(
        matches!(err, WriteError::TooLarge { limit: 1024, .. }),
        "{err}"
    );
    assert_eq!(fs::read(&p).unwrap().len(), 2000);
    // No file: nothing to check.
    fs::remove_file(&p).unwrap();
    assert_eq!(w.write(&p, b"vendor: us\n").unwrap(), Outcome::Written);
}

#[test]
fn unchanged_content_is_not_rewritten_but_its_mode_is_set_right() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("inv.json");
    let w = AtomicWriter::new(0o644).skip_unchanged();
    assert_eq!(w.write(&p, b"{}\n").unwrap(), Outcome::Written);
    fs::set_permissions(&p, Permissions::from_mode(0o600)).unwrap();
    let before = fs::metadata(&p).unwrap();
    assert_eq!(w.write(&p, b"{}\n").unwrap(), Outcome::Unchanged);
    let after = fs::metadata(&p).unwrap();
    assert_eq!(
        (before.ino(), before.mtime(), before.mtime_nsec()),
        (after.ino(), after.mtime(), after.mtime_nsec())
    );
    assert_eq!(mode(&p), 0o644);
    assert_eq!(w.write(&p, b"{ }\n").unwrap(), Outcome::Written);
    assert_ne!(fs::metadata(&p).unwrap().ino(), before.ino());
    // Without skip_unchanged the same bytes are written again.
    let ino = fs::metadata(&p).unwrap().ino();
    write_atomic(&p, b"{ }\n", 0o644).unwrap();
    assert_ne!(fs::metadata(&p).unwrap().ino(), ino);
}

#[test]
fn a_non_durable_write_is_still_atomic_and_complete() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    fs::write(&p, b"old").unwrap();
    fs::set_permissions(&p, Permissions::from_mode(0o600)).unwrap();
    let w = AtomicWriter::new(0o644).keep_mode().durable(false);
    assert_eq!(w.write(&p, b"{\"new\":1}").unwrap(), Outcome::Written);
    assert_eq!(fs::read(&p).unwrap(), b"{\"new\":1}");
    assert_eq!(mode(&p), 0o600);
    assert_eq!(entries(dir.path()), ["config.json"]);
}

#[test]
fn concurrent_writers_leave_one_whole_file_and_no_temp() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("status.json");
    let contents: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 4096]).collect();
    std::thread::scope(|s| {
        let all = &contents;
        for c in all {
            let p = &p;
            s.spawn(move || {
                for _ in 0..20 {
                    write_atomic(p, c, 0o644).unwrap();
                    let now = fs::read(p).unwrap();
                    assert!(all.contains(&now), "a reader saw a mix");
                }
            });
        }
    });
    assert!(contents.contains(&fs::read(&p).unwrap()));
    assert_eq!(entries(dir.path()), ["status.json"]);
}

#[test]
fn a_path_without_a_file_name_is_an_error() {
    let err = write_atomic(Path::new("/"), b"x", 0o644).unwrap_err();
    assert!(matches!(err, WriteError::NoFileName { .. }), "{err}");
    let io = err.into_io();
    assert_eq!(io.kind(), io::ErrorKind::InvalidInput);
}
