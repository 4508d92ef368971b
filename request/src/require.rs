//! `NVIDIA_REQUIRE_*` constraint expressions (the libnvidia-container DSL).
//!
//! `cuda>=12.0 brand=tesla,driver>=535`: whitespace-separated *terms* are OR-ed, comma-separated
//! *factors* inside a term are AND-ed, and a factor is `<name><op><value>`. Names are `cuda`,
//! `driver`, `arch` (dotted numbers: `12.10 > 12.9`, `535 < 535.1`) and `brand` (a string, `=`/`!=`
//! only). Parsing is strict so that a typo in an image fails loudly instead of silently passing.

use std::cmp::Ordering;
use std::fmt;

use super::error::{preview, RequestError, SyntaxError};

/// What a factor compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Property {
    /// The driver's CUDA version (node-wide).
    Cuda,
    /// The driver version (node-wide).
    Driver,
    /// The GPU's compute capability `major.minor`.
    Arch,
    /// The GPU's NVML brand (`tesla`, `geforce`, ...).
    Brand,
}

impl Property {
    pub fn as_str(self) -> &'static str {
        match self {
            Property::Cuda => "cuda",
            Property::Driver => "driver",
            Property::Arch => "arch",
            Property::Brand => "brand",
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    /// Longest match first, so `>=` is not read as `>` followed by `=`.
    const TABLE: [(&'static str, Op); 6] = [
        (">=", Op::Ge),
        ("<=", Op::Le),
        ("!=", Op::Ne),
        ("=", Op::Eq),
        ("<", Op::Lt),
        (">", Op::Gt),
    ];

    pub fn as_str(self) -> &'static str {
        Op::TABLE
            .iter()
            .find(|(_, op)| *op == self)
            .map_or("?", |(s, _)| s)
    }

    /// Whether `ordering` (actual compared to wanted) satisfies the operator.
    pub fn holds(self, ordering: Ordering) -> bool {
        match self {
            Op::Eq => ordering == Ordering::Equal,
            Op::Ne => ordering != Ordering::Equal,
            Op::Lt => ordering == Ordering::Less,
            Op::Le => ordering != Ordering::Greater,
            Op::Gt => ordering == Ordering::Greater,
            Op::Ge => ordering != Ordering::Less,
        }
    }
}

/// The right-hand side of a factor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Dotted number, components as written (`12.4` → `[12, 4]`).
    Version(Vec<u64>),
    /// Brand name, lower-cased.
    Brand(String),
}

/// `name op value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Factor {
    pub property: Property,
    pub op: Op,
    pub value: Value,
    /// The factor as written, for messages.
    pub text: String,
}

impl fmt::Display for Factor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// AND of factors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub factors: Vec<Factor>,
}

/// One requirement variable: OR of terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    /// `NVIDIA_REQUIRE_CUDA`, or `CUDA_VERSION` for a legacy image's implicit `cuda>=X.Y`.
    pub variable: String,
    /// The value as written.
    pub expression: String,
    pub terms: Vec<Term>,
}

/// All requirements of a container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    /// `NVIDIA_DISABLE_REQUIRE` was true: nothing is parsed or checked.
    pub disabled: bool,
    pub constraints: Vec<Constraint>,
}

/// Whether `NVIDIA_DISABLE_REQUIRE`'s value means true (`1`, `t`, `true`, `y`, `yes`, `on`).
pub fn is_truthy(value: &str) -> bool {
    ["1", "t", "true", "y", "yes", "on"]
        .iter()
        .any(|t| value.trim().eq_ignore_ascii_case(t))
}

/// Compares dotted numbers numerically, missing components being 0 (`535` == `535.0` < `535.1`).
pub fn compare_versions(a: &[u64], b: &[u64]) -> Ordering {
    let len = a.len().max(b.len());
    (0..len)
        .map(|i| {
            a.get(i)
                .copied()
                .unwrap_or(0)
                .cmp(&b.get(i).copied().unwrap_or(0))
        })
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Parses a dotted number (`12`, `12.4`, `570.158.01`).
pub fn parse_version(s: &str) -> Option<Vec<u64>> {
    s.split('.')
        .map(|p| {
            if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                p.parse().ok()
            } else {
                None
            }
        })
        .collect()
}

