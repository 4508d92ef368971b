use super::*;
use crate::testutil::FakeRoot;
use std::ffi::OsStr;
use std::os::unix::fs::symlink;

#[test]
fn follows_links_inside_the_root_only() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    std::fs::create_dir_all(r.join("usr/lib/x86_64-linux-gnu")).unwrap();
    std::fs::write(r.join("usr/lib/x86_64-linux-gnu/libcuda.so.570.1"), b"").unwrap();
    symlink(
        "libcuda.so.570.1",
        r.join("usr/lib/x86_64-linux-gnu/libcuda.so.1"),
    )
    .unwrap();
    symlink("usr/lib", r.join("lib")).unwrap();
    // Absolute and `..`-escaping targets stay inside the root.
    symlink("/usr/lib/x86_64-linux-gnu/libcuda.so.1", r.join("abs")).unwrap();
    symlink(
        "../../../../../usr/lib/x86_64-linux-gnu/libcuda.so.1",
        r.join("usr/escape"),
    )
    .unwrap();
    symlink("loop2", r.join("loop1")).unwrap();
    symlink("loop1", r.join("loop2")).unwrap();
    let mut res = RootResolver::new(r);
    let real = PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.570.1");
    assert_eq!(
        res.resolve(Path::new("/lib/x86_64-linux-gnu/libcuda.so.1"))
            .unwrap(),
        real
    );
    assert_eq!(res.resolve(Path::new("/abs")).unwrap(), real);
    assert_eq!(res.resolve(Path::new("/usr/escape")).unwrap(), real);
    assert_eq!(
        res.resolve(Path::new("/../../usr/./lib/x86_64-linux-gnu/libcuda.so.1"))
            .unwrap(),
        real
    );
    assert_eq!(
        res.resolve(Path::new("/loop1")).unwrap_err().raw_os_error(),
        Some(libc::ELOOP)
    );
    let missing = res.resolve(Path::new("/lib/nothing")).unwrap_err();
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    assert_eq!(res.resolve(Path::new("/")).unwrap(), PathBuf::from("/"));
}

