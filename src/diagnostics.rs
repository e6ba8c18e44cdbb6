//! Findings about input: each names where it was read (file and document, or
//! API server), the object and the field, so a user can go straight to it.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

/// Where an object was read from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Origin {
    /// A file path, or another source such as `cluster c1 API`; shared by
    /// every object read from it.
    pub source: Arc<str>,
    /// The 1-based index of the YAML document in a multi-document file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<usize>,
}

impl Origin {
    pub fn file(path: impl fmt::Display) -> Self {
        Self {
            source: path.to_string().into(),
            document: None,
        }
    }

    pub fn document(path: impl fmt::Display, document: usize) -> Self {
        Self {
            source: path.to_string().into(),
            document: Some(document),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.document {
            Some(document) => write!(f, "{}, document {document}", self.source),
            None => f.write_str(&self.source),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One finding: an error makes the input invalid, a warning does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub origin: Origin,
    /// The object, as `Kind namespace/name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// The field path inside the object, as `spec.ports[0].port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
    /// The cluster the object belongs to: its id once read, else the
    /// folder or API source it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

impl Diagnostic {
    pub fn error(origin: Origin, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            origin,
            object: None,
            field: None,
            message: message.into(),
            cluster: None,
        }
    }

    pub fn warning(origin: Origin, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(origin, message)
        }
    }

    pub fn object(mut self, object: impl Into<String>) -> Self {
        self.object = Some(object.into());
        self
    }

    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Names the cluster, unless one is named already.
    pub fn in_cluster(mut self, cluster: &str) -> Self {
        self.cluster.get_or_insert_with(|| cluster.to_owned());
        self
    }

    /// The kind of the object (`Service` of `Service shop/cart`), if any.
    pub fn kind(&self) -> Option<&str> {
        self.object.as_deref()?.split_whitespace().next()
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{severity}: {}", self.origin)?;
        if let Some(object) = &self.object {
            write!(f, ": {object}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Several findings, shown one per line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(Diagnostic::is_error)
    }

    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.is_error())
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| !d.is_error())
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, diagnostic) in self.0.iter().enumerate() {
            if index > 0 {
                writeln!(f)?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_file_document_object_and_field() {
        let diagnostic = Diagnostic::error(Origin::document("c1/svc.yaml", 2), "must be 1-65535")
            .object("Service shop/cart")
            .field("spec.ports[0].port");
        assert_eq!(
            diagnostic.to_string(),
            "error: c1/svc.yaml, document 2: Service shop/cart: field spec.ports[0].port: must be 1-65535"
        );
    }
}
