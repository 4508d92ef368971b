//! What actually feeds the advertisement, hashed: the config files' content (the files a config
//! set is read from), the node label, each GPU's MPS `ready` file (present or not), the CDI spec
//! gpu-mps-daemon's `status.json` names and that spec's (mtime, size, inode).
//!
//! The serving loop computes it only when a watched file's stamp changed
//! ([`crate::changes`]) and reloads only when it differs (#22): gpu-mps-daemon rewrites
//! `status.json` on every probe (its timestamps change, the spec it names does not), which
//! must not cost a config parse, a node discovery and a spec parse every 5 s. The spec itself is
//! rewritten by its daemon only when its content changes, so its stamp stands for its content.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use gpuhook_node::bounded::{read_bounded, MAX_CONFIG_FILE_BYTES};

use crate::changes::{meta, MAX_ENTRIES};

/// The MPS part of the inputs: the daemon's root and the node's GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MpsInputs {
    pub root: Option<PathBuf>,
    pub gpus: Vec<String>,
}

fn hash_file(path: &Path, h: &mut DefaultHasher) {
    match read_bounded(path, MAX_CONFIG_FILE_BYTES) {
        Ok(bytes) => bytes.hash(h),
        Err(e) => e.to_string().hash(h),
    }
}

/// The content of a config file, or of a directory's config files as a config set reads them
/// (not directories, not `..`-prefixed; symlinks followed), names included.
pub fn hash_config(path: &Path, h: &mut DefaultHasher) {
    let Ok(rd) = std::fs::read_dir(path) else {
        hash_file(path, h);
        return;
    };
    let mut files: Vec<(String, PathBuf)> = rd
        .filter_map(Result::ok)
        .take(MAX_ENTRIES)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(name, p)| !name.starts_with("..") && !p.is_dir())
        .collect();
    files.sort();
    for (name, p) in files {
        name.hash(h);
        hash_file(&p, h);
    }
}

/// The fingerprint of the inputs: config at `config`, label value `label`, `mps`, and the
/// stamps of `devices` (the inventory file, or each GPU's MIG capability directory, whose
/// entries come and go with a MIG re-partition).
pub fn fingerprint(
    config: &Path,
    label: &Option<String>,
    mps: &MpsInputs,
    devices: &[PathBuf],
) -> u64 {
    let mut h = DefaultHasher::new();
    hash_config(config, &mut h);
    label.hash(&mut h);
    for d in devices {
        meta(d).hash(&mut h);
    }
    if let Some(root) = &mps.root {
        for uuid in &mps.gpus {
            root.join(uuid).join("ready").exists().hash(&mut h);
        }
        let spec = crate::mps_share::spec_path(root);
        spec.as_deref().map(meta).hash(&mut h);
        spec.hash(&mut h);
    }
    h.finish()
}
