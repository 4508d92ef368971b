//! The client watcher of one GPU: runs with every health probe while the GPU is ready.
//!
//! Each pass, bounded by the command timeout per command, it
//! 1. gives every MPS server it has not seen yet the per-server limits
//!    (`set_active_thread_percentage <srv> P`, `set_device_pinned_mem_limit <srv> 0 <M>M`): the
//!    defaults already reach new servers, this pins them even if a driver did not copy them;
//!    it reads the limits of servers it limited before back and restores them when a tenant
//!    changed them (`set_active_thread_percentage <srv> 100` through the pipe directory);
//! 2. lists each server's clients (`get_client_list <srv>`) and maps each new client pid to its
//!    container through `<procRoot>/<pid>/cgroup` ([`crate::cgroup`]), remembering the
//!    container's cgroup directory;
//! 3. ends clients by [`crate::enforce::decide`] with `terminate_client <srv> <pid>`;
//! 4. publishes servers, clients per container and terminations on the [`Board`], with each
//!    server's user and the clients waiting for another user's server ([`crate::users`]).
//!
//! Every action is logged with the container id it concerns.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use crate::cgroup::{owner_of, Owner};
use crate::control::ControlEnv;
use crate::enforce::{decide, parse_pids, ClientView, Termination};
use crate::limits::Limits;
use crate::settings::EnforceSettings;
use crate::status::{now_secs, Board, ClientStatus, WaitingClient};
use crate::users::ClientLog;

/// Scope label of drift in one server's limits.
pub const DRIFT_SERVER: &str = "server";

/// Passes a pid must be missing before its client counts as `process_gone`.
const PROCESS_GONE_PASSES: u32 = 2;

/// What was learnt about a client when it was first seen.
#[derive(Debug, Clone)]
struct Tracked {
    seq: u64,
    owner: Option<Owner>,
    /// The owner's cgroup directory, when it existed at first sight.
    cgroup_dir: Option<PathBuf>,
    /// `/proc/<pid>/cgroup` could not be read at first sight.
    unreadable: bool,
    /// Consecutive passes in which the pid did not exist.
    missing: u32,
}

/// Per-GPU watcher state (kept across passes; reset when the control daemon restarts).
#[derive(Debug)]
pub struct Watcher {
    pub uuid: String,
    pub settings: EnforceSettings,
    /// Per-server limits: thread percentage and pinned memory (MiB).
    pub limits: (u32, Option<u64>),
    limited: BTreeSet<u32>,
    clients: BTreeMap<(u32, u32), Tracked>,
    next_seq: u64,
    /// The control daemon's `control.log`, read for clients waiting on another user.
    pub client_log: Option<ClientLog>,
    /// Waiting clients already logged.
    warned: BTreeSet<u32>,
}

impl Watcher {
    pub fn new(uuid: &str, settings: EnforceSettings, limits: (u32, Option<u64>)) -> Self {
        Watcher {
            uuid: uuid.to_string(),
            settings,
            limits,
            limited: BTreeSet::new(),
            clients: BTreeMap::new(),
            next_seq: 0,
            client_log: None,
            warned: BTreeSet::new(),
        }
    }

    /// Forgets everything (a new control daemon has new servers and clients).
    pub fn reset(&mut self) {
        self.limited.clear();
        self.clients.clear();
    }

    fn server_limits(&self) -> Limits {
        Limits {
            active_thread_percentage: self.limits.0,
            pinned_memory_limit_mib: self.limits.1,
        }
    }

    /// Reads a limited server's limits back; restores them (and counts a `server` drift) when
    /// someone changed them through the pipe directory.
    async fn check_server(&mut self, env: &ControlEnv, board: &Board, srv: u32, to: Duration) {
        let limits = self.server_limits();
        let what = match limits.read(env, Some(srv), to).await {
            Ok(got) => match limits.mismatch(&got) {
                None => return,
                Some(what) => what,
            },
            Err(e) => {
                tracing::debug!(gpu = %self.uuid, server = srv, error = %e, "cannot read server limits");
                return;
            }
        };
        tracing::warn!(gpu = %self.uuid, server = srv, scope = DRIFT_SERVER, drift = %what,
            "MPS server limits were changed through the pipe directory; restoring");
        board.update(&self.uuid, |s| {
            *s.usage
                .limit_drifts
                .entry(DRIFT_SERVER.to_string())
                .or_insert(0) += 1;
        });
        self.limited.remove(&srv);
        self.limit_server(env, srv, to).await;
    }

