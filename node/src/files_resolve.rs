//! Resolving the library paths of the driver root's `ld.so.cache` in bulk (see [`LibResolver`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::rootfs::RootResolver;

/// The real in-root path of the library files the cache lists: what [`RootResolver::resolve`]
/// gives, at a third of its cost. A library is `dir/name`, and a driver's libraries share a few
/// folders, so each folder is resolved once; the file itself is a real file or a link to a
/// sibling (`libcuda.so.1 -> libcuda.so.<version>`, a SONAME link), followed here for up to
/// [`SIBLING_HOPS`] links. Anything else (a target with a `/`, a longer chain, an error) goes
/// through the resolver's walk, so errors and odd layouts get exactly its answer.
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
    /// Its real host path with a trailing `/`, to append file names to.
    host: OsString,
}

/// Sibling links followed without the resolver (a SONAME link, a dev link to it, one spare).
const SIBLING_HOPS: usize = 3;

impl<'a> LibResolver<'a> {
    pub(super) fn new(resolver: &'a mut RootResolver) -> Self {
        LibResolver {
            resolver,
            dirs: Vec::new(),
        }
    }

    pub(super) fn resolve(&mut self, path: &Path) -> std::io::Result<PathBuf> {
        match self.siblings(path) {
            Some(real) => Ok(real),
            None => self.resolver.resolve(path),
        }
    }

    /// `path` resolved through its folder and sibling links; `None` to leave it to the resolver.
    fn siblings(&mut self, path: &Path) -> Option<PathBuf> {
        let (dir, name) = (path.parent()?, path.file_name()?);
        let dir = self.dir(dir)?;
        let mut name = name.to_os_string();
        for _ in 0..=SIBLING_HOPS {
            let mut host = dir.host.clone();
            host.push(&name);
            match std::fs::read_link(&host) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    return Some(dir.real.join(name))
                }
                Ok(target) if is_plain_name(&target) => name = target.into_os_string(),
                _ => return None,
            }
        }
        None
    }

    fn dir(&mut self, dir: &Path) -> Option<&LibDir> {
        let i = match self
            .dirs
            .iter()
            .position(|d| d.listed.as_os_str() == dir.as_os_str())
        {
            Some(i) => i,
            None => {
                let real = self.resolver.resolve(dir).ok()?;
                let mut host = self.resolver.host(&real).into_os_string();
                host.push("/");
                self.dirs.push(LibDir {
                    listed: dir.to_path_buf(),
                    real,
                    host,
                });
                self.dirs.len() - 1
            }
        };
        self.dirs.get(i)
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
