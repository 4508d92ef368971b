//! The control daemon's command language (what `echo <cmd> | nvidia-cuda-mps-control` sends)
//! and its replies. Replies follow NVIDIA's shapes: lists one pid per line, percentages as
//! `25.0`, memory limits in MiB as `4096M`, `terminate_client` prints `0`, and `set_*`
//! commands print nothing (except `set_default_active_thread_percentage`, which echoes the
//! new value). Commands starting with `sim_` exist only in the simulator.

use crate::error::CommandError;
use crate::limits::{format_mem, format_percentage, parse_mem, parse_percentage};
use crate::state::{send, State};

/// What the connection handler must do after a command.
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Send this reply text (possibly empty).
    Reply(String),
    /// Reply, then remove socket + pid file and exit.
    Quit,
    /// Reply now; exit once clients are gone or after this many seconds.
    QuitAfter(u64),
    /// Exit immediately without replying or cleaning up (simulated crash).
    Crash,
    /// Never answer again (simulated wedge).
    Wedge,
}

fn reply(s: impl Into<String>) -> Action {
    Action::Reply(s.into())
}

fn pid_arg(s: Option<&&str>) -> Result<u32, CommandError> {
    s.and_then(|v| v.parse().ok()).ok_or(CommandError::Pid)
}

fn usage(cmd: &str, args: &str) -> Action {
    reply(format!("Usage: {cmd} {args}"))
}

/// Executes one command line against the daemon state.
pub fn execute(state: &mut State, line: &str) -> Action {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&cmd, args)) = words.split_first() else {
        return reply("");
    };
    match execute_inner(state, cmd, args) {
        Ok(a) => a,
        Err(e) => reply(e.to_string()),
    }
}

fn server_mut(state: &mut State, pid: u32) -> Result<&mut crate::state::Server, CommandError> {
    state
        .servers
        .get_mut(&pid)
        .ok_or(CommandError::NoServer(pid))
}

/// Every command the daemon knows, for telling a wrong argument count from an unknown command.
const COMMANDS: &[&str] = &[
    "get_server_list",
    "get_server_status",
    "get_client_list",
    "quit",
    "set_default_active_thread_percentage",
    "get_default_active_thread_percentage",
    "set_active_thread_percentage",
    "get_active_thread_percentage",
    "set_default_device_pinned_mem_limit",
    "get_default_device_pinned_mem_limit",
    "set_device_pinned_mem_limit",
    "get_device_pinned_mem_limit",
    "terminate_client",
    "set_default_client_priority",
    "get_default_client_priority",
    "ps",
    "sim_get_client_limits",
    "sim_get_pending_list",
    "sim_crash",
    "sim_wedge",
];

fn execute_inner(state: &mut State, cmd: &str, args: &[&str]) -> Result<Action, CommandError> {
    for family in [servers, percentages, pinned_memory, others] {
        if let Some(action) = family(state, cmd, args)? {
            return Ok(action);
        }
    }
    if COMMANDS.contains(&cmd) {
        Err(CommandError::Arguments(cmd.to_string()))
    } else {
        Err(CommandError::Unknown(cmd.to_string()))
    }
}

/// Servers and clients: lists, status, start, quit, `terminate_client`.
fn servers(state: &mut State, cmd: &str, args: &[&str]) -> Result<Option<Action>, CommandError> {
    Ok(Some(match (cmd, args.len()) {
        ("get_server_list", 0) => reply(join(state.servers.keys())),
        ("get_server_status", 1) => {
            let pid = pid_arg(args.first())?;
            let s = state.servers.get(&pid).ok_or(CommandError::NoServer(pid))?;
            reply(if s.shutting_down {
                "TERMINATING"
            } else {
                "ACTIVE"
            })
        }
        ("start_server", 2) if args[0] == "-uid" => {
            let uid: u32 = args[1]
                .parse()
                .map_err(|_| CommandError::Uid(args[1].to_string()))?;
            if let Some(other) = state.servers.values().find(|s| s.uid != uid) {
                return Err(CommandError::OtherUser {
                    uid: other.uid,
                    pid: other.pid,
                });
            }
            if !state.servers.values().any(|s| s.uid == uid) {
                state.start_server(uid, None)?;
            }
            reply("")
        }
        ("start_server", _) => usage("start_server", "-uid <uid>"),
        ("get_client_list", 1) => {
            let pid = pid_arg(args.first())?;
            reply(join(server_mut(state, pid)?.clients.iter()))
        }
        ("quit", 0) => Action::Quit,
        ("quit", 2) if args[0] == "-t" => Action::QuitAfter(
            args[1]
                .parse()
                .map_err(|_| CommandError::Timeout(args[1].to_string()))?,
        ),
        ("terminate_client", 2) => {
            let server = pid_arg(args.first())?;
            let client = pid_arg(args.get(1))?;
            let ok = state
                .clients
                .get(&client)
                .is_some_and(|c| c.server == server);
            if !ok {
                return Err(CommandError::NotOnServer { client, server });
            }
            if let Some(c) = state.clients.get(&client) {
                send(&c.stream, "TERMINATE");
            }
            state.client_gone(client);
            reply("0")
        }
        ("ps", 0) => reply(ps(state)),
        _ => return Ok(None),
    }))
}