/// Parses one expression of variable `variable`.
pub fn parse_expression(variable: &str, expression: &str) -> Result<Constraint, RequestError> {
    let syntax = |token: &str, reason: SyntaxError| RequestError::RequirementSyntax {
        variable: variable.to_string(),
        token: preview(token),
        reason,
    };
    let mut terms = Vec::new();
    for term in expression.split_ascii_whitespace() {
        let mut factors = Vec::new();
        for text in term.split(',') {
            if text.is_empty() {
                return Err(syntax(term, SyntaxError::EmptyCondition));
            }
            factors.push(parse_factor(text).map_err(|reason| syntax(text, reason))?);
        }
        terms.push(Term { factors });
    }
    Ok(Constraint {
        variable: variable.to_string(),
        expression: expression.to_string(),
        terms,
    })
}

fn parse_factor(text: &str) -> Result<Factor, SyntaxError> {
    let name_len = text.bytes().take_while(u8::is_ascii_alphabetic).count();
    let (name, rest) = text.split_at(name_len);
    if name.is_empty() {
        return Err(SyntaxError::NoName);
    }
    let property = [
        Property::Cuda,
        Property::Driver,
        Property::Arch,
        Property::Brand,
    ]
    .into_iter()
    .find(|p| p.as_str().eq_ignore_ascii_case(name))
    .ok_or_else(|| SyntaxError::UnknownName { name: name.into() })?;
    let (op, value) = Op::TABLE
        .iter()
        .find_map(|(s, op)| rest.strip_prefix(s).map(|v| (*op, v)))
        .ok_or_else(|| SyntaxError::NoOperator { name: name.into() })?;
    if value.is_empty() {
        return Err(SyntaxError::NoValue {
            name: name.into(),
            op: op.as_str(),
        });
    }
    let value = if property == Property::Brand {
        if !matches!(op, Op::Eq | Op::Ne) {
            return Err(SyntaxError::BrandOperator);
        }
        if !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(SyntaxError::InvalidBrand {
                value: preview(value),
            });
        }
        Value::Brand(value.to_ascii_lowercase())
    } else {
        Value::Version(
            parse_version(value).ok_or_else(|| SyntaxError::InvalidVersion {
                value: preview(value),
            })?,
        )
    };
    Ok(Factor {
        property,
        op,
        value,
        text: text.to_string(),
    })
}

/// The implicit requirement of a legacy image: `cuda>=<major.minor of CUDA_VERSION>`.
pub fn legacy_cuda_constraint(cuda_version: &str) -> Result<Constraint, RequestError> {
    let v = parse_version(cuda_version.trim()).ok_or_else(|| {
        RequestError::invalid_value(
            "CUDA_VERSION",
            format!(
                "{:?} is not a version; expected major.minor[.patch], e.g. 12.4.1",
                preview(cuda_version)
            ),
        )
    })?;
    let (major, minor) = (v[0], v.get(1).copied().unwrap_or(0));
    Ok(Constraint {
        variable: "CUDA_VERSION".into(),
        expression: cuda_version.to_string(),
        terms: vec![Term {
            factors: vec![Factor {
                property: Property::Cuda,
                op: Op::Ge,
                value: Value::Version(vec![major, minor]),
                text: format!("cuda>={major}.{minor}"),
            }],
        }],
    })
}

impl Requirements {
    /// Builds the requirements from the `NVIDIA_REQUIRE_*` variables (sorted by name; the caller
    /// leaves out `NVIDIA_REQUIRE_JETPACK`), the legacy image's `CUDA_VERSION`, and the disable flag.
    pub fn parse(
        require_vars: &[(&str, &str)],
        legacy_cuda_version: Option<&str>,
        disabled: bool,
    ) -> Result<Self, RequestError> {
        if disabled {
            return Ok(Requirements {
                disabled: true,
                constraints: Vec::new(),
            });
        }
        let mut constraints = Vec::new();
        for (variable, value) in require_vars {
            let c = parse_expression(variable, value)?;
            if !c.terms.is_empty() {
                constraints.push(c);
            }
        }
        if let Some(v) = legacy_cuda_version {
            constraints.push(legacy_cuda_constraint(v)?);
        }
        Ok(Requirements {
            disabled: false,
            constraints,
        })
    }
}

#[cfg(test)]
#[path = "require_tests.rs"]
mod tests;