#[test]
fn a_walk_follows_at_most_forty_links_in_total_even_through_the_cache() {
    // a0 -> a1 -> ... -> a45 (a real dir): 45 links in one walk is ELOOP, as in the kernel,
    // also when the first resolution of a later link was cached by an earlier walk.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("a45")).unwrap();
    for i in (0..45).rev() {
        symlink(format!("a{}", i + 1), dir.path().join(format!("a{i}"))).unwrap();
    }
    let mut r = RootResolver::new(dir.path());
    assert_eq!(r.resolve(Path::new("/a10")).unwrap(), Path::new("/a45"));
    let err = r.resolve(Path::new("/a0")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
    let err = RootResolver::new(dir.path())
        .resolve(Path::new("/a0"))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
    assert_eq!(r.resolve(Path::new("/a5")).unwrap(), Path::new("/a45"));
}

#[test]
fn a_tree_of_links_is_bounded_not_exponential() {
    // l_k -> l_{k+1}/../l_{k+1}: each level doubles a naive walk; ours stops at 40 links.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("l60")).unwrap();
    for k in (0..60).rev() {
        let t = format!("l{}/../l{}", k + 1, k + 1);
        symlink(t, dir.path().join(format!("l{k}"))).unwrap();
    }
    let err = RootResolver::new(dir.path())
        .resolve(Path::new("/l0"))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
}

/// A root with a library folder reached through the merged-usr link, and links of every shape.
fn helper_root() -> FakeRoot {
    let root = FakeRoot::new();
    root.write("/usr/lib/x86_64-linux-gnu/libcuda.so.570.1", "");
    root.write("/only-in-root/bin/tool", "");
    for (target, link) in [
        ("libcuda.so.570.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        ("libgone.so.1", "/usr/lib/x86_64-linux-gnu/libdangling.so"),
        ("usr/lib", "/lib"),
        // Absolute and escaping targets name paths of the root, not of the host.
        ("/only-in-root/bin/tool", "/usr/abs-tool"),
        ("../../../../only-in-root/bin", "/usr/rel-bin"),
        ("loop2", "/loop1"),
        ("loop1", "/loop2"),
    ] {
        root.symlink(target, link);
    }
    root
}

/// Two resolvers that must give the same answers: one looks in the library folder through the
/// root's descriptor, the other has that folder open and looks in it by name.
fn both_ways(root: &FakeRoot) -> [RootResolver; 2] {
    let mut opened = RootResolver::new(root.root());
    opened
        .resolve_dir(Path::new("/usr/lib/x86_64-linux-gnu"))
        .unwrap();
    [RootResolver::new(root.root()), opened]
}

#[test]
fn exists_is_lstat_inside_the_root() {
    let root = helper_root();
    for mut r in both_ways(&root) {
        exists_cases(&mut r);
    }
    assert!(!RootResolver::new(&root.path("/no-root")).exists(Path::new("/lib")));
}

fn exists_cases(r: &mut RootResolver) {
    for (path, exists) in [
        ("/lib/x86_64-linux-gnu/libcuda.so.1", true),
        ("/lib/x86_64-linux-gnu/libcuda.so.570.1", true),
        // lstat: a dangling link and a link loop exist, their targets do not matter.
        ("/lib/x86_64-linux-gnu/libdangling.so", true),
        ("/loop1", true),
        ("/lib/x86_64-linux-gnu/libnothing.so", false),
        ("/nodir/x", false),
        ("/loop1/x", false),
        // The folder is resolved in the root: through an escaping relative link.
        ("/usr/rel-bin/tool", true),
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.570.1/x", false),
        ("/usr/..", true),
        ("/", true),
    ] {
        assert_eq!(r.exists(Path::new(path)), exists, "{path}");
        assert_eq!(r.exists(Path::new(path)), exists, "{path}, asked again");
    }
}

#[test]
fn is_file_follows_links_inside_the_root() {
    let root = helper_root();
    for mut r in both_ways(&root) {
        is_file_cases(&mut r);
    }
}

fn is_file_cases(r: &mut RootResolver) {
    for (path, file) in [
        ("/lib/x86_64-linux-gnu/libcuda.so.1", true),
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.570.1", true),
        // `/only-in-root` exists in the root only: a host `stat` would say no.
        ("/usr/abs-tool", true),
        ("/usr/rel-bin/tool", true),
        ("/usr/lib", false),
        ("/lib", false),
        ("/lib/x86_64-linux-gnu/libdangling.so", false),
        ("/loop1", false),
        ("/lib/x86_64-linux-gnu/missing", false),
        ("/", false),
    ] {
        assert_eq!(r.is_file(Path::new(path)), file, "{path}");
    }
}

#[test]
fn resolve_dir_opens_a_real_folder_once() {
    let root = helper_root();
    let mut r = RootResolver::new(root.root());
    let (real, links, id) = r.resolve_dir(Path::new("/lib/x86_64-linux-gnu")).unwrap();
    assert_eq!(
        (real.as_path(), links),
        (Path::new("/usr/lib/x86_64-linux-gnu"), 1)
    );
    let again = r
        .resolve_dir(Path::new("/usr/lib/x86_64-linux-gnu"))
        .unwrap();
    assert_eq!((again.1, again.2), (0, id), "same folder, same descriptor");
    assert_eq!(
        readlink_at(r.fd(id), OsStr::new("libcuda.so.1")).unwrap(),
        Path::new("libcuda.so.570.1")
    );
    let not_link = readlink_at(r.fd(id), OsStr::new("libcuda.so.570.1")).unwrap_err();
    assert_eq!(not_link.raw_os_error(), Some(libc::EINVAL));
    let st = lstat_at(r.fd(id), OsStr::new("libcuda.so.1")).unwrap();
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFLNK);
    for (path, errno) in [
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", libc::ENOTDIR),
        ("/usr/nothing", libc::ENOENT),
        ("/loop1", libc::ELOOP),
        ("/lib/x86_64-linux-gnu/libdangling.so", libc::ENOENT),
    ] {
        let err = r.resolve_dir(Path::new(path)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(errno), "{path}: {err}");
    }
    // A walk through a file fails as the kernel's does.
    let err = r
        .resolve(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.570.1/x"))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR), "{err}");
}

#[test]
fn answers_come_from_the_cache_once_known() {
    // After a first resolution the file is removed: the resolver answers from what it learnt
    // (no second look-up), and a miss stays a miss.
    let root = helper_root();
    let mut r = RootResolver::new(root.root());
    let lib = Path::new("/lib/x86_64-linux-gnu/libcuda.so.1");
    let real = r.resolve(lib).unwrap();
    assert!(!r.exists(Path::new("/usr/lib/x86_64-linux-gnu/libnone.so")));
    std::fs::remove_file(root.path("/usr/lib/x86_64-linux-gnu/libcuda.so.1")).unwrap();
    root.write("/usr/lib/x86_64-linux-gnu/libnone.so", "");
    assert_eq!(r.resolve(lib).unwrap(), real);
    assert!(r.exists(lib));
    assert!(!r.exists(Path::new("/usr/lib/x86_64-linux-gnu/libnone.so")));
    assert_eq!(
        r.cached(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1")),
        Some((real.as_path(), 1))
    );
}
