//! The counters CSV of dcgm-exporter (`-f FILE`): one `FIELD, type, help` per line, `#` starts a
//! comment, fields are trimmed (dcgm-exporter `internal/pkg/counters/counter_config.go`). NVIDIA's
//! `default-counters.csv` is built in and used without `-f`.
//!
//! Stricter than dcgm-exporter where it silently guessed: an unknown field, a duplicate, a line
//! without exactly three fields or an unknown type is an error naming the line, and the exporter
//! does not start. Known fields NVML cannot answer (`DCGM_FI_PROF_*`, ...) are collected in
//! [`Counters::refused`] so the caller lists them at start (and as a metric), never dropped
//! silently.

use std::path::{Path, PathBuf};

use crate::fields::{self, Kind, LabelSource, Refusal, Scope, Source};

/// NVIDIA's default counters (dcgm-exporter 4.5.3-4.8.2, `etc/default-counters.csv`).
pub const DEFAULT_COUNTERS: &str = include_str!("../etc/default-counters.csv");
/// The path dcgm-exporter's `-f` defaults to; when it does not exist the built-in copy is used.
pub const DEFAULT_COUNTERS_PATH: &str = "/etc/dcgm-exporter/default-counters.csv";
/// Largest counters file read.
pub const MAX_FILE: u64 = 1 << 20;

/// The Prometheus type of a value field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Gauge,
    Counter,
    Histogram,
    Summary,
}

impl MetricType {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Gauge => "gauge",
            MetricType::Counter => "counter",
            MetricType::Histogram => "histogram",
            MetricType::Summary => "summary",
        }
    }
}

/// A served value field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub name: String,
    pub kind: MetricType,
    pub help: String,
    pub source: Source,
    pub scope: Scope,
    pub line: usize,
}

/// A label field: its value labels every series of the entity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelCounter {
    pub name: String,
    pub source: LabelSource,
    pub line: usize,
}

/// A known field that is not served, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedField {
    pub name: String,
    pub refusal: Refusal,
    pub line: usize,
}

/// A parsed counters file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Where it came from (a path, or `built-in default-counters.csv`).
    pub origin: String,
    pub values: Vec<Counter>,
    pub labels: Vec<LabelCounter>,
    pub refused: Vec<RefusedField>,
}

/// Why a counters file is unusable.
#[derive(Debug, thiserror::Error)]
pub enum CountersError {
    #[error("cannot read the counters file {}: {error} (check -f / DCGM_EXPORTER_COLLECTORS)", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the counters file {} is larger than {MAX_FILE} bytes; it is not a counters CSV", path.display())]
    TooLarge { path: PathBuf },
    #[error("{origin} line {line}: {reason} in `{text}`; fix or comment out (#) that line")]
    Line {
        origin: String,
        line: usize,
        text: String,
        reason: String,
    },
    #[error("{origin} names no field that can be served; add e.g. `DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).`")]
    Empty { origin: String },
}

impl Counters {
    /// Reads `path`, or the built-in default when `path` is dcgm-exporter's default path and
    /// no such file exists.
    pub fn load(path: &Path) -> Result<Counters, CountersError> {
        use std::io::Read;
        let read_err = |error| CountersError::Read {
            path: path.to_path_buf(),
            error,
        };
        let file = match std::fs::File::open(path) {
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && path == Path::new(DEFAULT_COUNTERS_PATH) =>
            {
                return Counters::parse(DEFAULT_COUNTERS, "built-in default-counters.csv");
            }
            other => other.map_err(read_err)?,
        };
        let mut text = String::new();
        file.take(MAX_FILE + 1)
            .read_to_string(&mut text)
            .map_err(read_err)?;
        if text.len() as u64 > MAX_FILE {
            return Err(CountersError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        Counters::parse(&text, &path.display().to_string())
    }

    /// Parses CSV text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Counters, CountersError> {
        let mut c = Counters {
            origin: origin.to_string(),
            ..Counters::default()
        };
        let mut seen: Vec<(String, usize)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let fail = |reason: String| CountersError::Line {
                origin: origin.to_string(),
                line,
                text: trimmed.chars().take(200).collect(),
                reason,
            };
            let parts: Vec<&str> = trimmed.split(',').map(str::trim).collect();
            let [name, kind, help] = parts[..] else {
                return Err(fail(format!(
                    "malformed record: {} comma-separated fields, expected 3 (FIELD, type, help)",
                    parts.len()
                )));
            };
            if let Some((_, first)) = seen.iter().find(|(n, _)| n == name) {
                return Err(fail(format!(
                    "duplicate field {name} (first on line {first})"
                )));
            }
            seen.push((name.to_string(), line));
            c.add(name, kind, help, line).map_err(fail)?;
        }
        if c.values.is_empty() && c.labels.is_empty() {
            return Err(CountersError::Empty {
                origin: origin.to_string(),
            });
        }
        Ok(c)
    }

    fn add(&mut self, name: &str, kind: &str, help: &str, line: usize) -> Result<(), String> {
        let ty = match kind {
            "gauge" => Some(MetricType::Gauge),
            "counter" => Some(MetricType::Counter),
            "histogram" => Some(MetricType::Histogram),
            "summary" => Some(MetricType::Summary),
            "label" => None,
            other => {
                return Err(format!(
                    "unknown type `{other}` (one of gauge, counter, histogram, summary, label)"
                ))
            }
        };
        let Some(known) = fields::lookup(name) else {
            return Err(format!(
                "unknown field `{name}`: not a DCGM field this exporter knows (see the list in \
                 exporter/README.md)"
            ));
        };
        match (known, ty) {
            (Kind::Refused(refusal), _) => self.refused.push(RefusedField {
                name: name.to_string(),
                refusal,
                line,
            }),
            (Kind::Value(source, scope), Some(kind)) => self.values.push(Counter {
                name: name.to_string(),
                kind,
                help: help.to_string(),
                source,
                scope,
                line,
            }),
            (Kind::Label(source), None) => self.labels.push(LabelCounter {
                name: name.to_string(),
                source,
                line,
            }),
            (Kind::Value(..), None) => {
                return Err(format!(
                    "{name} is a numeric field; `label` is for string fields such as DCGM_FI_DRIVER_VERSION"
                ))
            }
            (Kind::Label(_), Some(_)) => {
                return Err(format!("{name} is a string field; its type must be `label`"))
            }
        }
        Ok(())
    }

    /// The refused fields as one sentence for the start-up log, `None` when there are none.
    pub fn refused_message(&self) -> Option<String> {
        if self.refused.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .refused
            .iter()
            .map(|r| format!("{} (line {}: {})", r.name, r.line, r.refusal.reason()))
            .collect();
        Some(format!(
            "{}: not serving {} field(s) NVML cannot answer: {}; remove them from the counters \
             file to silence this",
            self.origin,
            self.refused.len(),
            list.join(", ")
        ))
    }
}

#[cfg(test)]
#[path = "counters_tests.rs"]
mod tests;
