//! Loading a configuration directory into everything the commands report on:
//! settings, the cluster set, the merged services and any warnings.

use std::path::Path;

use crate::config::GatewaySettings;
use crate::diagnostics::Diagnostic;
use crate::discovery::files::{LoadError, load_clusters};
use crate::merge::{MergedSet, merge};
use crate::model::ClusterSet;

use super::Refused;

pub(super) struct Loaded {
    pub settings: GatewaySettings,
    pub set: ClusterSet,
    pub merged: MergedSet,
    pub warnings: Vec<Diagnostic>,
}

pub(super) fn load(dir: &Path) -> Result<Loaded, Refused> {
    let settings = GatewaySettings::load(dir).map_err(|e| Refused(e.to_string()))?;
    let loaded = load_clusters(dir, &settings.translate_options()).map_err(|e| match e {
        LoadError::Invalid(diagnostics) => {
            let errors = diagnostics.errors().count();
            Refused(format!(
                "{diagnostics}\n{} is not valid: {errors} error{}",
                dir.display(),
                if errors == 1 { "" } else { "s" }
            ))
        }
        io => Refused(io.to_string()),
    })?;
    let merged = merge(&loaded.set);
    Ok(Loaded {
        settings,
        set: loaded.set,
        merged,
        warnings: loaded.warnings,
    })
}
