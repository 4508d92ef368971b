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
    cache: HashMap<PathBuf, PathBuf>,
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
    /// path of the real file. Fails when a component is missing (`NotFound`) or on a link loop.
    pub fn resolve(&mut self, path: &Path) -> io::Result<PathBuf> {
        self.resolve_depth(path, 0)
    }

    fn resolve_depth(&mut self, path: &Path, depth: u32) -> io::Result<PathBuf> {
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
                    if let Some(hit) = self.cache.get(&next) {
                        cur = hit.clone();
                        continue;
                    }
                    if self.missing.contains(&next) {
                        return Err(io::Error::from_raw_os_error(libc::ENOENT));
                    }
                    let resolved = match std::fs::read_link(join_under(&self.root, &next)) {
                        Ok(target) => {
                            if depth >= MAX_LINKS {
                                return Err(io::Error::from_raw_os_error(libc::ELOOP));
                            }
                            let target = if target.is_absolute() {
                                target
                            } else {
                                cur.join(target)
                            };
                            self.resolve_depth(&target, depth + 1)?
                        }
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => next.clone(),
                        Err(e) => {
                            if e.kind() == io::ErrorKind::NotFound {
                                self.missing.insert(next);
                            }
                            return Err(e);
                        }
                    };
                    self.cache.insert(next, resolved.clone());
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
}
