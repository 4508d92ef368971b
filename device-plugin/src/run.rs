//! The plugin's life: wait for the kubelet, serve and register every resource, follow health
//! and config changes, start over when the kubelet restarts, stop cleanly on shutdown.
//!
//! The kubelet's device manager removes every socket in its dir when it starts
//! (`ManagerImpl.CleanupPluginDirectory`) and serves a new `kubelet.sock`; plugins notice and
//! register again (NVIDIA's plugin watches for `kubelet.sock` being created). We poll the
//! (dev, inode) of `kubelet.sock` and of our own sockets every [`Options::poll`]: a new
//! kubelet socket or a missing socket of ours restarts every server and registers again.
//!
//! The config's files are checked at the same pace, cheaply ([`crate::changes`]); only when
//! what feeds the advertisement changed ([`AdSource::fingerprint`]) is it loaded again, and only
//! a different advertisement is applied and logged ("config reloaded").

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpuhook_node::Inventory;
use gpuhook_sharing::Advertisement;
use tokio::sync::watch;

use crate::changes::{stamp, Stamp};
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
    /// A hash of the content that feeds [`AdSource::load`], computed when a watched file's
    /// stamp changed: equal to the last one, nothing is reloaded. `None`: always reload.
    fn fingerprint(&self) -> Option<u64> {
        None
    }
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

struct Plugin {
    opts: Options,
    source: Box<dyn AdSource>,
    current: Loaded,
    health: watch::Receiver<HealthState>,
    health_open: bool,
    preferrer: Arc<dyn Preferrer>,
    stamp: Stamp,
    /// The inputs' fingerprint before the last load (`None`: unknown, the next change loads).
    fingerprint: Option<u64>,
    /// Where the current state is published (the metrics endpoint reads it).
    published: watch::Sender<Option<Arc<Loaded>>>,
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

    /// Reloads the config when what feeds it changed (a watched file's stamp, then its
    /// fingerprint); an invalid config is logged and the last good one kept.
    fn reload(&mut self) -> Reload {
        let now = stamp(&self.source.watched());
        if now == self.stamp {
            return Reload::Unchanged;
        }
        self.stamp = now;
        let fingerprint = self.source.fingerprint();
        if fingerprint.is_some() && fingerprint == self.fingerprint {
            tracing::trace!("watched files touched, their content unchanged");
            return Reload::Unchanged;
        }
        self.fingerprint = fingerprint;
        tracing::debug!("the config's inputs changed: loading");
        match self.source.load() {
            Ok(l) => self.apply(l),
            Err(e) => {
                tracing::error!(error = %crate::error::chain(&*e), config = %self.current.ad.config_name, "invalid config; still serving the last good one");
                Reload::Unchanged
            }
        }
    }

    fn apply(&mut self, l: Loaded) -> Reload {
        let same = l.ad == self.current.ad
            && l.policy == self.current.policy
            && l.inventory == self.current.inventory;
        if same {
            tracing::debug!(config = %l.ad.config_name, "config inputs changed, the advertisement did not");
            return Reload::Unchanged;
        }
        let names = |a: &Advertisement| {
            a.resources
                .iter()
                .map(|r| r.name.clone())
                .collect::<Vec<_>>()
        };
        let restart = names(&l.ad) != names(&self.current.ad);
        tracing::info!(config = %l.ad.config_name, resources = ?names(&l.ad), "config reloaded");
        self.current = l;
        self.published
            .send_replace(Some(Arc::new(self.current.clone())));
        if restart {
            Reload::NewResources
        } else {
            Reload::Updated
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
    source: Box<dyn AdSource>,
    health: watch::Receiver<HealthState>,
    preferrer: Arc<dyn Preferrer>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), PluginError> {
    let (published, _) = watch::channel(None);
    run_published(opts, source, health, preferrer, shutdown, published).await
}

/// [`run`], publishing each loaded state on `published` (what the metrics endpoint reports
/// from, with no config read of its own).
pub async fn run_published(
    opts: Options,
    mut source: Box<dyn AdSource>,
    health: watch::Receiver<HealthState>,
    preferrer: Arc<dyn Preferrer>,
    shutdown: impl Future<Output = ()>,
    published: watch::Sender<Option<Arc<Loaded>>>,
) -> Result<(), PluginError> {
    let stamp0 = stamp(&source.watched());
    let fingerprint = source.fingerprint();
    let current = source
        .load()
        .map_err(|source| PluginError::Config { source })?;
    published.send_replace(Some(Arc::new(current.clone())));
    let mut p = Plugin {
        opts,
        source,
        current,
        health,
        health_open: true,
        preferrer,
        stamp: stamp0,
        fingerprint,
        published,
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
