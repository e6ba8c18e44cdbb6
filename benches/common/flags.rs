//! The command-line flags of the harness benches (`e2e`, `imports`, `dns`):
//! `--flag value` and `--flag=value`. Whatever a bench does not know is
//! cargo's (test filters, `--nocapture`, `--bench`) and is left alone.

/// The value of the flag being read, from `--flag=value` or the next argument.
pub struct Value<'a> {
    inline: Option<String>,
    rest: &'a mut dyn Iterator<Item = String>,
}

impl Value<'_> {
    pub fn text(&mut self, usage: &str) -> Result<String, String> {
        self.inline
            .take()
            .or_else(|| self.rest.next())
            .ok_or_else(|| format!("{usage} needs a value"))
    }

    /// A number above zero.
    pub fn number(&mut self, usage: &str) -> Result<usize, String> {
        let text = self.text(usage)?;
        text.parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{usage} wants a positive number, not {text:?}"))
    }

    /// A comma-separated list, empty entries dropped.
    pub fn list(&mut self, usage: &str) -> Result<Vec<String>, String> {
        Ok(self
            .text(usage)?
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect())
    }
}

/// Calls `flag` with each argument of the process and a reader of its value.
pub fn parse(
    mut flag: impl FnMut(&str, &mut Value<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                (name.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        let mut value = Value {
            inline,
            rest: &mut args,
        };
        flag(&name, &mut value)?;
    }
    Ok(())
}
