//! Which users a GPU's MPS servers run as, and which clients wait for another user's server.
//!
//! NVIDIA's control daemon runs one MPS server at a time (outside its multi-user mode): a
//! client whose uid differs from the running server's waits, silently, until every client of
//! that server is done (`nvidia-cuda-mps-control(1)`). The watcher makes that visible:
//! - a server's user is its process's real uid (`<procRoot>/<pid>/status`: the daemon starts
//!   each server as its client's user);
//! - a client is announced in the control daemon's `control.log` (in the GPU's private log
//!   directory, which no container gets) as `NEW CLIENT <pid> from user <uid>` (NVIDIA MPS docs,
//!   "Control Log"); a client announced there, still alive (same start time), attached to no
//!   server, whose uid no running server has, is waiting for another user's clients.
//!
//! The log is read incrementally and bounded (at most [`MAX_READ`] new bytes a pass, at most
//! [`MAX_TRACKED`] announced clients remembered).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// New bytes of `control.log` read per pass.
pub const MAX_READ: u64 = 256 * 1024;
/// Bytes of an unfinished line kept between passes.
const MAX_PARTIAL: usize = 256 * 1024;
/// Announced clients remembered (the oldest are forgotten first).
pub const MAX_TRACKED: usize = 4096;

/// The real uid of `pid` (first field of `Uid:` in `<proc_root>/<pid>/status`).
pub fn process_uid(proc_root: &Path, pid: u32) -> Option<u32> {
    let path = proc_root.join(pid.to_string()).join("status");
    let text = crate::safefs::read_bounded(&path, 64 * 1024).ok()?;
    let text = String::from_utf8_lossy(&text);
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Field 22 of `<proc_root>/<pid>/stat` (start time), `None` for a gone process.
fn start_time(proc_root: &Path, pid: u32) -> Option<u64> {
    let path = proc_root.join(pid.to_string()).join("stat");
    let stat = crate::safefs::read_bounded(&path, 4096).ok()?;
    let stat = String::from_utf8_lossy(&stat);
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// `NEW CLIENT <pid> from user <uid>` in one control.log line.
pub fn parse_new_client(line: &str) -> Option<(u32, u32)> {
    let rest = &line[line.find("NEW CLIENT ")? + "NEW CLIENT ".len()..];
    let mut words = rest.split_whitespace();
    let pid = words.next()?.parse().ok()?;
    if (words.next()?, words.next()?) != ("from", "user") {
        return None;
    }
    let uid = words.next()?.trim_end_matches(':').parse().ok()?;
    Some((pid, uid))
}

/// A client announced in the log: its uid, start time and announcement order.
#[derive(Debug, Clone, Copy)]
struct Announced {
    uid: u32,
    start: Option<u64>,
    seq: u64,
}

/// A client waiting for another user's server to finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub pid: u32,
    pub uid: u32,
}

/// Incremental reader of one GPU's `control.log`.
#[derive(Debug, Default)]
pub struct ClientLog {
    pub path: PathBuf,
    offset: u64,
    partial: String,
    announced: BTreeMap<u32, Announced>,
    seq: u64,
}

impl ClientLog {
    pub fn new(path: PathBuf) -> Self {
        ClientLog {
            path,
            ..Default::default()
        }
    }

    /// Reads what was appended since the last call (from the start again if the file shrank).
    pub fn poll(&mut self, proc_root: &Path) {
        let Ok(mut f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&self.path)
        else {
            return;
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        let Ok(n) = f.take(MAX_READ).read_to_end(&mut buf) else {
            return;
        };
        self.offset += n as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let Some(end) = self.partial.rfind('\n') else {
            // A line longer than a pass's read is no client announcement: drop it.
            if self.partial.len() > MAX_PARTIAL {
                self.partial.clear();
            }
            return;
        };
        let complete: String = self.partial.drain(..=end).collect();
        for (pid, uid) in complete.lines().filter_map(parse_new_client) {
            self.seq += 1;
            let start = start_time(proc_root, pid);
            self.announced.insert(
                pid,
                Announced {
                    uid,
                    start,
                    seq: self.seq,
                },
            );
        }
        while self.announced.len() > MAX_TRACKED {
            let oldest = self
                .announced
                .iter()
                .min_by_key(|(_, a)| a.seq)
                .map(|(p, _)| *p);
            oldest.map(|p| self.announced.remove(&p));
        }
    }

    /// The clients waiting for another user: announced, alive (same process), attached to no
    /// server, of a uid no running server has. Forgets the attached and the gone.
    pub fn waiting(
        &mut self,
        proc_root: &Path,
        attached: &BTreeSet<u32>,
        server_uids: &BTreeSet<u32>,
    ) -> Vec<Waiting> {
        self.announced.retain(|pid, a| {
            !attached.contains(pid) && a.start.is_some() && start_time(proc_root, *pid) == a.start
        });
        self.announced
            .iter()
            .filter(|(_, a)| !server_uids.contains(&a.uid) && !server_uids.is_empty())
            .map(|(&pid, a)| Waiting { pid, uid: a.uid })
            .collect()
    }
}

#[cfg(test)]
#[path = "users_tests.rs"]
mod tests;
