//! `update-ldcache`: refresh the container's `/etc/ld.so.cache` after driver libraries were
//! mounted, with the *host's* ldconfig (CVE-2024-0136/0137: never run an ldconfig from the image)
//! inside a sandbox (new namespaces, the root pivoted to, no capabilities, empty environment; see
//! the private `sandbox` module).
//!
//! Who ldconfig runs as: the owner of the container's `/etc` (resolved inside the root), whoever
//! the container's process runs as. ldconfig writes `/etc/ld.so.cache~` and renames it over
//! `/etc/ld.so.cache`, so it needs exactly the owner's write access to `/etc`: uid 0 for an
//! image's root-owned `/etc` (with no capabilities, uid 0 is held to the permission bits like
//! anyone), the mapped uid for a user-namespaced root. Running as the container's user failed for
//! every non-root container (it cannot write a root-owned `/etc`); running as root *with*
//! capabilities would make it a confused deputy where `/etc` is a directory the container's user
//! controls (a volume): there it runs as that user (see the `owner` module). And where `/etc` is
//! root-owned on another mount than the root filesystem (an image linking `/etc` into a volume of
//! a host directory), it runs as the container's user, or not at all (issue 22, D10).

use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{InjectError, Result};
use crate::root::{normalize_container_path, ContainerRoot};
use crate::sandbox::{spawn_sandboxed, Limits, Sandboxed};

/// The drop-in listing the injected folders.
pub const LDSO_CONF_DROPIN: &str = "/etc/ld.so.conf.d/00-gpuhook.conf";
/// Written when the image has no `/etc/ld.so.conf` (distroless images).
pub const LDSO_CONF_DEFAULT: &str = "include /etc/ld.so.conf.d/*.conf\n";

/// Knobs for [`update_ldcache_with`].
#[derive(Debug, Clone, Copy)]
pub struct LdcacheOptions {
    /// The container process's user and group: ldconfig does not run as them but as the owner
    /// of the container's `/etc`, except on a root-owned volume (see the module docs).
    pub uid: u32,
    pub gid: u32,
    /// RLIMIT_CPU for ldconfig.
    pub cpu_seconds: u64,
    /// Wall-clock limit; the sandbox is killed after it.
    pub timeout: Duration,
}

