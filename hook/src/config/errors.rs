//! Config errors that point at the file, line and key.

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
        key: key_on_line(text, line),
        message: e.message().trim().to_string(),
    }
}

pub(super) fn invalid(text: &str, path: &Path, key: &str, message: String) -> ConfigError {
    let (table, leaf) = match key.rsplit_once('.') {
        Some((t, l)) => (Some(t), l),
        None => (None, key),
    };
    let line = (1..=text.lines().count()).find(|&n| {
        text.lines()
            .nth(n - 1)
            .and_then(|l| l.split_once('='))
            .is_some_and(|(k, _)| k.trim().trim_matches('"') == leaf)
            && table_at(text, n).as_deref() == table
    });
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        key: key.to_string(),
        message,
    }
}

/// The key a serde message names (`unknown field `x``, `invalid type ... for key `x``), if any.
pub(super) fn key_in_message(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_string())
}