    async fn limit_server(&mut self, env: &ControlEnv, srv: u32, to: Duration) {
        let (pct, mem) = self.limits;
        let cmd = self.server_limits().set_commands(Some(srv));
        match env.send(&cmd, to).await {
            Ok(_) => {
                self.limited.insert(srv);
                tracing::info!(gpu = %self.uuid, server = srv, active_thread_percentage = pct,
                    pinned_memory_limit_mib = ?mem, "per-server limits applied to new MPS server");
            }
            Err(e) => {
                tracing::warn!(gpu = %self.uuid, server = srv, error = %e, "cannot apply per-server limits; retrying next pass")
            }
        }
    }

    fn track(&mut self, srv: u32, pid: u32) {
        if self.clients.contains_key(&(srv, pid)) {
            return;
        }
        self.next_seq += 1;
        let (owner, unreadable) = match owner_of(&self.settings.proc_root, pid) {
            Ok(o) => (o, false),
            Err(_) => (None, true),
        };
        let cgroup_dir = owner
            .as_ref()
            .and_then(|o| o.cgroup_dir(&self.settings.cgroup_root));
        match &owner {
            Some(o) => {
                tracing::info!(gpu = %self.uuid, server = srv, client = pid, container = %o.id,
                runtime = o.runtime.as_str(), cgroup = %o.path, "new MPS client")
            }
            None => tracing::info!(gpu = %self.uuid, server = srv, client = pid, unreadable,
                "new MPS client (host process)"),
        }
        self.clients.insert(
            (srv, pid),
            Tracked {
                seq: self.next_seq,
                owner,
                cgroup_dir,
                unreadable,
                missing: 0,
            },
        );
    }

    /// One pass given the `get_server_list` reply. Errors are recorded, never fatal.
    pub async fn pass(&mut self, env: &ControlEnv, board: &Board, servers: &str, to: Duration) {
        let mut errors = Vec::new();
        let servers = match parse_pids(servers) {
            Ok(s) => s,
            Err(e) => {
                board.update(&self.uuid, |s| {
                    s.usage.last_pass_error = Some(e.to_string())
                });
                return;
            }
        };
        let listed = self
            .list_clients(env, board, &servers, to, &mut errors)
            .await;
        self.limited.retain(|s| servers.contains(s));
        self.clients.retain(|k, _| listed.contains(k));
        for &(srv, pid) in &listed {
            self.track(srv, pid);
        }
        let proc_root = self.settings.proc_root.clone();
        for (&(_, pid), t) in self.clients.iter_mut() {
            t.missing = if proc_root.join(pid.to_string()).exists() {
                0
            } else {
                t.missing + 1
            };
        }
        let views: Vec<ClientView> = self
            .clients
            .iter()
            .map(|(&(server, pid), t)| ClientView {
                server,
                pid,
                seq: t.seq,
                container: t.owner.as_ref().map(|o| o.id.clone()),
                container_gone: t.cgroup_dir.as_ref().is_some_and(|d| !d.is_dir()),
                // Two passes: while a runtime deletes a container its processes die a moment
                // before its cgroup is removed; that is `container_gone`, not a stale pid.
                process_gone: t.unreadable || t.missing >= PROCESS_GONE_PASSES,
            })
            .collect();
        let mut ended = Vec::new();
        for t in decide(&views, self.settings.max_clients_per_container) {
            if self.terminate(env, &t, to).await {
                ended.push(t);
            } else {
                errors.push(format!("terminate_client {} {} failed", t.server, t.pid));
            }
        }
        let clients: Vec<ClientStatus> = self
            .clients
            .iter()
            .map(|(&(server, pid), t)| ClientStatus {
                pid,
                server,
                container: t.owner.as_ref().map(|o| o.id.clone()),
                runtime: t.owner.as_ref().map(|o| o.runtime.as_str().to_string()),
                pod: None,
                namespace: None,
                container_name: None,
            })
            .collect();
        let limited = self.limited.len() as u64;
        let (server_users, waiting) = self.users(&servers, &listed);
        board.update(&self.uuid, |s| {
            let u = &mut s.usage;
            u.servers = servers.clone();
            u.clients = clients;
            u.server_users = server_users;
            u.waiting_clients = waiting;
            for t in &ended {
                *u.terminations.entry(t.reason.as_str().into()).or_insert(0) += 1;
            }
            u.servers_limited = u.servers_limited.max(limited);
            u.last_pass_at = Some(now_secs());
            u.last_pass_error = (!errors.is_empty()).then(|| errors.join("; "));
        });
    }

