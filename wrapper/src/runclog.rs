//! Writing an error into runc's `--log` file.
//!
//! When `runc create` fails, containerd's shim reads the last `"level":"error"` entry of the log
//! file it passed with `--log FILE --log-format json` and shows that message to the user
//! (`kubectl describe pod`, `ctr run`). The wrapper's own failures must land there too, in the
//! same format as runc's logrus output, or the user sees only "exit status 1".

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::time::SystemTime;

use gpuhook_containerd::timestamp::rfc3339;

use serde_json::json;

/// One log line in runc's format: logrus JSON or logrus text.
pub fn format_line(json_format: bool, level: &str, msg: &str, time: SystemTime) -> String {
    let time = rfc3339(time);
    if json_format {
        format!("{}\n", json!({"level": level, "msg": msg, "time": time}))
    } else {
        // logrus text: key=value, values with spaces or quotes quoted Go-style.
        let quoted = serde_json::to_string(msg).unwrap_or_default();
        format!("time=\"{time}\" level={level} msg={quoted}\n")
    }
}

/// Appends an error line to the log file (created if missing, mode 0644).
pub fn append_error(path: &Path, json_format: bool, msg: &str) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)?;
    f.write_all(format_line(json_format, "error", msg, SystemTime::now()).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn json_and_text_lines() {
        let t = UNIX_EPOCH;
        let line = format_line(true, "error", "unresolvable CDI devices \"a\"", t);
        let v: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(v["level"], "error");
        assert_eq!(v["msg"], "unresolvable CDI devices \"a\"");
        assert_eq!(v["time"], "1970-01-01T00:00:00Z");
        assert_eq!(
            format_line(false, "error", "bad \"x\"", t),
            "time=\"1970-01-01T00:00:00Z\" level=error msg=\"bad \\\"x\\\"\"\n"
        );
    }

    #[test]
    fn appends() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.json");
        std::fs::write(&p, "{\"level\":\"info\",\"msg\":\"before\"}\n").unwrap();
        append_error(&p, true, "boom").unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].contains("\"msg\":\"boom\""));
    }
}
