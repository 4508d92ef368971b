//! CUDA forward compatibility and the other image checks of the setup hook that need to list a
//! folder of the container root.
//!
//! A CUDA image may ship a newer user-mode driver in `/usr/local/cuda/compat` (`libcuda.so.
//! <ver>`) so that it runs on an older host driver. NVIDIA's `enable-cuda-compat` hook
//! (nvidia-container-toolkit v1.20.0 cmd/nvidia-cdi-hook/cudacompat/cudacompat.go `run`,
//! `getContainerForwardCompatDir`, `useCompatLibraries`) puts that folder first in the
//! container's linker path when exactly one `libcuda.so.*.*` is there and it is for a newer
//! driver: by its `.note.cuda.fwd_compatibility` ELF note when it has one (the host driver's
//! branch is listed and the compat version is greater, [`elf`]), else by a greater major
//! version. It writes `/etc/ld.so.conf.d/00-compat-<id>.conf`, which sorts before the driver
//! folders' file, so the rebuilt `ld.so.cache` lists the compat `libcuda.so.1` first.
//!
//! Everything is looked up in the root through openat2 `RESOLVE_IN_ROOT` (the image controls
//! that tree), listings are bounded, and nothing is followed out of the root.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{InjectError, Result};
use crate::openat2::open_in_root;
use crate::real::PathrsSyscalls;
use crate::root::{normalize_container_path, ContainerRoot};

#[path = "cuda_compat_elf.rs"]
pub mod elf;

/// Where CUDA images keep the forward-compat libraries.
pub const CUDA_COMPAT_DIR: &str = "/usr/local/cuda/compat";
/// The linker config that puts the compat folder first (NVIDIA: `00-compat-*.conf`).
pub const COMPAT_LDSO_CONF: &str = "/etc/ld.so.conf.d/00-compat-gpuhook.conf";
/// Most entries read from one folder of the image.
pub const MAX_DIR_ENTRIES: usize = 4096;

/// One entry of a container folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    /// A character device (not followed: `lstat`).
    pub char_device: bool,
    /// Its device number when it is a device.
    pub rdev: u64,
}

fn in_root(root: &Path, op: &'static str, path: &Path, source: std::io::Error) -> InjectError {
    InjectError::InRoot {
        op,
        root: root.to_path_buf(),
        path: path.to_path_buf(),
        error: source,
    }
}

/// The entries of the container folder `dir` (at most [`MAX_DIR_ENTRIES`], sorted by name);
/// `None` when it does not exist.
pub fn list_dir(root: &ContainerRoot<PathrsSyscalls>, dir: &Path) -> Result<Option<Vec<DirEntry>>> {
    let dir = normalize_container_path(dir)?;
    let path_fd = match open_in_root(root.root_fd(), &dir, true) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(in_root(root.path(), "open", &dir, e)),
    };
    // SAFETY: openat on a live O_PATH directory fd with a static NUL-terminated name; it returns
    // a new descriptor or -1.
    let raw = unsafe {
        libc::openat(
            path_fd.as_raw_fd(),
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOTDIR) {
            return Ok(None);
        }
        return Err(in_root(root.path(), "open directory", &dir, e));
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut listing = nix::dir::Dir::from_fd(fd.into_raw_fd())
        .map_err(|e| in_root(root.path(), "read", &dir, e.into()))?;
    let dir_fd = listing.as_raw_fd();
    let mut out = Vec::new();
    for entry in listing.iter().take(MAX_DIR_ENTRIES).flatten() {
        let name = entry.file_name();
        let Ok(text) = name.to_str() else { continue };
        if text == "." || text == ".." {
            continue;
        }
        let stat =
            nix::sys::stat::fstatat(Some(dir_fd), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW);
        let (char_device, rdev) = stat.map_or((false, 0), |s| {
            (s.st_mode & libc::S_IFMT == libc::S_IFCHR, s.st_rdev)
        });
        out.push(DirEntry {
            name: text.to_string(),
            char_device,
            rdev,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Some(out))
}

/// The major of a dotted version (`570.158.01` -> 570).
fn major(version: &str) -> Option<u64> {
    version.split('.').next()?.parse().ok()
}

/// Whether the compat library `file_name` (`libcuda.so.575.57.08`) without a readable note is
/// for a newer driver than `host_driver_version`: its major version is greater (cudacompat.go
/// `useCompatLibraries`, fallback).
pub fn use_compat(file_name: &str, host_driver_version: &str) -> bool {
    let Some(compat) = file_name.strip_prefix("libcuda.so.") else {
        return false;
    };
    match (major(compat), major(host_driver_version)) {
        (Some(c), Some(h)) => h < c,
        _ => false,
    }
}

/// The compat note of the image's file `path`, read through the root: opened with
/// `RESOLVE_IN_ROOT` (links followed inside the root only), only a regular file (a FIFO or a
/// device the image put there is never opened for reading), read bounded ([`elf::read_note`]).
pub fn read_compat_note(
    root: &ContainerRoot<PathrsSyscalls>,
    path: &Path,
) -> std::result::Result<Option<elf::CompatNote>, elf::NoteError> {
    let open = |e: &dyn std::fmt::Display| elf::NoteError::Open(e.to_string());
    let path = normalize_container_path(path).map_err(|e| open(&e))?;
    let fd = open_in_root(root.root_fd(), &path, true).map_err(|e| open(&e))?;
    let stat = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| open(&e))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(elf::NoteError::NotRegular);
    }
    // Reopen the O_PATH descriptor for reading (the same inode; no new path walk).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| open(&e))?;
    let size = u64::try_from(stat.st_size).map_err(|_| open(&"negative size"))?;
    elf::read_note(&file, size)
}