    /// Each server's user, and the clients waiting for another user's server (each logged once).
    fn users(
        &mut self,
        servers: &[u32],
        listed: &BTreeSet<(u32, u32)>,
    ) -> (BTreeMap<u32, u32>, Vec<WaitingClient>) {
        let proc_root = self.settings.proc_root.clone();
        let server_users: BTreeMap<u32, u32> = servers
            .iter()
            .filter_map(|&s| crate::users::process_uid(&proc_root, s).map(|u| (s, u)))
            .collect();
        let Some(log) = self.client_log.as_mut() else {
            return (server_users, Vec::new());
        };
        log.poll(&proc_root);
        let attached: BTreeSet<u32> = listed.iter().map(|&(_, p)| p).collect();
        let uids: BTreeSet<u32> = server_users.values().copied().collect();
        let waits_for: Vec<u32> = uids.iter().copied().collect();
        let waiting: Vec<WaitingClient> = log
            .waiting(&proc_root, &attached, &uids)
            .into_iter()
            .map(|w| WaitingClient {
                pid: w.pid,
                uid: w.uid,
                waits_for_uids: waits_for.clone(),
            })
            .collect();
        self.warned.retain(|p| waiting.iter().any(|w| w.pid == *p));
        for w in &waiting {
            if self.warned.insert(w.pid) {
                tracing::warn!(gpu = %self.uuid, client = w.pid, uid = w.uid, server_uids = ?waits_for,
                    "MPS client waits: the control daemon runs one user's server at a time, so it starts only when every client of the running user is done (run all clients of a GPU as one user: mpsDaemon.clientUser)");
            }
        }
        (server_users, waiting)
    }

    /// Limits each new server (checks the known ones) and lists the clients of every server.
    async fn list_clients(
        &mut self,
        env: &ControlEnv,
        board: &Board,
        servers: &[u32],
        to: Duration,
        errors: &mut Vec<String>,
    ) -> BTreeSet<(u32, u32)> {
        let mut listed: BTreeSet<(u32, u32)> = BTreeSet::new();
        for &srv in servers {
            if self.limited.contains(&srv) {
                self.check_server(env, board, srv, to).await;
            } else {
                self.limit_server(env, srv, to).await;
            }
            match env.send(&format!("get_client_list {srv}"), to).await {
                Ok(reply) => match parse_pids(&reply) {
                    Ok(pids) => listed.extend(pids.into_iter().map(|p| (srv, p))),
                    Err(e) => errors.push(e.to_string()),
                },
                Err(e) => errors.push(e.to_string()),
            }
        }
        listed
    }

    async fn terminate(&mut self, env: &ControlEnv, t: &Termination, to: Duration) -> bool {
        let container = t.container.as_deref().unwrap_or("-");
        let owner = self
            .clients
            .get(&(t.server, t.pid))
            .and_then(|c| c.owner.clone());
        let runtime = owner.as_ref().map_or("-", |o| o.runtime.as_str());
        let cmd = format!("terminate_client {} {}", t.server, t.pid);
        match env.send(&cmd, to).await {
            Ok(reply) if reply.trim() == "0" => {
                tracing::warn!(gpu = %self.uuid, container, runtime, server = t.server, client = t.pid,
                    reason = t.reason.as_str(), cap = ?self.settings.max_clients_per_container,
                    "terminated MPS client");
                self.clients.remove(&(t.server, t.pid));
                true
            }
            Ok(reply) => {
                tracing::error!(gpu = %self.uuid, container, server = t.server, client = t.pid,
                    reason = t.reason.as_str(), reply = %reply, "terminate_client refused");
                false
            }
            Err(e) => {
                tracing::error!(gpu = %self.uuid, container, server = t.server, client = t.pid,
                    reason = t.reason.as_str(), error = %e, "terminate_client failed");
                false
            }
        }
    }
}
