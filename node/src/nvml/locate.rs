//! Where the driver root's NVML library is.
//!
//! Only the driver root's own library is acceptable: its `ld.so.cache` names the path (inside the
//! root), symlinks are resolved inside the root, and the standard library folders are the fallback
//! for roots without a cache. An explicit path (`--nvml-lib`) overrides both.

use std::path::{Path, PathBuf};

use crate::error::NodeError;
use crate::ldcache::{LdCache, LibClass};
use crate::rootfs::RootResolver;

/// SONAME of NVML.
pub const NVML_SONAME: &str = "libnvidia-ml.so.1";

/// Library folders searched (inside the driver root) when its `ld.so.cache` has no entry.
pub const STANDARD_LIB_DIRS: [&str; 4] = [
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
];

/// Host path of the NVML library to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlLocation {
    path: PathBuf,
}

impl NvmlLocation {
    /// Uses exactly this (host) path.
    pub fn explicit(path: &Path) -> Self {
        NvmlLocation {
            path: path.to_path_buf(),
        }
    }

    /// Host path of the library.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Finds NVML under `driver_root` (reads its `/etc/ld.so.cache`), or uses `explicit`.
    /// A missing cache is not an error (the standard folders are searched); a corrupt one is.
    pub fn locate(driver_root: &Path, explicit: Option<&Path>) -> Result<Self, NodeError> {
        if let Some(p) = explicit {
            return Ok(Self::explicit(p));
        }
        let cache_path = crate::inventory::join_under(driver_root, Path::new("/etc/ld.so.cache"));
        let cache = match LdCache::load(&cache_path) {
            Ok(c) => Some(c),
            Err(NodeError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                None
            }
            Err(e) => return Err(e),
        };
        Self::find(&mut RootResolver::new(driver_root), cache.as_ref())
    }

    /// Finds NVML with an already parsed cache and resolver (discovery shares both).
    pub fn find(resolver: &mut RootResolver, cache: Option<&LdCache>) -> Result<Self, NodeError> {
        let from_cache = cache
            .and_then(|c| c.lookup(NVML_SONAME, LibClass::Native))
            .map(|e| e.path.clone());
        let candidates = from_cache.into_iter().chain(
            STANDARD_LIB_DIRS
                .iter()
                .map(|d| Path::new(d).join(NVML_SONAME)),
        );
        for candidate in candidates {
            if let Ok(real) = resolver.resolve(&candidate) {
                let host = resolver.host(&real);
                if host.is_file() {
                    return Ok(NvmlLocation { path: host });
                }
            }
        }
        Err(NodeError::NvmlNotFound {
            root: resolver.root().to_path_buf(),
            searched: STANDARD_LIB_DIRS.join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{can_ldconfig, FakeRoot};

    #[test]
    fn finds_nvml_through_the_roots_cache_and_fallback_dirs() {
        let root = FakeRoot::new();
        let err = NvmlLocation::locate(root.root(), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("libnvidia-ml.so.1 not found") && err.contains("--nvml-lib"),
            "{err}"
        );
        // Fallback folder, with merged-usr /lib64 -> usr/lib64 and a SONAME link.
        root.write("/usr/lib64/libnvidia-ml.so.570.1", "");
        root.symlink("libnvidia-ml.so.570.1", "/usr/lib64/libnvidia-ml.so.1");
        root.symlink("usr/lib64", "/lib64");
        let loc = NvmlLocation::locate(root.root(), None).unwrap();
        assert_eq!(loc.path(), root.path("/usr/lib64/libnvidia-ml.so.570.1"));
        let explicit =
            NvmlLocation::locate(root.root(), Some(Path::new("/x/libnvidia-ml.so.1"))).unwrap();
        assert_eq!(explicit.path(), Path::new("/x/libnvidia-ml.so.1"));
        // A corrupt cache is an error naming the file.
        root.write("/etc/ld.so.cache", "glibc-ld.so.cache1.1");
        let err = NvmlLocation::locate(root.root(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("etc/ld.so.cache"), "{err}");
    }

    #[test]
    fn cache_entry_wins_and_absolute_links_stay_in_root() {
        if !can_ldconfig() {
            return;
        }
        let mut root = FakeRoot::new();
        root.lib(
            "/opt/nv/lib",
            "libnvidia-ml.so.570.1",
            "libnvidia-ml.so.1",
            false,
            false,
        );
        root.ldconfig("new");
        // Replace the SONAME link by an absolute one: it must resolve inside the root.
        std::fs::remove_file(root.path("/opt/nv/lib/libnvidia-ml.so.1")).unwrap();
        root.symlink(
            "/opt/nv/lib/libnvidia-ml.so.570.1",
            "/opt/nv/lib/libnvidia-ml.so.1",
        );
        let loc = NvmlLocation::locate(root.root(), None).unwrap();
        assert_eq!(loc.path(), root.path("/opt/nv/lib/libnvidia-ml.so.570.1"));
    }
}