/// The compat folder to put first, when the image has one newer than the host driver.
pub fn compat_dir(
    root: &ContainerRoot<PathrsSyscalls>,
    host_driver_version: &str,
) -> Result<Option<PathBuf>> {
    let Some(entries) = list_dir(root, Path::new(CUDA_COMPAT_DIR))? else {
        return Ok(None);
    };
    // NVIDIA's glob `libcuda.so.*.*`: a version with at least two parts.
    let libs: Vec<&DirEntry> = entries
        .iter()
        .filter(|e| {
            e.name
                .strip_prefix("libcuda.so.")
                .is_some_and(|v| v.contains('.'))
        })
        .collect();
    let [lib] = libs.as_slice() else {
        if libs.len() > 1 {
            tracing::warn!(
                count = libs.len(),
                dir = CUDA_COMPAT_DIR,
                "more than one CUDA compat libcuda; compat not enabled (as NVIDIA's hook)"
            );
        }
        return Ok(None);
    };
    let path = Path::new(CUDA_COMPAT_DIR).join(&lib.name);
    let note = read_compat_note(root, &path).unwrap_or_else(|reason| {
        // As NVIDIA's hook: a note that cannot be read is a warning, and the major rule decides.
        tracing::warn!(path = %path.display(), reason = %gpuhook_node::bounded::preview(&reason.to_string()), "cannot read the CUDA compat ELF note; comparing major versions");
        None
    });
    let compat_version = lib.name.trim_start_matches("libcuda.so.");
    let use_it = elf::use_compat_libraries(compat_version, host_driver_version, note.as_ref());
    tracing::debug!(lib = %lib.name, note = ?note, host = host_driver_version, use_it, "CUDA forward compatibility");
    Ok(use_it.then(|| PathBuf::from(CUDA_COMPAT_DIR)))
}

