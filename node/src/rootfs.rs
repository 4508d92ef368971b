//! Symlink resolution confined to a driver root.
//!
//! The paths the driver root's `ld.so.cache` gives are paths *inside* that root, and its symlinks
//! (`libcuda.so.1 -> libcuda.so.570.158.01`, merged-usr `/lib -> usr/lib`) must be followed inside
//! it too: an absolute link target means the root's `/`, and `..` never climbs above the root.
//! `std::fs::canonicalize` would do neither, and costs a syscall per component for every file; the
//! resolver remembers every component it has resolved, so a library directory is walked once and
//! each further file costs one `readlink`.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::inventory::join_under;

/// Most symlinks followed while resolving one path (Linux's limit).
const MAX_LINKS: u32 = 40;

/// Resolves paths inside `root`, caching resolved components.
#[derive(Debug)]
pub struct RootResolver {
    root: PathBuf,
    /// In-root path → (resolved path, links followed to resolve it), so a cache hit still
    /// counts toward the 40-link budget of the walk that uses it, as the kernel would.
    cache: HashMap<PathBuf, (PathBuf, u32)>,
    /// Resolved paths known not to exist (discovery probes many optional well-known paths).
    missing: HashSet<PathBuf>,
}

impl RootResolver {
    pub fn new(root: &Path) -> Self {
        RootResolver {
            root: root.to_path_buf(),
            cache: HashMap::new(),
            missing: HashSet::new(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Host path of a path inside the root (no resolution).
    pub fn host(&self, path: &Path) -> PathBuf {
        join_under(&self.root, path)
    }

    /// Resolves every symlink of the absolute in-root `path`, inside the root. Returns the in-root
    /// path of the real file. Fails when a component is missing (`NotFound`), or with `ELOOP` when
    /// the walk would follow more than 40 links in total (the kernel's MAXSYMLINKS), whatever
    /// the shape of the link graph.
    pub fn resolve(&mut self, path: &Path) -> io::Result<PathBuf> {
        let mut links = 0;
        self.resolve_counting(path, &mut links)
    }

    /// Resolves `path`, adding the links it follows to `links` (the whole walk's total).
    fn resolve_counting(&mut self, path: &Path, links: &mut u32) -> io::Result<PathBuf> {
        let eloop = || io::Error::from_raw_os_error(libc::ELOOP);
        let mut cur = PathBuf::from("/");
        for comp in path.components() {
            match comp {
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                // `cur` is already resolved, so lexical `..` is right; at `/` it stays at `/`.
                Component::ParentDir => {
                    cur.pop();
                }
                Component::Normal(name) => {
                    let next = cur.join(name);
                    if let Some((hit, used)) = self.cache.get(&next) {
                        *links = links.saturating_add(*used);
                        if *links > MAX_LINKS {
                            return Err(eloop());
                        }
                        cur = hit.clone();
                        continue;
                    }
                    if self.missing.contains(&next) {
                        return Err(io::Error::from_raw_os_error(libc::ENOENT));
                    }
                    let before = *links;
                    let resolved = match std::fs::read_link(join_under(&self.root, &next)) {
                        Ok(target) => {
                            *links += 1;
                            if *links > MAX_LINKS {
                                return Err(eloop());
                            }
                            let target = if target.is_absolute() {
                                target
                            } else {
                                cur.join(target)
                            };
                            self.resolve_counting(&target, links)?
                        }
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => next.clone(),
                        Err(e) => {
                            if e.kind() == io::ErrorKind::NotFound {
                                self.missing.insert(next);
                            }
                            return Err(e);
                        }
                    };
                    self.cache.insert(next, (resolved.clone(), *links - before));
                    cur = resolved;
                }
            }
        }
        Ok(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
