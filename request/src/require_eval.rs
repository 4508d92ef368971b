//! Checking [`Requirements`] against a node: once per selected GPU (a MIG device counts as its
//! parent), with `cuda` and `driver` node-wide; with no GPU selected, once with `arch`/`brand`
//! passing. A fact the inventory does not know (no NVML → no CUDA version) cannot be checked: the
//! factor passes and is reported in [`RequirementReport::unchecked`] for the caller to log.

use gpuhook_node::{DeviceRef, Gpu, Inventory};

use super::error::RequestError;
use super::require::{
    compare_versions, parse_version, Constraint, Factor, Property, Requirements, Value,
};

/// What could not be verified.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequirementReport {
    /// `"<VARIABLE>: <factor> (<fact> unknown)"` for each factor that passed for lack of a fact.
    pub unchecked: Vec<String>,
}

/// The facts one evaluation sees.
#[derive(Debug, Clone)]
struct Facts<'a> {
    cuda: Option<Vec<u64>>,
    driver: Option<Vec<u64>>,
    /// `None`: no GPU selected (arch/brand pass).
    gpu: Option<&'a Gpu>,
}

enum Outcome {
    Pass,
    Unknown,
    Fail,
}

impl Facts<'_> {
    fn eval(&self, f: &Factor) -> Outcome {
        let version = |v: Option<Vec<u64>>| match (v, &f.value) {
            (Some(actual), Value::Version(wanted)) => {
                if f.op.holds(compare_versions(&actual, wanted)) {
                    Outcome::Pass
                } else {
                    Outcome::Fail
                }
            }
            _ => Outcome::Unknown,
        };
        match f.property {
            Property::Cuda => version(self.cuda.clone()),
            Property::Driver => version(self.driver.clone()),
            Property::Arch => match self.gpu {
                None => Outcome::Pass,
                Some(g) => version(
                    g.compute_capability
                        .map(|(ma, mi)| vec![u64::from(ma), u64::from(mi)]),
                ),
            },
            Property::Brand => match (self.gpu, &f.value) {
                (None, _) => Outcome::Pass,
                (Some(Gpu { brand: Some(b), .. }), Value::Brand(wanted)) => {
                    let equal = b.eq_ignore_ascii_case(wanted);
                    if equal == (f.op == super::require::Op::Eq) {
                        Outcome::Pass
                    } else {
                        Outcome::Fail
                    }
                }
                _ => Outcome::Unknown,
            },
        }
    }

    fn describe(&self, inv: &Inventory) -> String {
        let cuda = inv.cuda_driver_version.as_deref().unwrap_or("unknown");
        let node = format!("driver {}, CUDA {cuda}", inv.driver_version);
        match self.gpu {
            None => format!(", with {node}"),
            Some(g) => {
                let arch = g
                    .compute_capability
                    .map_or("unknown".to_string(), |(a, b)| format!("{a}.{b}"));
                let brand = g.brand.as_deref().unwrap_or("unknown");
                format!(
                    ", on GPU {} (arch {arch}, brand {brand}) with {node}",
                    g.index
                )
            }
        }
    }
}

impl Requirements {
    /// Checks every constraint for every selected GPU (`devices` as resolved).
    pub fn check(
        &self,
        inv: &Inventory,
        devices: &[DeviceRef],
    ) -> Result<RequirementReport, RequestError> {
        let mut report = RequirementReport::default();
        if self.disabled || self.constraints.is_empty() {
            return Ok(report);
        }
        let mut gpus: Vec<&Gpu> = Vec::new();
        for d in devices {
            let index = match *d {
                DeviceRef::Gpu { index } => index,
                DeviceRef::Mig { parent_index, .. } => parent_index,
            };
            if let Some(g) = inv.gpu(index) {
                if !gpus.iter().any(|x| x.index == g.index) {
                    gpus.push(g);
                }
            }
        }
        let cuda = inv.cuda_driver_version.as_deref().and_then(parse_version);
        let driver = parse_version(&inv.driver_version);
        let mut contexts: Vec<Facts> = gpus
            .iter()
            .map(|g| Facts {
                cuda: cuda.clone(),
                driver: driver.clone(),
                gpu: Some(g),
            })
            .collect();
        if contexts.is_empty() {
            contexts.push(Facts {
                cuda,
                driver,
                gpu: None,
            });
        }
        for constraint in &self.constraints {
            for facts in &contexts {
                check_one(constraint, facts, inv, &mut report)?;
            }
        }
        report.unchecked.sort();
        report.unchecked.dedup();
        Ok(report)
    }
}

fn check_one(
    c: &Constraint,
    facts: &Facts,
    inv: &Inventory,
    report: &mut RequirementReport,
) -> Result<(), RequestError> {
    if c.terms.is_empty() {
        return Ok(());
    }
    let mut failed: Vec<&Factor> = Vec::new();
    let mut unknown: Vec<&Factor> = Vec::new();
    for term in &c.terms {
        let mut term_failed = None;
        let mut term_unknown = Vec::new();
        for f in &term.factors {
            match facts.eval(f) {
                Outcome::Pass => {}
                Outcome::Unknown => term_unknown.push(f),
                Outcome::Fail => {
                    term_failed = Some(f);
                    break;
                }
            }
        }
        match term_failed {
            None => {
                unknown.extend(term_unknown);
                for f in unknown {
                    report.unchecked.push(format!(
                        "{}: {} ({} unknown)",
                        c.variable,
                        f,
                        f.property.as_str()
                    ));
                }
                return Ok(());
            }
            Some(f) => failed.push(f),
        }
    }
    let condition = if c.terms.len() == 1 {
        failed[0].text.clone()
    } else {
        c.expression.clone()
    };
    let hint = if failed.iter().any(|f| f.property == Property::Cuda) {
        ", please update your driver to a newer version, or use an earlier cuda container"
            .to_string()
    } else {
        String::new()
    };
    Err(RequestError::RequirementUnsatisfied {
        variable: c.variable.clone(),
        expression: c.expression.clone(),
        condition,
        on: facts.describe(inv),
        hint,
    })
}
