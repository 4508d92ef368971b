//! The plugin's life: wait for the kubelet, serve and register every resource, follow health
//! and config changes, start over when the kubelet restarts, stop cleanly on shutdown.
//!
//! The kubelet's device manager removes every socket in its dir when it starts
//! (`ManagerImpl.CleanupPluginDirectory`) and serves a new `kubelet.sock`; plugins notice and
//! register again (NVIDIA's plugin watches for `kubelet.sock` being created). We poll the
//! (dev, inode) of `kubelet.sock` and of our own sockets every [`Options::poll`]: a new
//! kubelet socket or a missing socket of ours restarts every server and registers again.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use gpuhook_node::Inventory;
use gpuhook_sharing::Advertisement;
use tokio::sync::watch;

use crate::error::PluginError;
use crate::kubelet::{kubelet_socket, register};
use crate::preferred::AllocationPolicy;
use crate::served::{AllocSettings, HealthState, Served};
use crate::server::{socket_id, ResourceServer};
use crate::service::{PreferError, Preferrer};

/// What a config (re)load gives.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub ad: Advertisement,
    /// The node's devices (for passDeviceSpecs' device nodes), when known.
    pub inventory: Option<Arc<Inventory>>,
    /// `flags.plugin.sharedDevicesAllocationPolicy`.
    pub policy: AllocationPolicy,
}

/// Where the advertisement comes from (the config set and the node's inventory).
pub trait AdSource: Send + Sync + 'static {
    /// Files or directories whose change means the config may have changed.
    fn watched(&self) -> Vec<PathBuf>;
    /// Reads the config and computes what to advertise.
    fn load(&mut self) -> Result<Loaded, PreferError>;
}

/// Settings of [`run`].
#[derive(Debug, Clone)]
pub struct Options {
    /// The kubelet's device plugin dir (`kubelet.sock` and our sockets).
    pub plugin_dir: PathBuf,
    /// Where MPS pipe directories appear in containers.
    pub container_pipe_dir: String,
    /// How often the kubelet socket, our sockets and the config files are checked.
    pub poll: Duration,
}

/// (path, (mtime, size, inode)) of each watched path and directory entry.
type Stamp = Vec<(PathBuf, Option<(SystemTime, u64, u64)>)>;

/// A change stamp of the watched paths: (mtime, size, inode) of each and of a directory's entries
/// (a ConfigMap volume swaps a `..data` symlink).
fn stamp(paths: &[PathBuf]) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let one = |p: &Path| {
        let m = std::fs::metadata(p).ok()?;
        Some((m.modified().ok()?, m.len(), m.ino()))
    };
    let mut out = Vec::new();
    for p in paths {
        out.push((p.clone(), one(p)));
        if let Ok(rd) = std::fs::read_dir(p) {
            let mut entries: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .take(256)
                .collect();
            entries.sort();
            out.extend(entries.into_iter().map(|e| {
                let s = one(&e);
                (e, s)
            }));
        }
    }
    out
}

struct Plugin {
    opts: Options,
    source: Box<dyn AdSource>,
    current: Loaded,
    health: watch::Receiver<HealthState>,
    health_open: bool,
    preferrer: Arc<dyn Preferrer>,
    stamp: Stamp,
}

/// What a config check found.
enum Reload {
    Unchanged,
    /// Same resources, new devices or settings: the servers get the new state.
    Updated,
    /// Another set of resources: every server restarts and registers.
    NewResources,
}

/// Why the serving loop ended.
enum Next {
    Shutdown,
    Restart,
}

impl Plugin {
    fn served(&self) -> Vec<Served> {
        let ad = &self.current.ad;
        let settings = AllocSettings::new(
            ad,
            self.current.inventory.as_deref(),
            &self.opts.container_pipe_dir,
        );
        let mut settings = settings;
        settings.policy = self.current.policy;
        let health = self.health.borrow().clone();
        ad.resources
            .iter()
            .map(|r| Served::new(r.clone(), settings.clone(), health.clone()))
            .collect()
    }

    async fn start(&self) -> Result<Vec<ResourceServer>, PluginError> {
        let mut servers = Vec::new();
        for s in self.served() {
            match ResourceServer::start(&self.opts.plugin_dir, s, self.preferrer.clone()) {
                Ok(srv) => servers.push(srv),
                Err(e) => {
                    stop_all(servers).await;
                    return Err(e);
                }
            }
        }
        Ok(servers)
    }

