//! Test support: writing a script that a test then executes.
//!
//! A test that writes a script with `std::fs::write` and then runs it races with every other
//! test thread of the process that forks meanwhile: the forked child holds a copy of the write
//! descriptor until it execs, and executing a file that some process holds open for writing
//! fails with `ETXTBSY` ("Text file busy"). CI lost a whole run to it. So the script is written by
//! a short-lived `/bin/sh` child instead: the write descriptor only ever exists in that child,
//! which no other thread forks, and the script is whole and closed once the child has exited.

use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Writes `contents` to `path` (mode 0755, replacing any file there) without this process ever
/// holding a write descriptor on it, so the caller can execute it at once.
pub fn write_executable(path: &Path, contents: &str) -> io::Result<()> {
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg("rm -f \"$1\" && cat > \"$1\" && chmod 0755 \"$1\"")
        .arg("sh")
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()?;
    let written = match child.stdin.take() {
        Some(mut stdin) => stdin.write_all(contents.as_bytes()),
        None => Err(io::Error::other("no stdin pipe to the writing shell")),
    };
    let status = child.wait()?;
    written?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "writing {} through /bin/sh failed: {status}",
            path.display()
        )))
    }
}