/// Active thread percentages, the default and per server.
fn percentages(
    state: &mut State,
    cmd: &str,
    args: &[&str],
) -> Result<Option<Action>, CommandError> {
    Ok(Some(match (cmd, args.len()) {
        ("set_default_active_thread_percentage", 1) => {
            state.default_atp = parse_percentage(args[0])?;
            reply(format_percentage(state.default_atp))
        }
        ("get_default_active_thread_percentage", 0) => reply(format_percentage(state.default_atp)),
        ("set_active_thread_percentage", 2) => {
            let pct = parse_percentage(args[1])?;
            server_mut(state, pid_arg(args.first())?)?.active_thread_percentage = pct;
            reply(format_percentage(pct))
        }
        ("get_active_thread_percentage", 1) => reply(format_percentage(
            server_mut(state, pid_arg(args.first())?)?.active_thread_percentage,
        )),
        _ => return Ok(None),
    }))
}

/// Pinned device memory limits, the default and per server.
fn pinned_memory(
    state: &mut State,
    cmd: &str,
    args: &[&str],
) -> Result<Option<Action>, CommandError> {
    Ok(Some(match (cmd, args.len()) {
        ("set_default_device_pinned_mem_limit", 2) => {
            let dev = state.devices.resolve(args[0])?;
            let v = parse_mem(args[1])?;
            if !ignored_uuid(state, args[0]) {
                state.default_pinned.insert(dev, v);
            }
            reply("")
        }
        ("get_default_device_pinned_mem_limit", 1) => {
            let dev = state.devices.resolve(args[0])?;
            reply(format_mem(
                state.default_pinned.get(&dev).copied().unwrap_or(0),
            ))
        }
        ("set_device_pinned_mem_limit", 3) => {
            let dev = state.devices.resolve(args[1])?;
            let v = parse_mem(args[2])?;
            let ignore = ignored_uuid(state, args[1]);
            let server = server_mut(state, pid_arg(args.first())?)?;
            if !ignore {
                server.pinned.insert(dev, v);
            }
            reply("")
        }
        ("get_device_pinned_mem_limit", 2) => {
            let dev = state.devices.resolve(args[1])?;
            let s = server_mut(state, pid_arg(args.first())?)?;
            reply(format_mem(s.pinned.get(&dev).copied().unwrap_or(0)))
        }
        _ => return Ok(None),
    }))
}

/// Client priority and the simulator's own `sim_*` commands.
fn others(state: &mut State, cmd: &str, args: &[&str]) -> Result<Option<Action>, CommandError> {
    Ok(Some(match (cmd, args.len()) {
        ("set_default_client_priority", 1) => match args[0] {
            "0" | "1" => {
                state.default_priority = args[0].parse().unwrap_or(0);
                reply("")
            }
            v => return Err(CommandError::Priority(v.to_string())),
        },
        ("get_default_client_priority", 0) => reply(state.default_priority.to_string()),
        ("sim_get_client_limits", 1) => {
            let pid = pid_arg(args.first())?;
            let c = state.clients.get(&pid).ok_or(CommandError::NoClient(pid))?;
            reply(c.limits_line())
        }
        ("sim_get_pending_list", 0) => reply(join(state.pending.iter().map(|(r, _)| r.pid))),
        ("sim_crash", 0) => Action::Crash,
        ("sim_wedge", 0) => Action::Wedge,
        _ => return Ok(None),
    }))
}

/// The `ignore-uuid-limits` fault: a limit named by UUID is accepted but not applied.
fn ignored_uuid(state: &State, dev: &str) -> bool {
    state.fault == crate::config::Fault::IgnoreUuidLimits
        && !dev.bytes().all(|b| b.is_ascii_digit())
}

fn join<T: ToString>(it: impl Iterator<Item = T>) -> String {
    it.map(|p| p.to_string()).collect::<Vec<_>>().join("\n")
}

fn pid_ns(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .ok()
        .and_then(|l| {
            let s = l.to_string_lossy().into_owned();
            s.strip_prefix("pid:[")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "-".to_string())
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "-".to_string())
}

/// `ps`: one row per server and client (PID, ID, SERVER, DEVICE, NAMESPACE, COMMAND).
fn ps(state: &State) -> String {
    let mut rows = vec![format!(
        "{:>8} {:>4} {:>8} {:<10} {:<12} COMMAND",
        "PID", "ID", "SERVER", "DEVICE", "NAMESPACE"
    )];
    let mut id = 0;
    for s in state.servers.values() {
        id += 1;
        rows.push(format!(
            "{:>8} {:>4} {:>8} {:<10} {:<12} nvidia-cuda-mps-server",
            s.pid,
            id,
            "-",
            "-",
            pid_ns(s.pid)
        ));
        for c in s.clients.iter().filter_map(|p| state.clients.get(p)) {
            id += 1;
            rows.push(format!(
                "{:>8} {:>4} {:>8} {:<10} {:<12} {}",
                c.req.pid,
                id,
                s.pid,
                "-",
                pid_ns(c.req.pid),
                comm(c.req.pid)
            ));
        }
    }
    rows.join("\n")
}
