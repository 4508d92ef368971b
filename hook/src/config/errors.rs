//! Config errors that point at the file, line and key.

use gpuhook_node::bounded::{cap_message, preview};
use std::path::{Path, PathBuf};

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {} does not exist: create it (see config.toml.example) or name an existing file with --config / GPUHOOK_CONFIG", path.display())]
    Missing { path: PathBuf },
    /// Unreadable, not UTF-8, or larger than the limit.
    #[error("config file: {0}")]
    Read(gpuhook_node::bounded::BoundedReadError),
    /// Syntax, unknown key, or a value of the wrong type.
    #[error("{}:{line}:{column}: {}{message}", path.display(), key_prefix(key))]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        key: Option<String>,
        message: String,
    },
    /// A well-typed value that is not acceptable.
    #[error("{}:{}: key `{key}`: {message}", path.display(), line.map_or("?".to_string(), |l| l.to_string()))]
    Invalid {
        path: PathBuf,
        line: Option<usize>,
        key: String,
        message: String,
    },
}

fn key_prefix(key: &Option<String>) -> String {
    key.as_ref()
        .map_or(String::new(), |k| format!("key `{k}`: "))
}

/// 1-based line and column of byte `offset`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}

/// The `[table]` header in force at line `line` (1-based), if any.
fn table_at(text: &str, line: usize) -> Option<String> {
    text.lines()
        .take(line)
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix('[')
                .and_then(|r| r.split(']').next())
                .map(|t| t.trim().trim_matches('[').to_string())
        })
        .last()
}

/// The dotted key defined on line `line`, e.g. `runtime.mode`.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let l = text.lines().nth(line.checked_sub(1)?)?;
    let (key, _) = l.split_once('=')?;
    let key = key.trim().trim_matches('"');
    if key.is_empty() || key.starts_with('#') || key.starts_with('[') {
        return None;
    }
    Some(match table_at(text, line) {
        Some(t) => format!("{t}.{key}"),
        None => key.to_string(),
    })
}

pub(super) fn parse_error(e: &toml::de::Error, text: &str, path: &Path) -> ConfigError {
    let (line, column) = e.span().map_or((1, 1), |s| line_col(text, s.start));
    ConfigError::Parse {
        path: path.to_path_buf(),
        line,
        column,
        key: key_on_line(text, line).map(|k| preview(&k)),
        message: cap_message(e.message().trim()),
    }
}

pub(super) fn invalid(text: &str, path: &Path, key: &str, message: String) -> ConfigError {
    let (table, leaf) = match key.rsplit_once('.') {
        Some((t, l)) => (Some(t), l),
        None => (None, key),
    };
    // One pass over the lines (a config may be long); `table_at` only for a matching key.
    let line = text.lines().enumerate().find_map(|(i, l)| {
        let n = i + 1;
        let same_key = l
            .split_once('=')
            .is_some_and(|(k, _)| k.trim().trim_matches('"') == leaf);
        (same_key && table_at(text, n).as_deref() == table).then_some(n)
    });
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        key: preview(key),
        message: cap_message(&message),
    }
}

/// The key a serde message names (`unknown field `x``, `invalid type ... for key `x``), if any.
pub(super) fn key_in_message(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_string())
}
