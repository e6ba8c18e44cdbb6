//! A small PromQL scanner for the monitoring checks: the `strait_*`
//! selectors of an expression with their label matchers, and the labels of
//! its grouping clauses. Enough to check names, not to evaluate.

/// One `strait_*` selector of an expression and its label matchers.
pub struct Selector {
    pub series: String,
    /// (label, operator, value as written)
    pub matchers: Vec<(String, String, String)>,
}

/// What an expression names: its `strait_*` selectors, and the labels of its
/// `by`, `without`, `on`, `ignoring`, `group_left` and `group_right` clauses.
#[derive(Default)]
pub struct Scanned {
    pub selectors: Vec<Selector>,
    pub grouping: Vec<String>,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident(c: u8) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

fn at(bytes: &[u8], i: usize) -> Option<u8> {
    bytes.get(i).copied()
}

fn skip_blanks(bytes: &[u8], mut i: usize) -> usize {
    while at(bytes, i).is_some_and(|c| c.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

fn ident_end(bytes: &[u8], mut i: usize) -> usize {
    while at(bytes, i).is_some_and(is_ident) {
        i += 1;
    }
    i
}

/// The index just past the string literal that starts (with its quote) at `start`.
fn string_end(expr: &str, start: usize) -> Result<usize, String> {
    let bytes = expr.as_bytes();
    let quote = bytes[start];
    let mut i = start + 1;
    while let Some(c) = at(bytes, i) {
        if c == b'\\' && quote != b'`' {
            i += 2;
        } else if c == quote {
            return Ok(i + 1);
        } else {
            i += 1;
        }
    }
    Err(format!("a string left open at byte {start}"))
}

/// Reads the label matchers after the `{` that ends just before `start`;
/// returns the index past the closing `}`.
fn matchers(
    expr: &str,
    start: usize,
    out: &mut Vec<(String, String, String)>,
) -> Result<usize, String> {
    let bytes = expr.as_bytes();
    let mut i = start;
    loop {
        i = skip_blanks(bytes, i);
        match at(bytes, i) {
            Some(b'}') => return Ok(i + 1),
            Some(b',') => {
                i += 1;
                continue;
            }
            Some(c) if is_ident_start(c) => {}
            _ => return Err(format!("a label name expected at byte {i}")),
        }
        let label_start = i;
        i = ident_end(bytes, i);
        let label = &expr[label_start..i];
        i = skip_blanks(bytes, i);
        let op = ["=~", "!~", "!=", "="]
            .into_iter()
            .find(|op| expr[i..].starts_with(*op))
            .ok_or_else(|| format!("an operator expected after {label}"))?;
        i = skip_blanks(bytes, i + op.len());
        if !matches!(at(bytes, i), Some(b'"' | b'\'' | b'`')) {
            return Err(format!("a quoted value expected after {label}{op}"));
        }
        let end = string_end(expr, i)?;
        out.push((
            label.to_owned(),
            op.to_owned(),
            expr[i + 1..end - 1].to_owned(),
        ));
        i = end;
    }
}

/// Scans an expression for its `strait_*` selectors and grouping labels,
/// skipping string literals (`job=~".*strait.*"` names no metric).
pub fn scan(expr: &str) -> Result<Scanned, String> {
    let bytes = expr.as_bytes();
    let mut scanned = Scanned::default();
    let mut i = 0;
    while let Some(c) = at(bytes, i) {
        if matches!(c, b'"' | b'\'' | b'`') {
            i = string_end(expr, i)?;
        } else if is_ident_start(c) && (i == 0 || !is_ident(bytes[i - 1])) {
            let start = i;
            i = ident_end(bytes, i);
            let word = &expr[start..i];
            let after = skip_blanks(bytes, i);
            if word.starts_with("strait_") {
                let mut selector = Selector {
                    series: word.to_owned(),
                    matchers: Vec::new(),
                };
                if at(bytes, after) == Some(b'{') {
                    i = matchers(expr, after + 1, &mut selector.matchers)?;
                }
                scanned.selectors.push(selector);
            } else if matches!(
                word,
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) && at(bytes, after) == Some(b'(')
            {
                let close = expr[after..]
                    .find(')')
                    .map(|n| after + n)
                    .ok_or_else(|| format!("{word}( left open"))?;
                scanned.grouping.extend(
                    expr[after + 1..close]
                        .split(',')
                        .map(str::trim)
                        .filter(|label| !label.is_empty())
                        .map(str::to_owned),
                );
                i = close + 1;
            }
        } else {
            i += 1;
        }
    }
    Ok(scanned)
}
