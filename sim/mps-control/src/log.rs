//! `control.log` / `server.log` writers in NVIDIA's line format:
//! `[2026-11-22 05:00:01.123 Control  1234] message` (local time, milliseconds, the pid
//! right-aligned in five columns). Tools such as the device plugin tail these files, so
//! the simulator keeps the exact shape.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// An append-only log file shared by the daemon's threads.
#[derive(Debug)]
pub struct LogFile {
    file: Mutex<Option<File>>,
    role: &'static str,
    /// Foreground mode (`-f`) also prints every line on stdout, like the real binary.
    echo: bool,
}

impl LogFile {
    /// Opens (creating) the log for appending; a log that cannot be opened is skipped,
    /// like the real daemon which keeps serving without its log.
    pub fn open(path: &Path, role: &'static str, echo: bool) -> Self {
        let file = OpenOptions::new().create(true).append(true).open(path).ok();
        LogFile {
            file: Mutex::new(file),
            role,
            echo,
        }
    }

    /// Writes one line attributed to `pid`.
    pub fn line(&self, pid: u32, msg: &str) {
        let line = format_line(&timestamp(), self.role, pid, msg);
        if let Ok(mut guard) = self.file.lock() {
            if let Some(f) = guard.as_mut() {
                let _ = f.write_all(line.as_bytes());
            }
            if self.echo {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(line.as_bytes());
                let _ = out.flush();
            }
        }
    }
}

/// Formats one log line (without reading the clock, for tests).
pub fn format_line(ts: &str, role: &str, pid: u32, msg: &str) -> String {
    format!("[{ts} {role} {pid:>5}] {msg}\n")
}

/// Local time as `YYYY-MM-DD HH:MM:SS.mmm`.
pub fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = libc::time_t::try_from(now.as_secs()).unwrap_or(libc::time_t::MAX);
    // SAFETY: `tm` is plain old data; an all-zero value is a valid initial state.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call; localtime_r is
    // the re-entrant variant and writes only into `tm`.
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return format!("{secs}.{:03}", now.subsec_millis());
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        now.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shape_matches_nvidia() {
        assert_eq!(
            format_line("2026-11-22 05:00:01.123", "Control", 1234, "NEW UI"),
            "[2026-11-22 05:00:01.123 Control  1234] NEW UI\n"
        );
        assert_eq!(
            format_line("2026-11-22 05:00:01.123", "Control", 11107, "x"),
            "[2026-11-22 05:00:01.123 Control 11107] x\n"
        );
        let ts = timestamp();
        assert_eq!(ts.len(), 23, "{ts}");
        assert_eq!(&ts[10..11], " ");
    }
}
