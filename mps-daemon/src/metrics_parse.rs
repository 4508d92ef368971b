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

fn valid_name(n: &str) -> bool {
    let mut b = n.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (k, after) = rest
            .split_once("=\"")
            .ok_or_else(|| format!("label without =\"...\": {rest:?}"))?;
        if !valid_name(k) {
            return Err(format!("bad label name {k:?}"));
        }
        let mut val = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => val.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => val.push(c),
                    other => return Err(format!("bad escape {other:?} in {s:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => val.push(c),
                None => return Err(format!("unterminated label value in {s:?}")),
            }
        };
        if out.insert(k.to_string(), val).is_some() {
            return Err(format!("label {k} repeated"));
        }
        rest = &after[end + 1..];
        rest = match rest.strip_prefix(',') {
            Some(r) => r,
            None if rest.is_empty() => rest,
            None => return Err(format!("expected , between labels in {s:?}")),
        };
    }
    Ok(out)
}

/// Parses an exposition; fails on any line that is not `# HELP`, `# TYPE` or
/// `name{labels} value`, on a sample of a family without HELP and TYPE, and on a bad value.
pub fn parse_text(text: &str) -> Result<Vec<Sample>, String> {
    let mut help: BTreeMap<String, ()> = BTreeMap::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            if !valid_name(name) || help.insert(name.into(), ()).is_some() {
                return Err(format!("bad or repeated HELP: {line:?}"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or(format!("bad TYPE {line:?}"))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(format!("bad TYPE kind {line:?}"));
            }
            types.insert(name.into(), kind.into());
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("not a sample: {line:?}"))?;
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (
                n,
                parse_labels(
                    l.strip_suffix('}')
                        .ok_or(format!("no closing }} in {line:?}"))?,
                )?,
            ),
            None => (series, BTreeMap::new()),
        };
        if !valid_name(name) {
            return Err(format!("bad metric name in {line:?}"));
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        if !help.contains_key(family) || !types.contains_key(family) {
            return Err(format!(
                "sample of {family} without HELP and TYPE: {line:?}"
            ));
        }
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| format!("bad value in {line:?}"))?,
        };
        out.push(Sample {
            name: name.into(),
            labels,
            value,
        });
    }
    Ok(out)
}
