//! File access that a hostile directory cannot steer, and bounded echoes of untrusted text.
//!
//! Anything an MPS tenant can write (the pipe directory, the shared `/dev/shm`) may hold a
//! symlink to a host file, a FIFO that blocks an `open` or `read` forever, or a huge file. So a
//! file we read is opened with `O_NOFOLLOW | O_NONBLOCK`, checked to be a regular file with
//! `fstat`, and read up to a bound; a file we write is created with `O_NOFOLLOW`; the control
//! socket is checked by who listens on it (`SO_PEERCRED`), never by its name alone. Text from
//! outside (replies, file contents) is clipped before it reaches a log line or an error.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

/// Most characters of untrusted text echoed in a log line or error (node's preview bound).
pub const ECHO_MAX: usize = gpuhook_node::bounded::MAX_PREVIEW_CHARS;

/// [`gpuhook_node::bounded::preview`] under its old name, only for `kdp.rs` until the sharing
/// crate takes that file over (and calls `preview` itself); `_max` is not used: node's bound
/// ([`ECHO_MAX`]) applies. New code calls `preview`.
pub fn clip(s: &str, _max: usize) -> String {
    gpuhook_node::bounded::preview(s)
}

/// Reads at most `max` bytes of the regular file `path` (no symlink, no FIFO, no device).
/// A larger file is an error naming the bound.
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    read_regular(path, max, false)
}

/// [`read_bounded`], following symlinks when `follow` (for admin-owned paths such as a
/// ConfigMap mount, whose files are symlinks); never blocks on a FIFO either way.
pub fn read_regular(path: &Path, max: u64, follow: bool) -> io::Result<Vec<u8>> {
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(nofollow | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    let mut out = Vec::new();
    f.take(max + 1).read_to_end(&mut out)?;
    if u64::try_from(out.len()).unwrap_or(u64::MAX) > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", path.display()),
        ));
    }
    Ok(out)
}

/// Creates (truncates) `path` for writing, mode 0600, never through a symlink.
pub fn create_private(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Who listens on the unix socket `path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// A socket whose listener has this pid.
    Pid(i32),
    /// Nothing usable there: missing, not a socket, or nobody listening.
    Absent,
}

/// Connects to `path` (bounded by `timeout`) and reads the listener's pid with `SO_PEERCRED`.
/// Errors are failures of our own side (fd exhaustion, memory): they say nothing about the
/// listener.
pub async fn socket_listener(path: &Path, timeout: Duration) -> io::Result<Listener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {}
        Ok(_) => return Ok(Listener::Absent),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Listener::Absent),
        Err(e) => return Err(e),
    }
    let conn = match tokio::time::timeout(timeout, tokio::net::UnixStream::connect(path)).await {
        Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
        Ok(r) => r,
    };
    match conn {
        Ok(s) => Ok(s.peer_cred()?.pid().map_or(Listener::Absent, Listener::Pid)),
        Err(e) => match e.raw_os_error() {
            Some(libc::ECONNREFUSED | libc::ENOENT | libc::ENOTSOCK) => Ok(Listener::Absent),
            _ => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_regular_files_only_and_bounded() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, "12345").unwrap();
        assert_eq!(read_bounded(&f, 5).unwrap(), b"12345");
        assert!(read_bounded(&f, 4)
            .unwrap_err()
            .to_string()
            .contains("larger"));
        let link = t.path().join("l");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(read_bounded(&link, 100).is_err(), "symlink followed");
        let fifo = t.path().join("p");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Returns at once (O_NONBLOCK) and refuses the FIFO.
        assert!(read_bounded(&fifo, 100)
            .unwrap_err()
            .to_string()
            .contains("not a regular file"));
        assert!(create_private(&link).is_err(), "wrote through a symlink");
    }

    #[tokio::test]
    async fn listener_pid_is_read_from_the_socket() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("control");
        assert_eq!(
            socket_listener(&p, Duration::from_secs(1)).await.unwrap(),
            Listener::Absent
        );
        let _l = std::os::unix::net::UnixListener::bind(&p).unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        assert_eq!(
            socket_listener(&p, Duration::from_secs(1)).await.unwrap(),
            Listener::Pid(me)
        );
        drop(_l);
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, "").unwrap();
        assert_eq!(
            socket_listener(&p, Duration::from_secs(1)).await.unwrap(),
            Listener::Absent
        );
    }
}
