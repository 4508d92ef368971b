//! Resolving a container's CDI names before anything is changed: the spec directories first,
//! then specs made in memory for what they lack ([`GenerateMissing`]), registered after the
//! files so that a spec file always wins.

use std::path::PathBuf;
use std::sync::Arc;

use gpuhook_cdi::registry::LoadedSpec;
use gpuhook_cdi::{Registry, RegistryDevice, Spec};

use crate::error::{NodeError, RuntimeError};

/// Makes specs in memory for requested devices that no spec file defines (`generate-missing`).
/// It gets the unresolved qualified names and returns specs defining some or all of them; what
/// it leaves undefined is reported as unresolvable.
pub trait GenerateMissing {
    fn generate(&self, missing: &[String]) -> Result<Vec<Spec>, NodeError>;

    /// For the error about names nothing defines: what does exist (e.g. the node's devices).
    fn explain(&self, _unresolved: &[String]) -> Option<String> {
        None
    }
}

/// Registers in-memory specs in `registry` (after the spec dirs, so a file always wins).
fn add_generated(registry: &mut Registry, specs: Vec<Spec>) {
    let base = registry.specs.len();
    for (i, spec) in specs.into_iter().enumerate() {
        let loaded = Arc::new(LoadedSpec {
            path: PathBuf::from(format!("<generated in memory #{}>", base + i)),
            priority: usize::MAX,
            spec,
        });
        registry.specs.push(loaded.clone());
        for (index, (name, _)) in loaded.spec.qualified_devices().enumerate() {
            registry.devices.entry(name).or_insert(RegistryDevice {
                spec: loaded.clone(),
                index,
            });
        }
    }
}

/// A registry defining every name of `names`, or the error naming those nothing defines.
pub(crate) fn resolve(
    names: &[String],
    spec_dirs: &[PathBuf],
    generate: Option<&dyn GenerateMissing>,
) -> Result<Registry, RuntimeError> {
    let mut registry = Registry::load(spec_dirs);
    for e in &registry.errors {
        tracing::warn!(file = %e.path.display(), error = %e.message, "skipping CDI spec");
    }
    let missing = |r: &Registry| -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        names
            .iter()
            .filter(|n| r.get(n).is_none() && seen.insert(n.as_str()))
            .cloned()
            .collect()
    };
    let mut unknown = missing(&registry);
    if let (false, Some(generate)) = (unknown.is_empty(), generate) {
        let specs = generate
            .generate(&unknown)
            .map_err(|error| RuntimeError::Generate {
                names: unknown.clone(),
                error: Box::new(error),
            })?;
        add_generated(&mut registry, specs);
        unknown = missing(&registry);
    }
    if !unknown.is_empty() {
        let hint = generate.and_then(|g| g.explain(&unknown));
        return Err(RuntimeError::Unresolvable {
            names: unknown,
            dirs: spec_dirs.to_vec(),
            hint,
        });
    }
    Ok(registry)
}
