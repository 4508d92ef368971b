//! A strict reader of the Prometheus text format, so tests can parse `/metrics` back and check
//! every line instead of grepping for a few strings.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// What is wrong with an exposition, quoting the line (or the labels) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsParseError {
    #[error("bad or repeated HELP: {0:?}")]
    Help(String),
    #[error("bad TYPE {0:?}")]
    Type(String),
    #[error("bad TYPE kind {0:?}")]
    TypeKind(String),
    #[error("not a sample: {0:?}")]
    NotASample(String),
    #[error("no closing }} in {0:?}")]
    NoClosingBrace(String),
    #[error("bad metric name in {0:?}")]
    Name(String),
    #[error("sample of {family} without HELP and TYPE: {line:?}")]
    NoHelpOrType { family: String, line: String },
    #[error("bad value in {0:?}")]
    Value(String),
    #[error("label without =\"...\": {0:?}")]
    LabelWithoutValue(String),
    #[error("bad label name {0:?}")]
    LabelName(String),
    #[error("bad escape {escape:?} in {labels:?}")]
    Escape {
        escape: Option<char>,
        labels: String,
    },
    #[error("unterminated label value in {0:?}")]
    Unterminated(String),
    #[error("label {0} repeated")]
    LabelRepeated(String),
    #[error("expected , between labels in {0:?}")]
    LabelSeparator(String),
}

fn valid_name(n: &str) -> bool {
    let mut b = n.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, MetricsParseError> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (k, after) = rest
            .split_once("=\"")
            .ok_or_else(|| MetricsParseError::LabelWithoutValue(rest.to_string()))?;
        if !valid_name(k) {
            return Err(MetricsParseError::LabelName(k.to_string()));
        }
        let mut val = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => val.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => val.push(c),
                    other => {
                        return Err(MetricsParseError::Escape {
                            escape: other.map(|(_, c)| c),
                            labels: s.to_string(),
                        })
                    }
                },
                Some((i, '"')) => break i,
                Some((_, c)) => val.push(c),
                None => return Err(MetricsParseError::Unterminated(s.to_string())),
            }
        };
        if out.insert(k.to_string(), val).is_some() {
            return Err(MetricsParseError::LabelRepeated(k.to_string()));
        }
        rest = &after[end + 1..];
        rest = match rest.strip_prefix(',') {
            Some(r) => r,
            None if rest.is_empty() => rest,
            None => return Err(MetricsParseError::LabelSeparator(s.to_string())),
        };
    }
    Ok(out)
}

/// Parses an exposition; fails on any line that is not `# HELP`, `# TYPE` or
/// `name{labels} value`, on a sample of a family without HELP and TYPE, and on a bad value.
pub fn parse_text(text: &str) -> Result<Vec<Sample>, MetricsParseError> {
    let mut help: BTreeMap<String, ()> = BTreeMap::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            if !valid_name(name) || help.insert(name.into(), ()).is_some() {
                return Err(MetricsParseError::Help(line.to_string()));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| MetricsParseError::Type(line.to_string()))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(MetricsParseError::TypeKind(line.to_string()));
            }
            types.insert(name.into(), kind.into());
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| MetricsParseError::NotASample(line.to_string()))?;
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (
                n,
                parse_labels(
                    l.strip_suffix('}')
                        .ok_or_else(|| MetricsParseError::NoClosingBrace(line.to_string()))?,
                )?,
            ),
            None => (series, BTreeMap::new()),
        };
        if !valid_name(name) {
            return Err(MetricsParseError::Name(line.to_string()));
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        if !help.contains_key(family) || !types.contains_key(family) {
            return Err(MetricsParseError::NoHelpOrType {
                family: family.to_string(),
                line: line.to_string(),
            });
        }
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .map_err(|_| MetricsParseError::Value(line.to_string()))?,
        };
        out.push(Sample {
            name: name.into(),
            labels,
            value,
        });
    }
    Ok(out)
}
