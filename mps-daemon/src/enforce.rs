//! What to do about the clients of one GPU: the pure decision part of the watcher.
//!
//! MPS itself knows nothing about containers: a container may start any number of client
//! processes, and a client whose container was deleted may linger in the server's list (a CUDA
//! process that was killed without detaching, or an entry left by a crashed client) and hold
//! one of the server's few client slots. Given what the watcher saw, [`decide`] returns which
//! clients to end, and why:
//!
//! - `container_gone`: the container's cgroup directory (recorded when the client was first
//!   seen) no longer exists: the runtime removed the container;
//! - `process_gone`: the client's pid has not existed in `procRoot` for two passes in a row while
//!   the server still lists it (a stale entry);
//! - `over_cap`: the container has more clients on this GPU than `maxClientsPerContainer`; its
//!   NEWEST clients (latest first seen, then highest pid) are ended, never older ones, so work
//!   that was running keeps running.
//!
//! Clients are only ever ended with `terminate_client` (never a signal): the server cleans up
//! the client's context and the process sees an MPS error instead of dying mid-write.

use gpuhook_node::bounded::preview;
use std::collections::BTreeMap;

/// Why a client is ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    OverCap,
    ContainerGone,
    ProcessGone,
}

impl Reason {
    pub const ALL: [Reason; 3] = [Reason::OverCap, Reason::ContainerGone, Reason::ProcessGone];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::OverCap => "over_cap",
            Reason::ContainerGone => "container_gone",
            Reason::ProcessGone => "process_gone",
        }
    }
}

/// One client as the watcher sees it in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientView {
    pub server: u32,
    pub pid: u32,
    /// Order of first sight (higher: newer).
    pub seq: u64,
    /// Container id; `None` for host processes (never capped).
    pub container: Option<String>,
    pub container_gone: bool,
    pub process_gone: bool,
}

/// A client to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    pub server: u32,
    pub pid: u32,
    pub container: Option<String>,
    pub reason: Reason,
}

/// The clients to end, gone ones first, then the newest of each container over `cap`.
pub fn decide(clients: &[ClientView], cap: Option<u32>) -> Vec<Termination> {
    let end = |c: &ClientView, reason| Termination {
        server: c.server,
        pid: c.pid,
        container: c.container.clone(),
        reason,
    };
    let mut out = Vec::new();
    let mut by_container: BTreeMap<&str, Vec<&ClientView>> = BTreeMap::new();
    for c in clients {
        if c.container_gone {
            out.push(end(c, Reason::ContainerGone));
        } else if c.process_gone {
            out.push(end(c, Reason::ProcessGone));
        } else if let Some(id) = &c.container {
            by_container.entry(id).or_default().push(c);
        }
    }
    if let Some(cap) = cap {
        for list in by_container.values_mut() {
            if list.len() > cap as usize {
                list.sort_by_key(|c| (std::cmp::Reverse(c.seq), std::cmp::Reverse(c.pid)));
                let excess = list.len() - cap as usize;
                out.extend(list[..excess].iter().map(|c| end(c, Reason::OverCap)));
            }
        }
    }
    out
}

/// A list reply with something other than a pid in it (both cut for the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidListError {
    pub word: String,
    pub reply: String,
}

impl std::fmt::Display for PidListError {
    /// Quoted with escapes, a control character takes up to 10 bytes: the whole message is
    /// capped too, so a hostile reply never makes a long log line (found by fuzzing).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let message = format!("unexpected pid {:?} in reply {:?}", self.word, self.reply);
        f.write_str(&gpuhook_node::bounded::cap_message(&message))
    }
}

impl std::error::Error for PidListError {}

/// Parses a list reply (`get_server_list`, `get_client_list`): one pid per line.
pub fn parse_pids(reply: &str) -> Result<Vec<u32>, PidListError> {
    reply
        .split_whitespace()
        .map(|w| {
            w.parse::<u32>().map_err(|_| PidListError {
                word: preview(w),
                reply: preview(reply),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_of_control_characters_gives_a_bounded_message() {
        let reply = format!("1s{}", "\u{7}".repeat(4000));
        let e = parse_pids(&reply).unwrap_err().to_string();
        assert!(
            e.len() <= gpuhook_node::bounded::MAX_MESSAGE_BYTES + 64,
            "{} bytes",
            e.len()
        );
        assert!(e.starts_with("unexpected pid \"1s"), "{e}");
    }

    #[test]
    fn a_bad_pid_list_is_refused_with_a_clipped_reply() {
        let reply = format!("12 {} 13", "x".repeat(5000));
        let e = parse_pids(&reply).unwrap_err().to_string();
        let max = gpuhook_node::bounded::MAX_PREVIEW_CHARS;
        assert!(e.chars().count() < 2 * max + 200, "{}", e.len());
        assert!(e.starts_with("unexpected pid \"xxx"), "{e}");
        assert_eq!(parse_pids(" 12\n13 ").unwrap(), vec![12, 13]);
    }

    fn c(pid: u32, seq: u64, ctr: Option<&str>) -> ClientView {
        ClientView {
            server: 7,
            pid,
            seq,
            container: ctr.map(str::to_string),
            container_gone: false,
            process_gone: false,
        }
    }

    #[test]
    fn newest_over_cap_are_ended_per_container() {
        let list = vec![
            c(100, 1, Some("a")),
            c(90, 2, Some("a")),
            c(95, 2, Some("a")),
            c(101, 3, Some("b")),
            c(5, 9, None),
            c(6, 10, None),
        ];
        let t = decide(&list, Some(1));
        let ended: Vec<(u32, Reason)> = t.iter().map(|t| (t.pid, t.reason)).collect();
        // Container a keeps its oldest (seq 1); of the two seen together the higher pid goes first.
        assert_eq!(ended, vec![(95, Reason::OverCap), (90, Reason::OverCap)]);
        assert_eq!(t[0].container.as_deref(), Some("a"));
        assert!(decide(&list, Some(3)).is_empty());
        assert!(decide(&list, None).is_empty());
    }

    #[test]
    fn gone_clients_are_ended_and_not_counted() {
        let mut list = vec![c(1, 1, Some("a")), c(2, 2, Some("a")), c(3, 3, Some("a"))];
        list[0].container_gone = true;
        list[1].process_gone = true;
        let t = decide(&list, Some(1));
        let ended: Vec<(u32, Reason)> = t.iter().map(|t| (t.pid, t.reason)).collect();
        assert_eq!(
            ended,
            vec![(1, Reason::ContainerGone), (2, Reason::ProcessGone)]
        );
    }

    #[test]
    fn pid_lists() {
        assert_eq!(parse_pids("12\n34\n").unwrap(), vec![12, 34]);
        assert_eq!(parse_pids("").unwrap(), Vec::<u32>::new());
        assert!(parse_pids("Server 3 not found").is_err());
    }
}
