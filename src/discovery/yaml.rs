//! YAML in and out, through serde-saphyr: a file is split into its
//! documents at their markers (`---`, `...` at the start of a line, which
//! YAML forbids inside any scalar), and each document is parsed on its own
//! into a JSON value. A syntax error so costs only its own document, and
//! every error names the line and column in the file, not in the document.

use serde_json::Value;

/// One document of a multi-document file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Document<'a> {
    /// 1-based, counting every document a YAML stream holds (empty ones too).
    pub number: usize,
    /// The document's first line in the file, 1-based.
    pub first_line: usize,
    pub text: &'a str,
}

/// Why a document could not be read: the parser's message, which names the
/// line and column in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct YamlError(String);

/// What `---` or `...` at the start of a line is: a marker when nothing
/// but blanks or a comment (or, after `---`, the document's content) follows.
fn marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Whether a piece of text holds anything but blanks and comments.
fn has_content(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        !line.is_empty() && !line.starts_with('#') && !line.starts_with('%')
    })
}

/// Splits `text` into its documents, in order.
pub fn documents(text: &str) -> Vec<Document<'_>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // (start byte, first line, began with `---`)
    let mut starts: Vec<(usize, usize, bool)> = vec![(0, 1, false)];
    let mut offset = 0;
    let mut after_end = false;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let number = index + 1;
        if marker(line, "---") {
            starts.push((offset, number, true));
            after_end = false;
        } else if after_end {
            // A bare document after `...`.
            starts.push((offset, number, false));
            after_end = false;
        }
        offset += line.len();
        if marker(line, "...") {
            after_end = true;
        }
    }
    let mut documents = Vec::new();
    for (index, (start, first_line, explicit)) in starts.iter().enumerate() {
        let end = starts.get(index + 1).map_or(text.len(), |next| next.0);
        let piece = &text[*start..end];
        if !explicit && !has_content(piece) {
            // Only comments or blanks before the first `---`: no document.
            continue;
        }
        documents.push(Document {
            number: documents.len() + 1,
            first_line: *first_line,
            text: piece,
        });
    }
    documents
}

fn options() -> serde_saphyr::Options {
    serde_saphyr::options! { with_snippet: false }
}

/// Parses one document into a JSON value (`Null` for an empty one).
pub fn parse_document(document: &Document<'_>) -> Result<Value, YamlError> {
    // Blank lines in front keep the parser's line numbers the file's.
    let padded = format!(
        "{}{}",
        "\n".repeat(document.first_line.saturating_sub(1)),
        document.text
    );
    serde_saphyr::from_str_with_options(&padded, options())
        .map_err(|error| YamlError(error.to_string()))
}

/// Parses a file that holds one document (`gateway.yaml`).
pub fn parse_single(text: &str) -> Result<Value, YamlError> {
    serde_saphyr::from_str_with_options(text, options())
        .map_err(|error| YamlError(error.to_string()))
}

/// Renders a value as a YAML document (without the `---`).
pub fn to_string(value: &impl serde::Serialize) -> Result<String, YamlError> {
    serde_saphyr::to_string(value).map_err(|error| YamlError(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(text: &str) -> Vec<(usize, usize)> {
        documents(text)
            .iter()
            .map(|d| (d.number, d.first_line))
            .collect()
    }

    #[test]
    fn documents_are_split_at_their_markers_and_numbered_as_a_stream() {
        assert_eq!(
            numbered("a: 1\n---\nb: 2\n--- \nc: 3\n"),
            [(1, 1), (2, 2), (3, 4)]
        );
        // A leading `---` starts the first document; comments before it are none.
        assert_eq!(
            numbered("# head\n---\na: 1\n---\n---\nb: 2\n"),
            [(1, 2), (2, 4), (3, 5)]
        );
        // `...` ends a document; a bare one may follow.
        assert_eq!(numbered("a: 1\n...\nb: 2\n"), [(1, 1), (2, 3)]);
        // Not markers: indented, or followed by more than a blank.
        assert_eq!(numbered("a: |\n  ---\nb: ---x\n----\n"), [(1, 1)]);
        assert_eq!(numbered(""), []);
    }

    #[test]
    fn each_document_parses_alone_with_lines_of_the_file() {
        let text = "a: 1\n---\nb: [unclosed\n---\nc: 3\n";
        let parsed: Vec<Result<Value, YamlError>> =
            documents(text).iter().map(parse_document).collect();
        assert_eq!(parsed[0], Ok(serde_json::json!({"a": 1})));
        let error = parsed[1].clone().expect_err("syntax error");
        assert!(error.to_string().contains("line 3"), "{error}");
        assert_eq!(parsed[2], Ok(serde_json::json!({"c": 3})));
        let empty = documents("---\n---\na: 1\n");
        assert_eq!(parse_document(&empty[0]), Ok(Value::Null));
    }

    #[test]
    fn duplicate_keys_are_an_error() {
        let error = parse_single("a: 1\na: 2\n").expect_err("duplicate");
        assert!(error.to_string().contains("duplicate"), "{error}");
    }
}
