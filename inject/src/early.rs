//! A container's `gpuhook hook setup` (SONAME links and `ld.so.cache`) done from the host side
//! *before* the runtime creates the container, so that ldconfig runs while `runc create` does.
//!
//! Why: as a createContainer hook this work costs a process the runtime forks from inside the
//! container's init and waits for, with ldconfig on the critical path of every GPU container
//! start. The runtime wrapper instead does it here and drops the hook (see the wrapper's
//! `early` module for when it may).
//!
//! What ldconfig must see is the container's view of its lib folders: the image plus the spec's
//! bind mounts (the driver libraries). A dedicated thread makes that view in a *private* copy of
//! the host mount namespace (`unshare(CLONE_FS | CLONE_NEWNS)`, everything made private first so
//! nothing propagates back to the host): it bind-mounts the given sources onto their destinations
//! in the root (resolved with [`ContainerRoot`], never leaving it), makes the links (these persist
//! in the root, as the hook's would), starts the sandboxed ldconfig (which copies that namespace)
//! and waits for it. When the thread ends, its namespace and its mounts go with it: nothing is
//! ever mounted on the host. The thread stays alive until ldconfig is done because the sandbox
//! dies with the thread that forked it (PDEATHSIG).
//!
//! Mountpoints and links are made by [`ContainerRoot`] as the hook's are: each as the owner of its
//! directory (a directory a container's user owns gets the user's files, never root's), and
//! ldconfig runs as the owner of `/etc` (see [`crate::ldcache`]), whatever user the container's
//! process runs as.

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::error::{InjectError, Result};
use crate::hooks::create_symlinks_in;
use crate::ldcache::{start_ldcache_update, LdcacheOptions, PendingLdcache};
use crate::root::ContainerRoot;
use crate::sys::MountOptions;

/// A bind mount of the container's spec, as ldconfig must see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EarlyBind {
    /// Host path (the spec's `source`).
    pub source: PathBuf,
    /// Container path (the spec's `destination`).
    pub destination: PathBuf,
    /// The spec mounts it read-only.
    pub read_only: bool,
}

/// What [`start_early_setup`] does, in this order.
#[derive(Debug, Clone)]
pub struct EarlySetup {
    /// The container root on the host (the bundle's `root.path`).
    pub rootfs: PathBuf,
    /// The spec's bind mounts, in spec order.
    pub binds: Vec<EarlyBind>,
    /// `(target, link)` pairs, as `--link TARGET::LINK`.
    pub links: Vec<(PathBuf, PathBuf)>,
    /// ldcache folders; none: no ldconfig.
    pub folders: Vec<PathBuf>,
    /// The host ldconfig.
    pub ldconfig: PathBuf,
    /// ldconfig's limits (it runs as the owner of the container's `/etc`, see
    /// [`crate::ldcache`]).
    pub ldcache: LdcacheOptions,
}

/// A running [`start_early_setup`]: the links exist and ldconfig has started.
#[must_use = "wait() for ldconfig; dropping it detaches the thread that waits"]
#[derive(Debug)]
pub struct PendingSetup {
    thread: JoinHandle<Result<()>>,
    rootfs: PathBuf,
}

impl PendingSetup {
    /// Waits for ldconfig; its error names the binary, the root and what failed.
    pub fn wait(self) -> Result<()> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(namespace_error("setup thread panicked", None)))
    }

    /// The container root being set up.
    pub fn rootfs(&self) -> &std::path::Path {
        &self.rootfs
    }
}

fn namespace_error(step: &'static str, source: Option<std::io::Error>) -> InjectError {
    InjectError::MountNamespace {
        pid: i32::try_from(std::process::id()).unwrap_or(-1),
        step,
        error: source.unwrap_or_else(|| std::io::Error::other("failed")),
    }
}

/// Starts `setup` in its own thread and returns once that thread has its private mount
/// namespace (or with the error that kept it from getting one: the caller can then leave the
/// work to the hook). The mounts, the links and ldconfig follow in the thread, concurrently with
/// the caller; [`PendingSetup::wait`] returns their outcome. Their files are made the way the
/// runtime makes mountpoints (an existing one is fine), so the runtime may create the container
/// meanwhile. After a failure nothing is left mounted; links already made stay, as a failed
/// hook's would.
pub fn start_early_setup(setup: EarlySetup) -> Result<PendingSetup> {
    let rootfs = setup.rootfs.clone();
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<()>>(1);
    let thread = std::thread::Builder::new()
        .name("early-setup".into())
        .spawn(move || -> Result<()> {
            if let Err(e) = private_namespace() {
                let _ = ready_tx.send(Err(e));
                return Ok(());
            }
            let _ = ready_tx.send(Ok(()));
            match mount_link_and_start(&setup)? {
                Some(ldconfig) => ldconfig.wait(),
                None => Ok(()),
            }
        })
        .map_err(|e| namespace_error("spawn setup thread", Some(e)))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(PendingSetup { thread, rootfs }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        // The thread dropped the sender without a word: it panicked.
        Err(_) => {
            let _ = thread.join();
            Err(namespace_error("setup thread panicked", None))
        }
    }
}

/// Moves the calling thread into a private copy of its mount namespace.
fn private_namespace() -> Result<()> {
    // SAFETY: unshare with CLONE_FS|CLONE_NEWNS only changes the calling thread's fs_struct and
    // mount namespace (the other threads keep the host's).
    if unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) } < 0 {
        return Err(namespace_error(
            "unshare(CLONE_FS|CLONE_NEWNS)",
            Some(std::io::Error::last_os_error()),
        ));
    }
    // SAFETY: mount(2) with a static path and no data; only this thread's new namespace changes.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        return Err(namespace_error(
            "make the private namespace's mounts private",
            Some(std::io::Error::last_os_error()),
        ));
    }
    Ok(())
}

/// In the setup thread, in its private namespace: the mounts, the links, ldconfig started.
fn mount_link_and_start(setup: &EarlySetup) -> Result<Option<PendingLdcache>> {
    // Opened in the private namespace: mounts below it land there only.
    let root = ContainerRoot::open(&setup.rootfs)?;
    // Without folders there is no ldconfig, and the mounts would serve nobody.
    let binds = if setup.folders.is_empty() {
        &[][..]
    } else {
        &setup.binds[..]
    };
    for bind in binds {
        let opts = MountOptions {
            read_only: bind.read_only,
            nosuid: true,
            nodev: true,
            noexec: false,
        };
        root.bind_mount(&bind.source, &bind.destination, opts)?;
    }
    create_symlinks_in(&root, &setup.links)?;
    drop(root);
    if setup.folders.is_empty() {
        return Ok(None);
    }
    start_ldcache_update(
        &setup.rootfs,
        &setup.folders,
        &setup.ldconfig,
        setup.ldcache,
    )
    .map(Some)
}