/// Writes [`COMPAT_LDSO_CONF`] when the image's compat libraries are newer than the host
/// driver; returns the folder put first. Run it before the `ld.so.cache` is rebuilt.
pub fn enable_cuda_compat(rootfs: &Path, host_driver_version: &str) -> Result<Option<PathBuf>> {
    let root = ContainerRoot::open(rootfs)?;
    let Some(dir) = compat_dir(&root, host_driver_version)? else {
        return Ok(None);
    };
    let line = format!("{}\n", dir.display());
    root.write_file(Path::new(COMPAT_LDSO_CONF), line.as_bytes(), 0o644)?;
    Ok(Some(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cudacompat.go `useCompatLibraries` without the ELF note: compat only when the host
    /// driver's major is lower than the compat library's.
    #[test]
    fn compat_only_for_a_newer_major() {
        assert!(use_compat("libcuda.so.575.57.08", "570.158.01"));
        assert!(!use_compat("libcuda.so.570.200.01", "570.158.01"));
        assert!(!use_compat("libcuda.so.560.35.03", "570.158.01"));
        assert!(!use_compat("libcuda.so.x", "570.158.01"));
    }

    fn compat_root(files: &[(&str, Option<Vec<u8>>)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let compat = dir.path().join("usr/local/cuda/compat");
        std::fs::create_dir_all(&compat).unwrap();
        for (name, data) in files {
            match data {
                Some(d) => std::fs::write(compat.join(name), d).unwrap(),
                None => nix::unistd::mkfifo(
                    &compat.join(name),
                    nix::sys::stat::Mode::from_bits_truncate(0o644),
                )
                .unwrap(),
            }
        }
        dir
    }

    fn decide(dir: &tempfile::TempDir, host: &str) -> Option<PathBuf> {
        compat_dir(&ContainerRoot::open(dir.path()).unwrap(), host).unwrap()
    }

    /// NVIDIA v1.20 `useCompatLibraries`: the compat library's ELF note decides first.
    #[test]
    fn the_elf_note_decides_when_the_library_has_one() {
        use elf::tests::{build, NOTE_575};
        let note = |v: &str| Some(build(true, false, "NVIDIA Corporation", v, 4, 4096));
        // 570.200.01 for branches up to 575, host 570.158.01: same major, but the note lists
        // the host's branch and the compat build is newer.
        let same_major = compat_root(&[("libcuda.so.570.200.01", note(NOTE_575))]);
        assert_eq!(
            decide(&same_major, "570.158.01"),
            Some(PathBuf::from(CUDA_COMPAT_DIR))
        );
        // A newer major whose note does not list the host's branch (560 is, 555 is not).
        let unlisted = compat_root(&[("libcuda.so.575.57.08", note(NOTE_575))]);
        assert_eq!(decide(&unlisted, "555.42.06"), None);
        assert_eq!(
            decide(&unlisted, "560.35.03"),
            Some(PathBuf::from(CUDA_COMPAT_DIR))
        );
        // Without a note (an empty file is no ELF: a warning), the major rule.
        let plain = compat_root(&[("libcuda.so.575.57.08", Some(Vec::new()))]);
        assert_eq!(
            decide(&plain, "555.42.06"),
            Some(PathBuf::from(CUDA_COMPAT_DIR))
        );
    }

    /// The file is the image's: a FIFO is never opened for reading (no hang), and a symlink is
    /// resolved inside the root.
    #[test]
    fn the_library_is_read_through_the_root() {
        use elf::tests::{build, NOTE_575};
        let fifo = compat_root(&[("libcuda.so.575.57.08", None)]);
        assert_eq!(
            decide(&fifo, "555.42.06"),
            Some(PathBuf::from(CUDA_COMPAT_DIR)),
            "a FIFO has no note: major rule"
        );
        let linked = compat_root(&[]);
        let real = linked.path().join("opt/libcuda-real");
        std::fs::create_dir_all(real.parent().unwrap()).unwrap();
        std::fs::write(
            &real,
            build(false, true, "NVIDIA Corporation", NOTE_575, 4, 0),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            "/opt/libcuda-real",
            linked
                .path()
                .join("usr/local/cuda/compat/libcuda.so.575.57.08"),
        )
        .unwrap();
        // The absolute target is the root's /opt/libcuda-real (its note excludes 555), not the
        // host's /opt.
        assert_eq!(decide(&linked, "555.42.06"), None);
    }

    #[test]
    fn writes_the_conf_only_for_one_newer_library() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        assert_eq!(
            enable_cuda_compat(r, "570.158.01").unwrap(),
            None,
            "no compat dir"
        );
        let compat = r.join("usr/local/cuda/compat");
        std::fs::create_dir_all(&compat).unwrap();
        std::fs::write(compat.join("libcuda.so.575.57.08"), b"").unwrap();
        std::os::unix::fs::symlink("libcuda.so.575.57.08", compat.join("libcuda.so.1")).unwrap();
        assert_eq!(
            enable_cuda_compat(r, "580.159.04").unwrap(),
            None,
            "host newer"
        );
        assert!(!r.join("etc/ld.so.conf.d/00-compat-gpuhook.conf").exists());
        assert_eq!(
            enable_cuda_compat(r, "570.158.01").unwrap(),
            Some(PathBuf::from(CUDA_COMPAT_DIR))
        );
        let conf =
            std::fs::read_to_string(r.join("etc/ld.so.conf.d/00-compat-gpuhook.conf")).unwrap();
        assert_eq!(conf, "/usr/local/cuda/compat\n");
        std::fs::write(compat.join("libcuda.so.576.1.1"), b"").unwrap();
        let root = ContainerRoot::open(r).unwrap();
        assert_eq!(
            compat_dir(&root, "570.158.01").unwrap(),
            None,
            "two candidates"
        );
    }
}