    /// Reloads the config when its files changed; an invalid config is logged and the last good
    /// one kept.
    fn reload(&mut self) -> Reload {
        let now = stamp(&self.source.watched());
        if now == self.stamp {
            return Reload::Unchanged;
        }
        self.stamp = now;
        match self.source.load() {
            Ok(l) => {
                let names = |a: &Advertisement| {
                    a.resources
                        .iter()
                        .map(|r| r.name.clone())
                        .collect::<Vec<_>>()
                };
                let restart = names(&l.ad) != names(&self.current.ad);
                tracing::info!(config = %l.ad.config_name, resources = ?names(&l.ad), "config reloaded");
                self.current = l;
                if restart {
                    Reload::NewResources
                } else {
                    Reload::Updated
                }
            }
            Err(e) => {
                tracing::error!(error = %crate::error::chain(&*e), config = %self.current.ad.config_name, "invalid config; still serving the last good one");
                Reload::Unchanged
            }
        }
    }

    fn refresh(&self, servers: &[ResourceServer]) {
        for (srv, s) in servers.iter().zip(self.served()) {
            srv.update(s);
        }
    }

    async fn health_changed(&mut self) {
        if !self.health_open || self.health.changed().await.is_err() {
            self.health_open = false;
            std::future::pending::<()>().await;
        }
    }

    /// Serves until shutdown, a kubelet restart, a lost socket or a new set of resources.
    async fn serve(
        &mut self,
        servers: &[ResourceServer],
        kubelet: (u64, u64),
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Next {
        let ksock = kubelet_socket(&self.opts.plugin_dir);
        let mut tick = tokio::time::interval(self.opts.poll);
        loop {
            tokio::select! {
                () = &mut *shutdown => return Next::Shutdown,
                () = self.health_changed() => self.refresh(servers),
                _ = tick.tick() => {
                    if socket_id(&ksock) != Some(kubelet) {
                        tracing::info!(socket = %ksock.display(), "kubelet socket replaced (kubelet restart): registering again");
                        return Next::Restart;
                    }
                    if let Some(s) = servers.iter().find(|s| !s.socket_present()) {
                        tracing::warn!(socket = %s.socket().display(), "our socket was removed: serving and registering again");
                        return Next::Restart;
                    }
                    match self.reload() {
                        Reload::NewResources => return Next::Restart,
                        Reload::Updated => self.refresh(servers),
                        Reload::Unchanged => {}
                    }
                }
            }
        }
    }
}

async fn stop_all(servers: Vec<ResourceServer>) {
    for s in servers {
        s.stop().await;
    }
}

/// Waits for `kubelet.sock`; `None` on shutdown.
async fn wait_for_kubelet(
    dir: &Path,
    poll: Duration,
    shutdown: &mut (impl Future<Output = ()> + Unpin),
) -> Option<(u64, u64)> {
    let path = kubelet_socket(dir);
    let mut logged = false;
    loop {
        if let Some(id) = socket_id(&path) {
            return Some(id);
        }
        if !logged {
            tracing::info!(socket = %path.display(), "waiting for the kubelet");
            logged = true;
        }
        tokio::select! {
            () = &mut *shutdown => return None,
            () = tokio::time::sleep(poll) => {}
        }
    }
}

/// Runs the plugin until `shutdown` resolves; every socket it made is removed then.
/// Fails at once when the first config cannot be loaded or a socket cannot be created.
pub async fn run(
    opts: Options,
    mut source: Box<dyn AdSource>,
    health: watch::Receiver<HealthState>,
    preferrer: Arc<dyn Preferrer>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), PluginError> {
    let stamp0 = stamp(&source.watched());
    let current = source
        .load()
        .map_err(|source| PluginError::Config { source })?;
    let mut p = Plugin {
        opts,
        source,
        current,
        health,
        health_open: true,
        preferrer,
        stamp: stamp0,
    };
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let Some(kubelet) = wait_for_kubelet(&p.opts.plugin_dir, p.opts.poll, &mut shutdown).await
        else {
            return Ok(());
        };
        let servers = p.start().await?;
        let mut registered = true;
        for s in &servers {
            if let Err(e) = register(&p.opts.plugin_dir, &s.endpoint(), s.resource()).await {
                tracing::warn!(resource = %s.resource(), error = %crate::error::chain(&e), "registration failed; retrying");
                registered = false;
                break;
            }
            tracing::info!(resource = %s.resource(), endpoint = %s.endpoint(), "registered with the kubelet");
        }
        let next = if registered {
            p.serve(&servers, kubelet, &mut shutdown).await
        } else {
            tokio::select! {
                () = &mut shutdown => Next::Shutdown,
                () = tokio::time::sleep(Duration::from_secs(1)) => Next::Restart,
            }
        };
        stop_all(servers).await;
        if let Next::Shutdown = next {
            tracing::info!("shut down");
            return Ok(());
        }
    }
}
