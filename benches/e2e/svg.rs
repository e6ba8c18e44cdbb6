//! The SVG chart, written as plain SVG text: one panel of horizontal grouped
//! bars per figure family (throughput, latency, connection rate, idle
//! memory), one group per scenario, each bar labelled with its value.

use crate::Result;
use crate::report::{Outcome, short};
use std::fmt::Write as _;
use std::path::Path;

const WIDTH: f64 = 900.0;
const LABEL: f64 = 170.0;
const BAR: f64 = 14.0;
const GAP: f64 = 10.0;
const COLOURS: [&str; 3] = ["#4e79a7", "#f28e2b", "#e15759"];

/// One panel: a title, the series (legend) and one row of values per scenario.
struct Panel {
    title: String,
    series: Vec<&'static str>,
    rows: Vec<(&'static str, Vec<Option<f64>>)>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Panel {
    fn height(&self) -> f64 {
        let group = self.series.len() as f64 * BAR + GAP;
        50.0 + self.rows.len() as f64 * group
    }

    /// The panel's elements, its top at `y`.
    fn draw(&self, svg: &mut String, y: f64) {
        let _ = writeln!(
            svg,
            r#"<text x="10" y="{:.1}" font-size="15" font-weight="bold">{}</text>"#,
            y + 18.0,
            escape(&self.title)
        );
        let mut x = LABEL;
        for (index, name) in self.series.iter().enumerate() {
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="12">{}</text>"#,
                y + 26.0,
                COLOURS[index % COLOURS.len()],
                x + 14.0,
                y + 35.0,
                escape(name)
            );
            x += 24.0 + 7.0 * name.len() as f64;
        }
        let max = self
            .rows
            .iter()
            .flat_map(|(_, values)| values.iter().flatten())
            .fold(0.0_f64, |a, b| a.max(*b));
        let span = WIDTH - LABEL - 90.0;
        let mut top = y + 45.0;
        for (scenario, values) in &self.rows {
            let group = values.len() as f64 * BAR;
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="end">{}</text>"#,
                LABEL - 8.0,
                top + group / 2.0 + 4.0,
                escape(scenario)
            );
            for (index, value) in values.iter().enumerate() {
                let bar_top = top + index as f64 * BAR;
                let (width, label) = match value {
                    Some(v) if max > 0.0 => (v / max * span, short(*v)),
                    Some(v) => (0.0, short(*v)),
                    None => (0.0, "failed".to_owned()),
                };
                let _ = writeln!(
                    svg,
                    r#"<rect x="{LABEL:.1}" y="{bar_top:.1}" width="{width:.1}" height="{:.1}" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="11">{label}</text>"#,
                    BAR - 2.0,
                    COLOURS[index % COLOURS.len()],
                    LABEL + width + 4.0,
                    bar_top + BAR - 4.0,
                );
            }
            top += group + GAP;
        }
    }
}

/// Writes the chart of `outcomes` to `path`; `subtitle` says when and how.
pub(crate) fn write_chart(path: &Path, subtitle: &str, outcomes: &[Outcome<'_>]) -> Result<()> {
    let names = || outcomes.iter().map(|o| o.scenario.name);
    let panels = [
        Panel {
            title: "Bulk throughput, Gbit/s one way (higher is better)".to_owned(),
            series: vec!["1 stream", "8 streams"],
            rows: names()
                .zip(outcomes)
                .map(|(n, o)| (n, vec![o.bulk[0].value(), o.bulk[1].value()]))
                .collect(),
        },
        Panel {
            title: "Latency of a 1 KiB request/response at a fixed rate, µs (lower is better)"
                .to_owned(),
            series: vec!["p50", "p99", "p99.9"],
            rows: names()
                .zip(outcomes)
                .map(|(n, o)| {
                    let l = &o.latency;
                    (n, vec![l.micros(0.5), l.micros(0.99), l.micros(0.999)])
                })
                .collect(),
        },
        Panel {
            title: "Connection rate: connect, 1-byte echo, close; per second (higher is better)"
                .to_owned(),
            series: vec!["connections/s"],
            rows: names()
                .zip(outcomes)
                .map(|(n, o)| (n, vec![o.rate.value()]))
                .collect(),
        },
        Panel {
            title: "Idle memory, KiB per connection, all proxy processes (lower is better)"
                .to_owned(),
            series: vec!["KiB/connection"],
            rows: outcomes
                .iter()
                .filter(|o| o.idle.is_some())
                .map(|o| {
                    let kib = o.idle_kib();
                    let total = (!kib.is_empty()).then(|| kib.iter().map(|(_, k)| k).sum());
                    (o.scenario.name, vec![total])
                })
                .collect(),
        },
    ];
    let height: f64 = 60.0 + panels.iter().map(|p| p.height() + 20.0).sum::<f64>();
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="22" font-size="17" font-weight="bold">strait e2e bench</text><text x="10" y="42" font-size="12">{}</text>"#,
        escape(subtitle)
    );
    let mut y = 60.0;
    for panel in &panels {
        panel.draw(&mut svg, y);
        y += panel.height() + 20.0;
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
