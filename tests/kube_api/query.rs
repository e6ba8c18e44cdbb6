//! Query strings and label selectors of list and watch requests.

use std::collections::HashMap;

use serde_json::Value;

/// One term of a label selector.
#[derive(Debug, Clone)]
pub(super) enum LabelTerm {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
}

impl LabelTerm {
    pub(super) fn matches(&self, labels: &Value) -> bool {
        let value = |key: &str| labels.get(key).and_then(Value::as_str);
        match self {
            LabelTerm::Equals(key, expected) => value(key) == Some(expected.as_str()),
            LabelTerm::NotEquals(key, expected) => value(key) != Some(expected.as_str()),
            LabelTerm::Exists(key) => value(key).is_some(),
        }
    }
}

pub(super) fn parse_selector(text: &str) -> Vec<LabelTerm> {
    text.split(',')
        .filter(|term| !term.is_empty())
        .map(|term| {
            if let Some((key, value)) = term.split_once("!=") {
                LabelTerm::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = term.split_once("==") {
                LabelTerm::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = term.split_once('=') {
                LabelTerm::Equals(key.trim().into(), value.trim().into())
            } else {
                LabelTerm::Exists(term.trim().into())
            }
        })
        .collect()
}

pub(super) fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'%' if index + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[index + 1..index + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        index += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        index += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                index += 1;
            }
            byte => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
