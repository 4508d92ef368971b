//! `resources[].devices`: `all`, a count, or a list of GPU indexes / UUIDs
//! (`api/config/v1/replicas.go:ReplicatedDevices`). [`crate::kdp::check`] has already refused
//! what NVIDIA refuses; these types keep what is left.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// `devices`: `all`, a count, or a list of indexes / UUIDs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Devices {
    #[default]
    All,
    Count(i64),
    List(Vec<DeviceId>),
}

/// One entry of a device list: a GPU index, or anything else NVIDIA accepts as a string
/// (`GPU-<uuid>`, `MIG-<uuid>`, a MIG index `i:j`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceId {
    Index(u32),
    Uuid(String),
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Index(i) => write!(f, "{i}"),
            DeviceId::Uuid(u) => f.write_str(u),
        }
    }
}

impl Serialize for Devices {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Devices::All => s.serialize_str("all"),
            Devices::Count(n) => s.serialize_i64(*n),
            Devices::List(ids) => s.collect_seq(ids.iter().map(ToString::to_string)),
        }
    }
}

impl<'de> Deserialize<'de> for Devices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Devices;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`all`, a number of GPUs, or a list of GPU indexes / UUIDs")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Devices, E> {
                if v == "all" {
                    Ok(Devices::All)
                } else {
                    Err(E::custom(format!(
                        "expected `all`, a number of GPUs, or a list of GPU indexes / UUIDs, got {v:?}"
                    )))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Devices, E> {
                Ok(Devices::Count(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Devices, E> {
                Ok(Devices::Count(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Devices, E> {
                // YAML -> JSON makes 2.0 the count 2 for NVIDIA's plugin; 2.5 is no count.
                if v.fract() == 0.0 && (1.0..=1e6).contains(&v) {
                    format!("{v:.0}")
                        .parse()
                        .map(Devices::Count)
                        .map_err(E::custom)
                } else {
                    Err(E::custom(format!(
                        "a count of devices must be a whole number > 0, got {v}"
                    )))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Devices, A::Error> {
                let mut out = Vec::new();
                while let Some(id) = seq.next_element::<DeviceId>()? {
                    out.push(id);
                }
                Ok(Devices::List(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for DeviceId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DeviceId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a GPU index or a GPU UUID")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DeviceId, E> {
                u32::try_from(v)
                    .map(DeviceId::Index)
                    .map_err(|_| E::custom(format!("GPU index {v} is out of range")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DeviceId, E> {
                u32::try_from(v)
                    .map(DeviceId::Index)
                    .map_err(|_| E::custom(format!("GPU index {v} is out of range")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DeviceId, E> {
                match v.parse::<u32>() {
                    Ok(i) => Ok(DeviceId::Index(i)),
                    Err(_) if !v.trim().is_empty() => Ok(DeviceId::Uuid(v.trim().to_string())),
                    Err(_) => Err(E::custom("empty device id")),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `ReplicaDeviceRef`: GPU index, MIG index `i:j`, GPU or MIG UUID.
pub fn is_device_ref(s: &str) -> bool {
    let uint = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    let gpu_uuid = |x: &str| x.strip_prefix("GPU-").is_some_and(is_uuid);
    let mig_uuid = |x: &str| {
        x.strip_prefix("MIG-").is_some_and(|rest| {
            is_uuid(rest)
                || matches!(rest.splitn(3, '/').collect::<Vec<_>>().as_slice(),
                    [g, gi, ci] if gpu_uuid(g) && uint(gi) && uint(ci))
        })
    };
    uint(s)
        || matches!(s.split_once(':'), Some((a, b)) if uint(a) && uint(b))
        || gpu_uuid(s)
        || mig_uuid(s)
}

/// The forms github.com/google/uuid `Parse` accepts.
fn is_uuid(s: &str) -> bool {
    let hex = |x: &str| x.bytes().all(|b| b.is_ascii_hexdigit());
    let dashed = |x: &str| {
        x.len() == 36
            && x.char_indices().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => c == '-',
                _ => c.is_ascii_hexdigit(),
            })
    };
    match s.len() {
        32 => hex(s),
        36 => dashed(s),
        38 => s.starts_with('{') && s.ends_with('}') && dashed(&s[1..37]),
        45 => {
            s.get(..9)
                .is_some_and(|p| p.eq_ignore_ascii_case("urn:uuid:"))
                && dashed(&s[9..])
        }
        _ => false,
    }
}
