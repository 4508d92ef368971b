//! Resolving the library paths of the driver root's `ld.so.cache` in bulk (see [`LibResolver`]).

use std::io;
use std::path::{Path, PathBuf};

use crate::rootfs::{readlink_at, DirId, RootResolver, MAX_LINKS};

/// The real in-root path of the library files the cache lists: what [`RootResolver::resolve`]
/// gives, at a third of its cost. A library is `dir/name`, and a driver's libraries share a few
/// folders, so each folder is resolved (and opened) once; the file itself is a real file or a
/// link to a sibling (`libcuda.so.1 -> libcuda.so.<version>`, a SONAME link), followed here with
/// `readlinkat` on the folder's descriptor for up to [`SIBLING_HOPS`] links. What is learnt goes
/// into the resolver's cache, so a file reached again (`libcuda.so -> libcuda.so.1`, or a
/// library discovery already resolved) costs no syscall. Anything else (a target with a `/`, a
/// longer chain, an error) goes through the resolver's walk, so errors and odd layouts get
/// exactly its answer.
pub(super) struct LibResolver<'a> {
    resolver: &'a mut RootResolver,
    dirs: Vec<LibDir>,
}

/// A library folder of the cache, resolved.
struct LibDir {
    /// As the cache lists it.
    listed: PathBuf,
    /// Its real in-root path.
    real: PathBuf,
    /// Links followed to resolve it (they count toward a file's 40).
    links: u32,
    /// Its descriptor in the resolver.
    id: DirId,
}

/// Sibling links followed without the resolver (a SONAME link, a dev link to it, one spare).
const SIBLING_HOPS: u32 = 3;

impl<'a> LibResolver<'a> {
    pub(super) fn new(resolver: &'a mut RootResolver) -> Self {
        LibResolver {
            resolver,
            dirs: Vec::new(),
        }
    }

    pub(super) fn resolve(&mut self, path: &Path) -> io::Result<PathBuf> {
        match self.siblings(path) {
            Some(real) => Ok(real),
            None => self.resolver.resolve(path),
        }
    }

    /// `path` resolved through its folder and sibling links; `None` to leave it to the resolver.
    fn siblings(&mut self, path: &Path) -> Option<PathBuf> {
        let (dir, name) = (path.parent()?, path.file_name()?);
        let i = self.dir(dir)?;
        let LibDir {
            real: dir,
            links,
            id,
            ..
        } = self.dirs.get(i)?;
        // The in-root paths of the links followed so far, each to be remembered with its result.
        let mut chain: Vec<PathBuf> = Vec::new();
        let mut cur = dir.join(name);
        loop {
            if let Some((real, used)) = self.resolver.cached(&cur) {
                let real = real.to_path_buf();
                return self.learn(chain, cur, real, used, *links);
            }
            if chain.len() > usize::try_from(SIBLING_HOPS).ok()? {
                return None;
            }
            let name = cur.file_name()?;
            match readlink_at(self.resolver.fd(*id), name) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let real = cur.clone();
                    return self.learn(chain, cur, real, 0, *links);
                }
                Ok(target) if is_plain_name(&target) => {
                    let next = dir.join(target);
                    chain.push(std::mem::replace(&mut cur, next));
                }
                Err(e) => {
                    self.resolver.note_missing(cur, &e);
                    return None;
                }
                Ok(_) => return None,
            }
        }
    }

    /// Records in the resolver that each link of `chain`, then `last`, resolves to `real` (which
    /// `last` reaches through `used` links), and returns `real` when the whole walk, with the
    /// folder's `dir_links`, stays within the kernel's 40 links (else the resolver says ELOOP).
    fn learn(
        &mut self,
        chain: Vec<PathBuf>,
        last: PathBuf,
        real: PathBuf,
        used: u32,
        dir_links: u32,
    ) -> Option<PathBuf> {
        let hops = u32::try_from(chain.len()).ok()?;
        for (k, link) in (0u32..).zip(chain) {
            self.resolver.remember(link, real.clone(), hops - k + used);
        }
        if self.resolver.cached(&last).is_none() {
            self.resolver.remember(last, real.clone(), used);
        }
        (dir_links + hops + used <= MAX_LINKS).then_some(real)
    }

    /// The index of the resolved folder listed as `dir`.
    fn dir(&mut self, dir: &Path) -> Option<usize> {
        if let Some(i) = self
            .dirs
            .iter()
            .position(|d| d.listed.as_os_str() == dir.as_os_str())
        {
            return Some(i);
        }
        let (real, links, id) = self.resolver.resolve_dir(dir).ok()?;
        self.dirs.push(LibDir {
            listed: dir.to_path_buf(),
            real,
            links,
            id,
        });
        Some(self.dirs.len() - 1)
    }
}

