//! Kubernetes resource quantities (`10Gi`, `512M`, `1.5Gi`, `1e9`), as bytes.
//!
//! The suffixes are those of `k8s.io/apimachinery/pkg/api/resource` (binary `Ki`…`Ei`, decimal
//! `k`, `M`, `G`, `T`, `P`, `E`, and an `e`/`E` exponent). Negative or fractional-byte results
//! are refused: every quantity read here is a memory size.

/// Why a quantity is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {value:?}: {why} (e.g. 512Mi, 10Gi, 4G)")]
pub struct QuantityError {
    pub value: String,
    pub why: &'static str,
}

fn suffix_factor(s: &str) -> Option<u128> {
    Some(match s {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        _ => return None,
    })
}

/// Parses `value` into bytes.
pub fn parse_bytes(value: &str) -> Result<u64, QuantityError> {
    let err = |why| QuantityError {
        value: value.to_string(),
        why,
    };
    let v = value.trim();
    if v.is_empty() || v.len() > 64 {
        return Err(err("empty or too long"));
    }
    let num_end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(v.len());
    let (num, suffix) = v.split_at(num_end);
    let num = num.strip_prefix('+').unwrap_or(num);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(err("no number"));
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) || frac.len() > 9 {
        return Err(err("not a decimal number"));
    }
    let (factor, exp) = match suffix_factor(suffix) {
        Some(f) => (f, 0u32),
        None => {
            let e = suffix
                .strip_prefix(['e', 'E'])
                .and_then(|e| e.parse::<u32>().ok())
                .filter(|e| *e <= 18)
                .ok_or_else(|| err("unknown suffix"))?;
            (1, e)
        }
    };
    let mantissa: u128 = format!("{int}{frac}")
        .parse()
        .map_err(|_| err("too large"))?;
    let scale = 10u128.pow(u32::try_from(frac.len()).map_err(|_| err("too long"))?);
    let total = mantissa
        .checked_mul(factor)
        .and_then(|m| m.checked_mul(10u128.pow(exp)))
        .ok_or_else(|| err("too large"))?;
    if total % scale != 0 {
        return Err(err("not a whole number of bytes"));
    }
    u64::try_from(total / scale).map_err(|_| err("too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from apimachinery's quantity docs.
    #[test]
    fn suffixes_and_forms() {
        assert_eq!(parse_bytes("10Gi"), Ok(10 << 30));
        assert_eq!(parse_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_bytes("4G"), Ok(4_000_000_000));
        assert_eq!(parse_bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_bytes("1e9"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("128974848"), Ok(128_974_848));
        assert!(parse_bytes("-1Gi").is_err());
        assert!(parse_bytes("10GB").is_err());
        assert!(parse_bytes("0.5").is_err());
        assert!(parse_bytes("").is_err());
    }
}
