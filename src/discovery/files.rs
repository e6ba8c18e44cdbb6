//! The file source: reads a `gateway-config` directory, one folder per
//! cluster under `clusters/`, each holding multi-document Kubernetes YAML,
//! and hands the objects to the shared translation.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::diagnostics::{Diagnostic, Diagnostics, Origin};
use crate::model::ClusterSet;

use super::objects::parse_file;
use super::translate::{TranslateOptions, assemble, translate_cluster};

/// The folder under a configuration directory that holds one folder per cluster.
pub const CLUSTERS_DIR: &str = "clusters";

/// A cluster set read from files, with the warnings found on the way.
#[derive(Debug)]
pub struct Loaded {
    pub set: ClusterSet,
    pub warnings: Vec<Diagnostic>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{0}")]
    Invalid(Diagnostics),
}

impl LoadError {
    fn io(path: &Path) -> impl FnOnce(io::Error) -> LoadError + '_ {
        move |source| LoadError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Reads every cluster folder under `dir/clusters` and assembles the set.
/// Any error finding fails the load; warnings travel with the result.
pub fn load_clusters(dir: &Path, options: &TranslateOptions) -> Result<Loaded, LoadError> {
    let usable = load_usable(dir, options)?;
    if usable.diagnostics.iter().any(Diagnostic::is_error) {
        return Err(LoadError::Invalid(Diagnostics(usable.diagnostics)));
    }
    Ok(Loaded {
        set: usable.set,
        warnings: usable.diagnostics,
    })
}

/// The cluster set with every invalid object left out (each excludes only
/// itself: an endpoint, a port, a Service and its export, a cluster), and
/// every finding, errors included: what `strait run` routes with, so that
/// one bad object stops nothing else.
#[derive(Debug)]
pub struct Usable {
    pub set: ClusterSet,
    pub diagnostics: Vec<Diagnostic>,
}

/// Reads `dir/clusters/*/` as [`load_clusters`] does, keeping what is
/// valid. Fails only when a file cannot be read or no cluster is left.
pub fn load_usable(dir: &Path, options: &TranslateOptions) -> Result<Usable, LoadError> {
    let clusters_dir = dir.join(CLUSTERS_DIR);
    let mut diagnostics = Vec::new();
    let mut clusters = Vec::new();
    for folder in sorted_entries(&clusters_dir)? {
        if !folder.is_dir() {
            diagnostics.push(Diagnostic::warning(
                Origin::file(folder.display()),
                "is not a folder; cluster objects belong in clusters/<cluster>/*.yaml; ignored",
            ));
            continue;
        }
        let mut objects = Vec::new();
        let mut parsing = Vec::new();
        for file in sorted_entries(&folder)? {
            if !is_yaml(&file) {
                continue;
            }
            let text = fs::read_to_string(&file).map_err(LoadError::io(&file))?;
            let (parsed, findings) = parse_file(&file.display().to_string(), &text);
            objects.extend(parsed);
            parsing.extend(findings);
        }
        let source = folder.display().to_string();
        let (cluster, findings) =
            translate_cluster(&source, &objects.iter().collect::<Vec<_>>(), options);
        // Findings of the files themselves (YAML) name the folder.
        let label = cluster
            .as_ref()
            .map_or(source.as_str(), |cluster| cluster.id.as_str())
            .to_owned();
        diagnostics.extend(parsing.into_iter().map(|f| f.in_cluster(&label)));
        diagnostics.extend(findings);
        clusters.extend(cluster);
    }
    let (set, findings) = assemble(clusters);
    diagnostics.extend(findings);
    if set.clusters.is_empty() {
        let message = if diagnostics.iter().any(Diagnostic::is_error) {
            "holds no valid cluster; a configuration needs at least one cluster"
        } else {
            "holds no cluster folders; a configuration needs at least one cluster"
        };
        diagnostics.push(Diagnostic::error(
            Origin::file(clusters_dir.display()),
            message,
        ));
        return Err(LoadError::Invalid(Diagnostics(diagnostics)));
    }
    Ok(Usable { set, diagnostics })
}

fn is_yaml(path: &Path) -> bool {
    path.is_file()
        && matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        )
}

/// The entries of a directory in name order, hidden ones left out, so that
/// the result never depends on the file system's listing order.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir).map_err(LoadError::io(dir))? {
        let entry = entry.map_err(LoadError::io(dir))?;
        if !entry.file_name().to_string_lossy().starts_with('.') {
            entries.push(entry.path());
        }
    }
    entries.sort();
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_numbered_from_one_and_empty_ones_skipped() {
        let text = "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n---\n---\napiVersion: v1\nkind: Service\nmetadata: {name: cart}\nspec: {ports: [{port: 80}]}\n";
        let (objects, diagnostics) = parse_file("f.yaml", text);
        assert_eq!(objects.len(), 1);
        assert_eq!(*objects[0].origin, Origin::document("f.yaml", 3));
        assert_eq!(diagnostics.len(), 1);
        assert!(!diagnostics[0].is_error(), "unknown kinds only warn");
    }

    #[test]
    fn yaml_syntax_errors_name_the_document_and_line() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\nkind: [unclosed\n";
        let (_, diagnostics) = parse_file("f.yaml", text);
        let error = diagnostics
            .iter()
            .find(|d| d.is_error())
            .expect("a syntax error");
        assert_eq!(error.origin.document, Some(2));
        assert!(error.message.contains("line"), "{}", error.message);
    }

    #[test]
    fn scalars_are_not_objects() {
        let (_, diagnostics) = parse_file("f.yaml", "just a string\n");
        assert!(diagnostics[0].is_error());
    }
}
