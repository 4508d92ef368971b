//! [`ContainerRoot::walk_dirs`]: a userspace walk of a container path, for the checks that must
//! tell *why* a path cannot be used before anything is changed (a dangling link, a file where a
//! directory is needed), which one openat2 cannot say.
//!
//! Why a budget for the whole walk: a walk that bounds only how deeply links *nest* does
//! exponential work on a tree of links (`a0 -> a1/../a1`, `a1 -> a2/../a2`, ...: each level
//! expands the next one twice, 2^40 lookups at depth 40). The kernel counts every link it follows
//! while resolving one path and fails with ELOOP after [`MAX_SYMLINKS`] (`nd->total_link_count`,
//! `MAXSYMLINKS` in `include/linux/namei.h`); this walk does the same, so it accepts exactly the
//! paths openat2 will later resolve, and its work is bounded by the path's components plus 40
//! link targets of at most `PATH_MAX` bytes each, whatever the shape of the link graph.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::error::{InjectError, Result};
use crate::root::ContainerRoot;
use crate::sys::{EntryKind, Syscalls};

/// Most symlinks followed while resolving one path, in all (the kernel's `MAXSYMLINKS`).
pub const MAX_SYMLINKS: u32 = 40;

/// One component still to walk, and the link whose target it came from (for messages).
struct Pending {
    name: Option<OsString>,
    from_link: Option<(PathBuf, PathBuf)>,
}

/// The components of `path`: `Some(name)`, or `None` for `..` (`.` and `/` are dropped).
fn components(path: &Path, from_link: Option<(PathBuf, PathBuf)>) -> Vec<Pending> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Some(n.to_os_string())),
            Component::ParentDir => Some(None),
            _ => None,
        })
        .map(|name| Pending {
            name,
            from_link: from_link.clone(),
        })
        .collect()
}

fn refused(path: &Path, reason: String) -> InjectError {
    InjectError::Refused {
        path: path.to_path_buf(),
        reason,
    }
}

impl<S: Syscalls> ContainerRoot<S> {
    /// Walks the container path `path` as openat2 `RESOLVE_IN_ROOT` would (absolute link targets
    /// mean the root, `..` stops at the root), with lstat only, following at most
    /// [`MAX_SYMLINKS`] links in all. `Some(resolved)` when every component is a directory,
    /// `None` when a plain component is missing (it will be created). A link whose target does
    /// not exist inside the root, a non-directory component or more than 40 links is an error
    /// (the last with ELOOP): creating directories through them fails, and that must be found
    /// before anything is changed.
    pub fn walk_dirs(&self, path: &Path) -> Result<Option<PathBuf>> {
        let mut todo: VecDeque<Pending> = components(path, None).into();
        let mut cur = PathBuf::from("/");
        let mut links = 0u32;
        while let Some(Pending { name, from_link }) = todo.pop_front() {
            let Some(name) = name else {
                cur.pop();
                continue;
            };
            let next = cur.join(&name);
            match self.syscalls().lstat(&next)? {
                None => match from_link {
                    None => return Ok(None),
                    Some((link, target)) => return Err(dangling(&link, &target)),
                },
                Some(EntryKind::Directory) => cur = next,
                Some(EntryKind::Symlink(target)) => {
                    links += 1;
                    if links > MAX_SYMLINKS {
                        return Err(InjectError::InRoot {
                            op: "walk (too many levels of symlinks: more than 40 in all, the \
                                 kernel's limit; fix the image)",
                            root: self.path().to_path_buf(),
                            path: path.to_path_buf(),
                            error: std::io::Error::from_raw_os_error(libc::ELOOP),
                        });
                    }
                    if target.is_absolute() {
                        cur = PathBuf::from("/");
                    }
                    let expanded = components(&target, Some((next, target.clone())));
                    for p in expanded.into_iter().rev() {
                        todo.push_front(p);
                    }
                }
                Some(other) => {
                    return Err(refused(
                        &next,
                        format!(
                            "the image has {} there, where a directory is needed",
                            other.describe()
                        ),
                    ))
                }
            }
        }
        Ok(Some(cur))
    }
}

fn dangling(link: &Path, target: &Path) -> InjectError {
    refused(
        link,
        format!(
            "the image's symlink to {} dangles inside the container root; fix the image (the \
             link is resolved inside the root, never on the host)",
            target.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeSyscalls;

    /// `/a0 -> a1/../a1`, ..., `/a{n-1} -> a{n}/../a{n}`, `/a{n}` a directory: resolving `/a0`
    /// takes 2^n link traversals (the kernel refuses it with ELOOP for n >= 6).
    fn link_tree(n: u32) -> FakeSyscalls {
        let mut fake = FakeSyscalls::new().with(&format!("/a{n}"), EntryKind::Directory);
        for k in 0..n {
            let target = format!("a{}/../a{}", k + 1, k + 1);
            fake = fake.with(&format!("/a{k}"), EntryKind::Symlink(target.into()));
        }
        fake
    }

    #[test]
    fn a_tree_of_links_costs_at_most_forty_traversals_and_fails_with_eloop() {
        let root = ContainerRoot::with_syscalls(link_tree(60));
        let err = root.walk_dirs(Path::new("/a0/lib")).unwrap_err();
        match &err {
            InjectError::InRoot { error: source, .. } => {
                assert_eq!(source.raw_os_error(), Some(libc::ELOOP), "{err}")
            }
            other => panic!("expected ELOOP, got {other}"),
        }
        assert!(
            err.to_string().contains("too many levels of symlinks"),
            "{err}"
        );
        // 41 links followed (the last refused) and the plain components between them.
        let lookups = root.syscalls().lstat_count();
        assert!(
            lookups <= 2 * (MAX_SYMLINKS as usize + 1),
            "{lookups} lookups"
        );
    }

    #[test]
    fn forty_links_in_all_resolve_as_the_kernel_would() {
        // A chain of 40 links is fine; a tree needing 2^5 = 32 traversals too, 2^6 = 64 not.
        let mut fake = FakeSyscalls::new().with("/l40", EntryKind::Directory);
        for k in 0..40 {
            fake = fake.with(
                &format!("/l{k}"),
                EntryKind::Symlink(format!("/l{}", k + 1).into()),
            );
        }
        let root = ContainerRoot::with_syscalls(fake);
        assert_eq!(
            root.walk_dirs(Path::new("/l0")).unwrap(),
            Some("/l40".into())
        );
        let tree = ContainerRoot::with_syscalls(link_tree(5));
        assert_eq!(tree.walk_dirs(Path::new("/a0/x")).unwrap(), None);
        let tree = ContainerRoot::with_syscalls(link_tree(6));
        assert!(tree.walk_dirs(Path::new("/a0")).is_err());
    }
}