impl LdcacheOptions {
    /// Defaults: 10 s CPU, 30 s wall clock.
    pub fn new(uid: u32, gid: u32) -> Self {
        LdcacheOptions {
            uid,
            gid,
            cpu_seconds: 10,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Debian ships `/sbin/ldconfig` as a shell wrapper around `/sbin/ldconfig.real`: when the given
/// binary is named `ldconfig` and an `ldconfig.real` sits next to it, use that.
pub fn select_ldconfig(given: &Path) -> PathBuf {
    if given.file_name().is_some_and(|n| n == "ldconfig") {
        let real = given.with_file_name("ldconfig.real");
        if real.is_file() {
            return real;
        }
    }
    given.to_path_buf()
}

/// The drop-in's contents; folders must be absolute container paths without `..` or whitespace
/// (ld.so.conf is whitespace-separated).
pub fn conf_contents(folders: &[PathBuf]) -> Result<String> {
    let mut out = String::from("# written by gpuhook update-ldcache\n");
    for f in folders {
        let bad = |reason: &str| InjectError::Invalid {
            what: "ldcache folder",
            value: f.display().to_string(),
            reason: reason.to_string(),
        };
        let s = f.to_str().ok_or_else(|| bad("not UTF-8"))?;
        if !f.is_absolute() {
            return Err(bad("must be an absolute container path"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("contains whitespace or control characters"));
        }
        let norm = normalize_container_path(f)?;
        out.push_str(&norm.to_string_lossy());
        out.push('\n');
    }
    Ok(out)
}

/// Up to `len` bytes from the start of `file` (pread: the file offset is left alone).
fn read_prefix(file: &File, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// Refuse anything but a static ELF executable: a dynamic one would be started by the *image's*
/// dynamic loader inside the chroot.
pub fn check_static_elf(file: &File, path: &Path) -> Result<()> {
    let bad = |reason: String| InjectError::Ldconfig {
        binary: path.to_path_buf(),
        rootfs: PathBuf::new(),
        reason,
    };
    // The ELF header and program headers sit at the start of the file (phoff is 64 in practice):
    // read 4 KiB, not the whole binary.
    let head = read_prefix(file, 4096).map_err(|e| bad(format!("read: {e}")))?;
    if head.len() < 64 || &head[..4] != b"\x7fELF" {
        return Err(bad(
            "not an ELF binary; pass the host's ldconfig (e.g. /sbin/ldconfig)".into(),
        ));
    }
    if head[4] != 2 || head[5] != 1 {
        return Err(bad("only 64-bit little-endian ELF is supported".into()));
    }
    let u16_at = |o: usize| usize::from(u16::from_le_bytes([head[o], head[o + 1]]));
    let phoff = u64::from_le_bytes(head[32..40].try_into().expect("8 bytes"));
    // Beyond usize: past the 1 MiB bound below as well.
    let phoff = usize::try_from(phoff).unwrap_or(usize::MAX);
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    let end = phoff.saturating_add(phnum.saturating_mul(phentsize));
    let head = if end > head.len() && end <= 1 << 20 {
        read_prefix(file, end).map_err(|e| bad(format!("read: {e}")))?
    } else {
        head
    };
    for i in 0..phnum {
        let o = phoff + i * phentsize;
        if o + 4 > head.len() {
            return Err(bad("truncated program headers".into()));
        }
        if u32::from_le_bytes(head[o..o + 4].try_into().expect("4 bytes")) == 3 {
            return Err(bad(
                "dynamically linked (has PT_INTERP): it would run the image's loader; use a \
                 static ldconfig (glibc's is static)"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// [`update_ldcache_with`] with default limits.
pub fn update_ldcache(
    rootfs: &Path,
    folders: &[PathBuf],
    host_ldconfig: &Path,
    uid: u32,
    gid: u32,
) -> Result<()> {
    update_ldcache_with(
        rootfs,
        folders,
        host_ldconfig,
        LdcacheOptions::new(uid, gid),
    )
}

/// Write the drop-in (and a default `/etc/ld.so.conf` if missing) inside the root, then run the
/// host ldconfig sandboxed: `ldconfig -f /etc/ld.so.conf -C /etc/ld.so.cache <folders>`.
pub fn update_ldcache_with(
    rootfs: &Path,
    folders: &[PathBuf],
    host_ldconfig: &Path,
    opts: LdcacheOptions,
) -> Result<()> {
    start_ldcache_update(rootfs, folders, host_ldconfig, opts)?.wait()
}

/// The checks [`start_ldcache_update`] makes before it changes anything (the folders make a valid
/// drop-in; the host ldconfig opens and is a static ELF), for a caller with other work to do first
/// that should fail before any of it.
pub fn check_ldcache_inputs(
    rootfs: &Path,
    folders: &[PathBuf],
    host_ldconfig: &Path,
) -> Result<()> {
    conf_contents(folders)?;
    open_host_ldconfig(rootfs, host_ldconfig).map(drop)
}

/// The host ldconfig to run (see [`select_ldconfig`]), opened and checked to be a static ELF.
fn open_host_ldconfig(rootfs: &Path, host_ldconfig: &Path) -> Result<(PathBuf, File)> {
    let binary = select_ldconfig(host_ldconfig);
    let exe = File::open(&binary).map_err(|e| InjectError::Ldconfig {
        binary: binary.clone(),
        rootfs: rootfs.to_path_buf(),
        reason: format!("open host binary: {e}"),
    })?;
    check_static_elf(&exe, &binary).map_err(|e| match e {
        InjectError::Ldconfig { binary, reason, .. } => InjectError::Ldconfig {
            binary,
            rootfs: rootfs.to_path_buf(),
            reason,
        },
        other => other,
    })?;
    Ok((binary, exe))
}

/// [`update_ldcache_with`] that returns once ldconfig is started: the caller may go on with work
/// ldconfig does not depend on (mounts outside the `folders`) and then [`PendingLdcache::wait`].
/// ldconfig sees the root as it is at this call, in its own copy of the mount namespace: the
/// `folders` must be complete (libraries mounted, links made) before it. Dropping the result
/// without waiting kills ldconfig.
pub fn start_ldcache_update(
    rootfs: &Path,
    folders: &[PathBuf],
    host_ldconfig: &Path,
    opts: LdcacheOptions,
) -> Result<PendingLdcache> {
    let conf = conf_contents(folders)?;
    // Open the host binary before touching the root: nothing in the image can influence it.
    let (binary, exe) = open_host_ldconfig(rootfs, host_ldconfig)?;
    let ldcfg_err = |reason: String| InjectError::Ldconfig {
        binary: binary.clone(),
        rootfs: rootfs.to_path_buf(),
        reason,
    };

    let root = ContainerRoot::open_as(rootfs, opts.uid, opts.gid)?;
    root.write_file(Path::new(LDSO_CONF_DROPIN), conf.as_bytes(), 0o644)?;
    if root.lstat(Path::new("/etc/ld.so.conf"))?.is_none() {
        root.write_file(
            Path::new("/etc/ld.so.conf"),
            LDSO_CONF_DEFAULT.as_bytes(),
            0o644,
        )?;
    }
    let mut args: Vec<CString> = [
        "ldconfig",
        "-f",
        "/etc/ld.so.conf",
        "-C",
        "/etc/ld.so.cache",
    ]
    .iter()
    .map(|s| CString::new(*s).expect("static"))
    .collect();
    for f in folders {
        args.push(
            CString::new(f.as_os_str().as_bytes()).map_err(|_| InjectError::Invalid {
                what: "ldcache folder",
                value: f.display().to_string(),
                reason: "contains NUL".into(),
            })?,
        );
    }
    // After the drop-in: /etc exists now, made by us if the image had none.
    let (uid, gid) = root.acting_ids(Path::new("/etc"))?;
    let limits = Limits {
        uid,
        gid,
        cpu_seconds: opts.cpu_seconds,
        timeout: opts.timeout,
    };
    tracing::debug!(
        rootfs = %rootfs.display(),
        uid,
        gid,
        container_uid = opts.uid,
        "ld.so.conf drop-in written; starting ldconfig as the owner of /etc"
    );
    let process = spawn_sandboxed(root.root_fd(), root.path(), &exe, &args, limits)
        .map_err(|e| ldcfg_err(e.to_string()))?;
    Ok(PendingLdcache {
        process,
        rootfs: rootfs.to_path_buf(),
        binary,
        folders: folders.to_vec(),
    })
}

/// A started ldconfig (see [`start_ldcache_update`]).
#[must_use = "dropping it kills ldconfig; call wait()"]
pub struct PendingLdcache {
    process: Sandboxed,
    rootfs: PathBuf,
    binary: PathBuf,
    folders: Vec<PathBuf>,
}

impl std::fmt::Debug for PendingLdcache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingLdcache")
            .field("rootfs", &self.rootfs)
            .field("binary", &self.binary)
            .finish_non_exhaustive()
    }
}

impl PendingLdcache {
    /// The sandbox's pid (its outer process; ldconfig is its child).
    pub fn pid(&self) -> i32 {
        self.process.pid()
    }

    /// Waits for ldconfig; an error names the binary, the root and how ldconfig failed.
    pub fn wait(self) -> Result<()> {
        let PendingLdcache {
            process,
            rootfs,
            binary,
            folders,
        } = self;
        process.wait().map_err(|e| InjectError::Ldconfig {
            binary: binary.clone(),
            rootfs: rootfs.clone(),
            reason: e.to_string(),
        })?;
        tracing::info!(rootfs = %rootfs.display(), binary = %binary.display(), ?folders, "ldcache updated");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_lists_folders_and_refuses_bad_ones() {
        let c = conf_contents(&["/usr/lib/x86_64-linux-gnu".into(), "/opt/./nv".into()]).unwrap();
        assert!(c.ends_with("/usr/lib/x86_64-linux-gnu\n/opt/nv\n"), "{c}");
        assert!(conf_contents(&["relative".into()]).is_err());
        assert!(conf_contents(&["/a b".into()]).is_err());
        assert!(conf_contents(&["/a\ninclude /x".into()]).is_err());
        assert!(conf_contents(&["/../x".into()]).is_err());
    }

    #[test]
    fn static_check_refuses_scripts_and_dynamic_binaries() {
        let sh = File::open("/bin/sh").unwrap();
        let err = check_static_elf(&sh, Path::new("/bin/sh"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("PT_INTERP"), "{err}");
        let dir = std::env::temp_dir().join(format!("gpuhook-elf-{}", std::process::id()));
        std::fs::write(&dir, b"#!/bin/sh\nexit 0\n").unwrap();
        let f = File::open(&dir).unwrap();
        assert!(check_static_elf(&f, &dir)
            .unwrap_err()
            .to_string()
            .contains("not an ELF"));
        std::fs::remove_file(&dir).unwrap();
        let ld = Path::new("/sbin/ldconfig");
        if ld.exists() {
            check_static_elf(&File::open(ld).unwrap(), ld).unwrap();
        }
    }

    #[test]
    fn ldconfig_real_is_preferred_next_to_the_given_binary() {
        let d = std::env::temp_dir().join(format!("gpuhook-ldsel-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("ldconfig"), b"").unwrap();
        assert_eq!(select_ldconfig(&d.join("ldconfig")), d.join("ldconfig"));
        std::fs::write(d.join("ldconfig.real"), b"").unwrap();
        assert_eq!(
            select_ldconfig(&d.join("ldconfig")),
            d.join("ldconfig.real")
        );
        assert_eq!(select_ldconfig(&d.join("other")), d.join("other"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
