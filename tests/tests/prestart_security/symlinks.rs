//! The symlink attacks of `prestart_security.rs`: a canary host directory, one image symlink that
//! points at it (absolute and relative), and the check that the hook mounts nothing outside the
//! container root and leaves the canary untouched.

use std::path::{Path, PathBuf};

use super::prestart_support::{
    host_mountinfo, invoke_prestart, snapshot, text, unique_id, Bundle, Node, Sleeper,
};

/// A host directory with one file, that nothing may touch.
pub struct Canary {
    pub dir: PathBuf,
    before: Vec<String>,
}

impl Canary {
    pub fn new(tag: &str) -> Canary {
        let dir = PathBuf::from("/tmp").join(unique_id(&format!("canary-{tag}")));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("keep"), "host file\n").unwrap();
        let before = snapshot(&dir);
        Canary { dir, before }
    }

    pub fn assert_untouched(&self, ctx: &str) {
        assert_eq!(
            snapshot(&self.dir),
            self.before,
            "{ctx}: host dir {} changed",
            self.dir.display()
        );
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// New mount points of the sleeper (compared with `before`), each must be inside `rootfs`.
pub fn assert_new_mounts_inside(s: &Sleeper, before: &[String], rootfs: &Path, ctx: &str) -> usize {
    let rootfs = rootfs.canonicalize().unwrap();
    let new: Vec<String> = s
        .mount_points()
        .into_iter()
        .filter(|m| !before.contains(m))
        .collect();
    for m in &new {
        assert!(
            Path::new(m).starts_with(&rootfs),
            "{ctx}: mount {m} is outside the rootfs {}",
            rootfs.display()
        );
    }
    new.len()
}

/// Runs the hook directly for a bundle whose rootfs has `link` (relative to the rootfs) pointing
/// at `target`, and checks nothing escaped the rootfs. The link target, read inside the root, is
/// `<rootfs>/<canary path>`: when that does not exist the link dangles and the hook must refuse
/// before changing anything; when the image has it, the injection must land there.
pub fn symlink_case(n: &Node, link: &str, target: &str, canary: &Canary, inside: Option<&str>) {
    let ctx = format!("{link} -> {target} (target in root: {})", inside.is_some());
    let mut b = Bundle::new("true", true);
    let link_path = b.rootfs.join(link);
    if link_path.is_dir() {
        std::fs::remove_dir_all(&link_path).unwrap();
    }
    std::fs::create_dir_all(link_path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, &link_path).unwrap();
    let in_root = b.rootfs.join(canary.dir.strip_prefix("/").unwrap());
    if inside.is_some() {
        std::fs::create_dir_all(&in_root).unwrap();
    }
    b.env("NVIDIA_VISIBLE_DEVICES=0");
    b.write();
    let rootfs_before = snapshot(&b.rootfs);
    let sleeper = Sleeper::start("sym");
    let mounts_before = sleeper.mount_points();
    let host_before = host_mountinfo();
    let out = invoke_prestart(&n.config, &unique_id("sym"), sleeper.pid(), b.dir.path());
    let (stdout, stderr) = text(&out);
    assert!(
        stdout.is_empty(),
        "{ctx}: the hook wrote to stdout: {stdout}"
    );
    canary.assert_untouched(&ctx);
    assert_eq!(
        host_mountinfo(),
        host_before,
        "{ctx}: host mount table changed"
    );
    let new = assert_new_mounts_inside(&sleeper, &mounts_before, &b.rootfs, &ctx);
    match inside {
        None => {
            assert!(
                !out.status.success(),
                "{ctx}: a dangling link must be refused"
            );
            assert!(
                stderr.contains("dangles inside the container root"),
                "{ctx}: {stderr}"
            );
            assert_eq!(new, 0, "{ctx}: refused, yet something was mounted");
            assert_eq!(
                snapshot(&b.rootfs),
                rootfs_before,
                "{ctx}: refused, yet the rootfs changed"
            );
        }
        Some(file) => {
            // Followed *inside* the rootfs (RESOLVE_IN_ROOT): what was made is under it.
            assert!(out.status.success(), "{ctx}: {stderr}");
            assert!(new > 0, "{ctx}: nothing was mounted");
            let made = in_root.join(file);
            assert!(made.exists(), "{ctx}: {} should exist", made.display());
        }
    }
}

/// The four variants for one link: absolute and relative (with more `..` than the rootfs is
/// deep, so on the host it would reach the canary), dangling and present inside the root.
pub fn symlink_cases(n: &Node, link: &str, tag: &str, file: &str) {
    let canary = Canary::new(tag);
    let abs = canary.dir.to_str().unwrap().to_string();
    let rel = format!("{}{}", "../".repeat(16), abs.trim_start_matches('/'));
    for target in [&abs, &rel] {
        symlink_case(n, link, target, &canary, None);
        symlink_case(n, link, target, &canary, Some(file));
    }
}
