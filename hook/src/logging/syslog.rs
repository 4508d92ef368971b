//! The wrapper's decision lines, also sent to the host's syslog socket (`/dev/log`, which
//! journald serves), so that an operator sees why a container got (or did not get) its GPUs
//! with `journalctl -t gpuhook-runtime`, without setting up a log file: the wrapper's default log
//! is runc's `log.json` in the bundle, which containerd deletes with the container.
//!
//! One datagram per `gpuhook::decision` event, `<14>gpuhook-runtime[pid]: {json}` (facility
//! user, severity from the level), the event's fields as a flat JSON object. Sending never
//! blocks and never fails a container: without a syslog socket nothing is sent.

use std::os::unix::net::UnixDatagram;
use std::path::Path;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The target of decision lines (see [`super::Decision`]).
pub const DECISION_TARGET: &str = "gpuhook::decision";

/// The host's syslog socket.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// A [`Layer`] that sends decision events to a syslog datagram socket.
#[derive(Debug)]
pub struct DecisionSyslog {
    socket: UnixDatagram,
    tag: &'static str,
}

impl DecisionSyslog {
    /// Connected to `path`; `None` when there is no such socket (nothing to send to).
    pub fn connect(path: &Path, tag: &'static str) -> Option<DecisionSyslog> {
        let socket = UnixDatagram::unbound().ok()?;
        socket.connect(path).ok()?;
        socket.set_nonblocking(true).ok()?;
        Some(DecisionSyslog { socket, tag })
    }
}

struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

/// Syslog severity (RFC 5424 6.2.1) of a tracing level; facility user (1).
fn priority(level: &Level) -> u8 {
    let severity = match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    };
    8 + severity
}

impl<S: Subscriber> Layer<S> for DecisionSyslog {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        if meta.target() != DECISION_TARGET {
            return;
        }
        let mut fields = Fields(Map::new());
        fields
            .0
            .insert("level".into(), meta.level().as_str().into());
        event.record(&mut fields);
        let line = format!(
            "<{}>{}[{}]: {}",
            priority(meta.level()),
            self.tag,
            std::process::id(),
            Value::Object(fields.0)
        );
        // A full or missing journal loses the line, never the container.
        let _ = self.socket.send(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;
    use crate::logging::{Decision, Outcome};

    #[test]
    fn decision_lines_reach_the_syslog_socket_as_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let server = UnixDatagram::bind(&path).unwrap();
        server.set_nonblocking(true).unwrap();
        let layer = DecisionSyslog::connect(&path, "gpuhook-runtime").unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("not a decision");
            let mut d = Decision::new("runtime create", Outcome::Inject);
            d.container = Some("c1");
            d.source = Some("envvar");
            d.devices = Some("nvidia.com/gpu=0");
            d.log();
        });
        let mut buf = [0u8; 4096];
        let n = server.recv(&mut buf).unwrap();
        let line = std::str::from_utf8(&buf[..n]).unwrap();
        let prefix = format!("<14>gpuhook-runtime[{}]: ", std::process::id());
        let json = line
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{line}"));
        let v: Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["message"], "decision");
        assert_eq!(v["outcome"], "inject");
        assert_eq!(v["container"], "c1");
        assert_eq!(v["source"], "envvar");
        assert_eq!(v["devices"], "nvidia.com/gpu=0");
        assert!(
            server.recv(&mut buf).is_err(),
            "only decision lines are sent"
        );
    }

    #[test]
    fn no_socket_means_nothing_to_send() {
        let dir = tempfile::tempdir().unwrap();
        assert!(DecisionSyslog::connect(&dir.path().join("none"), "t").is_none());
    }
}
