//! Consumable-capacity MPS shares (KEP-5075) of one GPU share **one** control daemon: NVIDIA's
//! MPS serves a GPU for a user through one control daemon and one server (the simulator refuses
//! a second daemon of a GPU and user, as the driver does), and a client reaches one control
//! daemon (its `CUDA_MPS_PIPE_DIRECTORY`). The daemon starts with the GPU's first share and stops
//! with its last.
//!
//! Limits. MPS enforces a limit per client process: the server's value (the daemon's default,
//! or `set_active_thread_percentage`/`set_device_pinned_mem_limit` for a running server) is a
//! ceiling, and a client may only lower its own through `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` /
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` in its environment (`nvidia-runtime-facts.md` §8). There is
//! no per-share ceiling for clients of one user, so each share is enforced in two layers:
//! - its containers get the share's limits in their environment (the claim's CDI spec), so every
//!   client started as the pod spec says runs within its share;
//! - the daemon's ceiling is the **largest** share of the GPU at any time, set before the
//!   prepare that needs it answers (defaults and every running server, read back), lowered
//!   again when that share leaves. A client that rewrites its own environment can so take at
//!   most the largest co-tenant share's limits, never more than the GPU's largest share and
//!   never the unlimited GPU. The smallest-share ceiling was rejected: it would silently give
//!   every larger share the smallest one's memory (its allocations fail).
//!
//! Members are files `<dir>/members/<claim UID>.json` (the share's [`ClaimMps`]), so a restarted
//! plugin still knows the GPU's shares and stops the daemon with the last one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gpu_mps_daemon::daemon_proc;
use gpu_mps_daemon::layout::GpuLayout;

use crate::mps::{check, env, stop_stale_at, ClaimMps, MpsDaemon, MpsEdits, MpsOptions};
use crate::mps_supervise::{self, Proc, Supervised};

/// Largest member file read.
const MAX_MEMBER: u64 = 64 << 10;

/// `<mps root>/gpu/<GPU UUID>`: the GPU's shared daemon.
pub fn layout(root: &Path, gpu: &str) -> GpuLayout {
    GpuLayout::new(&root.join("gpu"), gpu)
}

/// Whether `dir` is a GPU's shared daemon dir (not a claim's).
pub fn is_shared_dir(root: &Path, dir: &Path) -> bool {
    dir.parent() == Some(root.join("gpu").as_path())
}

fn members_dir(dir: &Path) -> PathBuf {
    dir.join("members")
}

/// The shares of a GPU, from its member files.
fn members(dir: &Path) -> Vec<ClaimMps> {
    let Ok(rd) = std::fs::read_dir(members_dir(dir)) else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| gpuhook_node::bounded::read_bounded(&e.path(), MAX_MEMBER).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect()
}

/// The ceiling of `shares`: the largest thread percentage and pinned limit.
pub fn ceiling(shares: &[ClaimMps]) -> Option<ClaimMps> {
    let first = shares.first()?;
    let pct = shares.iter().map(|s| s.active_thread_percentage).max()?;
    let mem = shares
        .iter()
        .map(|s| s.pinned_limits_mib.first().copied().flatten())
        .max()
        .flatten();
    Some(ClaimMps {
        uuids: first.uuids.clone(),
        active_thread_percentage: pct,
        pinned_limits_mib: vec![mem],
        shared: true,
    })
}

/// The environment a share's clients get: its own limits (device 0: the daemon serves one GPU).
pub fn client_env(share: &ClaimMps) -> Vec<String> {
    let mut env = vec![format!(
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={}",
        share.active_thread_percentage
    )];
    if let Some(Some(m)) = share.pinned_limits_mib.first() {
        env.push(format!("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={m}M"));
    }
    env
}

/// The shared daemons this run supervises, by GPU dir; one lock for joins and leaves.
#[derive(Debug, Default)]
pub struct SharedDaemons {
    gpus: tokio::sync::Mutex<HashMap<PathBuf, Supervised>>,
}

/// Sets `c` as the ceiling of the running daemon of `env`: defaults, then every running server
/// (their later clients), read back.
async fn set_ceiling(
    env: &gpu_mps_daemon::control::ControlEnv,
    c: &ClaimMps,
    to: std::time::Duration,
) -> Result<(), String> {
    let pct = c.active_thread_percentage;
    let mem = c.pinned_limits_mib.first().copied().flatten();
    let mut cmds = vec![format!("set_default_active_thread_percentage {pct}")];
    if let Some(m) = mem {
        cmds.push(format!("set_default_device_pinned_mem_limit 0 {m}M"));
    }
    let servers = env
        .send("get_server_list", to)
        .await
        .map_err(|e| e.to_string())?;
    for pid in servers
        .split_whitespace()
        .filter(|p| p.parse::<u32>().is_ok())
    {
        cmds.push(format!("set_active_thread_percentage {pid} {pct}"));
        if let Some(m) = mem {
            cmds.push(format!("set_device_pinned_mem_limit {pid} 0 {m}M"));
        }
    }
    env.send(&cmds.join("\n"), to)
        .await
        .map_err(|e| e.to_string())?;
    check(env, c, to).await
}

impl SharedDaemons {
    /// The shared daemons at `dirs` (of prepared shares, an earlier run's): adopted when
    /// running, restarted with their members' ceiling when dead (`mps_supervise.rs`).
    pub fn adopt(opts: &MpsOptions, dirs: Vec<PathBuf>) -> Self {
        let mut gpus = HashMap::new();
        for dir in dirs {
            let gpu = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            let l = layout(&opts.root, gpu.as_deref().unwrap_or_default());
            if gpus.contains_key(&l.dir) {
                continue;
            }
            let Some(c) = ceiling(&members(&l.dir)) else {
                continue;
            };
            let proc = mps_supervise::found(&l);
            gpus.insert(l.dir.clone(), Supervised::spawn(opts, l, c, proc));
        }
        SharedDaemons {
            gpus: tokio::sync::Mutex::new(gpus),
        }
    }

    /// Adds share `uid` to its GPU's daemon (started when it is the first), with the ceiling
    /// raised to cover it before this returns. On error the share is not a member.
    pub async fn join(
        &self,
        opts: &MpsOptions,
        uid: &str,
        want: &ClaimMps,
    ) -> Result<MpsEdits, String> {
        let gpu = match want.uuids.as_slice() {
            [one] => one,
            _ => return Err("an MPS share is served by the daemon of one GPU".into()),
        };
        let l = layout(&opts.root, gpu);
        let mut gpus = self.gpus.lock().await;
        let member = members_dir(&l.dir).join(format!("{uid}.json"));
        let bytes = serde_json::to_vec(want).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(members_dir(&l.dir))
            .map_err(|e| format!("{}: {e}", l.dir.display()))?;
        gpuhook_fs::write_atomic(&member, &bytes, 0o600).map_err(|e| e.to_string())?;
        let res = self.converge(opts, &l, &mut gpus).await;
        if let Err(e) = res {
            let _ = std::fs::remove_file(&member);
            if let Err(again) = self.converge(opts, &l, &mut gpus).await {
                tracing::warn!(gpu = %gpu, error = %again, "MPS ceiling after a failed join");
            }
            return Err(e);
        }
        tracing::info!(claim = uid, gpu = %gpu, threads = want.active_thread_percentage, "MPS share joined its GPU's control daemon");
        Ok(MpsEdits {
            pipe: l.pipe.clone(),
            shm: opts.shm.then(|| l.shm.clone()),
            env: client_env(want),
        })
    }

    /// Removes share `uid` of the GPU dir `dir`; the last one stops the daemon.
    pub async fn leave(&self, opts: &MpsOptions, uid: &str, dir: &Path) {
        let mut gpus = self.gpus.lock().await;
        let _ = std::fs::remove_file(members_dir(dir).join(format!("{uid}.json")));
        let gpu = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        let l = layout(&opts.root, gpu.as_deref().unwrap_or_default());
        if let Err(e) = self.converge(opts, &l, &mut gpus).await {
            tracing::warn!(dir = %dir.display(), error = %e, "MPS ceiling after a share left");
        }
    }

    /// Makes the daemon of `l` match its members: none → stopped and its dir removed; else
    /// running with their ceiling (a supervised one gets it as its restart limits too; with
    /// none supervised, whatever is there is stopped and a new one started).
    async fn converge(
        &self,
        opts: &MpsOptions,
        l: &GpuLayout,
        gpus: &mut HashMap<PathBuf, Supervised>,
    ) -> Result<(), String> {
        let Some(c) = ceiling(&members(&l.dir)) else {
            self.stop_gpu(opts, l, gpus).await;
            return Ok(());
        };
        if let Some(s) = gpus.get(&l.dir) {
            // Held: a restart in progress finishes first, a later one starts with `c`.
            let mut want = s.want.lock().await;
            *want = c.clone();
            set_ceiling(&env(opts, l, &c), &c, opts.command_timeout).await?;
            // The marker follows the ceiling.
            let pid = crate::mps_node::recorded_pid(l);
            let (pct, mem) = (c.active_thread_percentage, &c.pinned_limits_mib);
            return crate::mps_node::write_ready(l, pid, &c.uuids, pct, mem);
        }
        crate::mps_node::remove_ready(l);
        daemon_proc::stop_stale(l, &c.uuids.join(","), opts.command_timeout).await;
        for d in [&l.pipe, &l.log] {
            let _ = std::fs::remove_dir_all(d);
        }
        let name = format!("gpu {}", c.uuids.join(","));
        let d = MpsDaemon::start_at(opts, l.clone(), &name, &c).await?;
        let (layout, proc) = d.into_parts();
        let s = Supervised::spawn(opts, layout, c, Proc::Child(Box::new(proc)));
        gpus.insert(l.dir.clone(), s);
        Ok(())
    }

    async fn stop_gpu(
        &self,
        opts: &MpsOptions,
        l: &GpuLayout,
        gpus: &mut HashMap<PathBuf, Supervised>,
    ) {
        match gpus.remove(&l.dir) {
            Some(s) => s.stop().await,
            None => stop_stale_at(opts, l, "shared").await,
        }
        if let Err(e) = std::fs::remove_dir_all(&l.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %l.dir.display(), error = %e, "MPS dir left behind");
            }
        }
    }

    /// Shutdown: the shared daemons keep running for their shares' containers.
    pub async fn shutdown(&self) {
        for (dir, s) in self.gpus.lock().await.drain() {
            tracing::info!(dir = %dir.display(), "leaving a GPU's shared MPS daemon to the next run");
            s.detach().await;
        }
    }
}

#[cfg(test)]
#[path = "mps_share_tests.rs"]
mod tests;