/// A link target naming a file in the link's own folder (no `/`, not `.` or `..`).
fn is_plain_name(target: &Path) -> bool {
    let b = target.as_os_str().as_encoded_bytes();
    !b.is_empty() && !b.contains(&b'/') && b != b"." && b != b".."
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::FakeRoot;

    const LIB: &str = "/usr/lib/x86_64-linux-gnu";

    /// A driver folder reached through a merged-usr link, with every shape a cache entry takes.
    fn layout() -> FakeRoot {
        let root = FakeRoot::new();
        root.symlink("usr/lib", "/lib");
        for (link, target) in [
            ("libcuda.so.1", "libcuda.so.580.1"), // SONAME link
            ("libcuda.so", "libcuda.so.1"),       // dev link -> SONAME link
            ("libchain.so", "libchain.so.3"),     // four links: the resolver's
            ("libchain.so.3", "libchain.so.2"),
            ("libchain.so.2", "libchain.so.1"),
            ("libchain.so.1", "libchain.so.0"),
            ("libabs.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.580.1"),
            ("librel.so.1", "../x86_64-linux-gnu/libcuda.so.580.1"),
            ("libdangling.so.1", "libgone.so.1"),
            ("libloop.so.1", "libloop.so.1"),
            ("libdot.so.1", "."),
        ] {
            root.symlink(target, &format!("{LIB}/{link}"));
        }
        root.write(&format!("{LIB}/libcuda.so.580.1"), "");
        root.write(&format!("{LIB}/libchain.so.0"), "");
        root.write(&format!("{LIB}/libnvidia-nscq.so.2"), "");
        root
    }

    #[test]
    fn gives_the_resolvers_answer_for_every_shape() {
        let root = layout();
        let mut reference = RootResolver::new(root.root());
        let mut resolver = RootResolver::new(root.root());
        let mut libs = LibResolver::new(&mut resolver);
        for dir in [
            LIB,
            "/lib/x86_64-linux-gnu",
            "/usr/lib/../lib/x86_64-linux-gnu",
            "/nodir",
        ] {
            for name in [
                "libcuda.so.1",
                "libcuda.so",
                "libcuda.so.580.1",
                "libnvidia-nscq.so.2",
                "libchain.so",
                "libabs.so.1",
                "librel.so.1",
                "libdangling.so.1",
                "libloop.so.1",
                "libdot.so.1",
                "libmissing.so.1",
            ] {
                let path = PathBuf::from(format!("{dir}/{name}"));
                let (ours, theirs) = (libs.resolve(&path), reference.resolve(&path));
                match (&ours, &theirs) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", path.display()),
                    (Err(a), Err(b)) => {
                        assert_eq!(a.raw_os_error(), b.raw_os_error(), "{}", path.display())
                    }
                    _ => panic!("{}: {ours:?} vs {theirs:?}", path.display()),
                }
            }
        }
    }

    #[test]
    fn folders_and_sibling_links_are_followed_without_the_resolvers_walk() {
        let root = layout();
        let mut resolver = RootResolver::new(root.root());
        let mut libs = LibResolver::new(&mut resolver);
        let real = Some(PathBuf::from(format!("{LIB}/libcuda.so.580.1")));
        for name in ["libcuda.so.1", "libcuda.so", "libcuda.so.580.1"] {
            let path = PathBuf::from(format!("/lib/x86_64-linux-gnu/{name}"));
            assert_eq!(libs.siblings(&path), real, "{name}");
        }
        assert_eq!(libs.dirs.len(), 1, "one folder, resolved once");
        for name in [
            "libchain.so",
            "libabs.so.1",
            "librel.so.1",
            "libdangling.so.1",
            "libdot.so.1",
        ] {
            let path = PathBuf::from(format!("{LIB}/{name}"));
            assert_eq!(libs.siblings(&path), None, "{name} is the resolver's");
        }
    }

    #[test]
    fn a_file_reached_again_costs_no_lookup() {
        // What the resolver or an earlier library learnt is reused: after the real file and
        // the SONAME link are removed, the dev link and the SONAME link still resolve (from
        // the resolver's cache), which they could not if they were looked up again.
        let root = layout();
        let mut resolver = RootResolver::new(root.root());
        let soname = PathBuf::from(format!("{LIB}/libcuda.so.1"));
        let real = resolver.resolve(&soname).unwrap();
        let mut libs = LibResolver::new(&mut resolver);
        std::fs::remove_file(root.path(&format!("{LIB}/libcuda.so.580.1"))).unwrap();
        std::fs::remove_file(root.path(&format!("{LIB}/libcuda.so.1"))).unwrap();
        assert_eq!(libs.siblings(&soname), Some(real.clone()));
        let dev = PathBuf::from(format!("{LIB}/libcuda.so"));
        assert_eq!(libs.siblings(&dev), Some(real.clone()));
        assert_eq!(
            resolver.resolve(&dev).unwrap(),
            real,
            "learnt by the resolver"
        );
        assert_eq!(resolver.cached(&dev), Some((real.as_path(), 2)));
    }

    #[test]
    fn the_forty_links_count_the_folders_links_too() {
        // A folder reached through 39 links leaves room for one sibling link: the resolver
        // says ELOOP for a second, and so must the fast path.
        let root = layout();
        root.symlink(LIB, "/d0");
        for i in 1..39 {
            root.symlink(&format!("/d{}", i - 1), &format!("/d{i}"));
        }
        let mut reference = RootResolver::new(root.root());
        let mut resolver = RootResolver::new(root.root());
        let mut libs = LibResolver::new(&mut resolver);
        for (name, ok) in [("libcuda.so.1", true), ("libcuda.so", false)] {
            let path = PathBuf::from(format!("/d38/{name}"));
            let theirs = reference.resolve(&path);
            assert_eq!(theirs.is_ok(), ok, "{name}: {theirs:?}");
            let ours = libs.resolve(&path);
            match (ours, theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (Err(a), Err(b)) => assert_eq!(a.raw_os_error(), b.raw_os_error()),
                (a, b) => panic!("{name}: {a:?} vs {b:?}"),
            }
        }
    }

    #[test]
    fn plain_names() {
        for (t, plain) in [
            ("libcuda.so.1", true),
            ("a/b", false),
            ("/x", false),
            (".", false),
            ("..", false),
            ("", false),
            ("..x", true),
        ] {
            assert_eq!(is_plain_name(Path::new(t)), plain, "{t:?}");
        }
    }
}
