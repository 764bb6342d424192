//! `wgpool replay TRACE --compare`: the same trace under PyTorch's native allocator, PyTorch
//! with expandable segments, wgpool's default and (when given) the user's configuration, in
//! one table.

use serde::Serialize;
use wgpool::config::Config;
use wgpool::format::bytes;
use wgpool::trace::{ReplayOptions, ReplayReport, Trace, replay};

use super::{Failure, output};

/// The configurations `--compare` always runs: (name, `WGPOOL_CONF`).
pub const COMPARED: [(&str, &str); 3] = [
    ("PyTorch native", "policy:pytorch"),
    (
        "PyTorch expandable segments",
        "policy:pytorch,expandable_segments:True",
    ),
    ("wgpool default", ""),
];

/// One row: a configuration and its replay, or why it could not run.
#[derive(Serialize)]
struct Row {
    name: String,
    conf: String,
    report: Option<ReplayReport>,
    error: Option<String>,
}

#[derive(Serialize)]
struct Comparison<'a> {
    trace: &'a str,
    format: &'static str,
    /// Operations each configuration replayed: every pass's, as in its report.
    ops: usize,
    /// How many times the trace ran in a row (`--passes`).
    passes: u32,
    rows: Vec<Row>,
}

/// Replays `trace` under every compared configuration (and `yours`, the configuration the
/// user gave, when it differs) and prints the table, or one JSON object with `--json`.
pub fn run(
    trace: &Trace,
    file: &str,
    yours: Option<&str>,
    options: &ReplayOptions,
    json: bool,
) -> Result<(), Failure> {
    let mut configs: Vec<(String, String)> = COMPARED
        .iter()
        .map(|(name, conf)| (name.to_string(), conf.to_string()))
        .collect();
    if let Some(conf) = yours.filter(|c| !COMPARED.iter().any(|(_, known)| known == c)) {
        configs.push(("yours".to_string(), conf.to_string()));
    }
    let rows: Vec<Row> = configs
        .into_iter()
        .map(|(name, conf)| {
            let result = Config::parse(&conf)
                .map_err(|e| e.to_string())
                .and_then(|config| replay(trace, &config, options).map_err(|e| e.to_string()));
            match result {
                Ok(report) => Row {
                    name,
                    conf,
                    report: Some(report),
                    error: None,
                },
                Err(error) => Row {
                    name,
                    conf,
                    report: None,
                    error: Some(error),
                },
            }
        })
        .collect();
    if rows.iter().all(|r| r.report.is_none()) {
        let reasons: Vec<String> = rows
            .iter()
            .map(|r| format!("{}: {}", r.name, r.error.as_deref().unwrap_or("")))
            .collect();
        return Err(Failure::bad_input(reasons.join("; ")));
    }
    let comparison = Comparison {
        trace: file,
        format: trace.format.name(),
        ops: trace.ops.len() * options.passes.max(1) as usize,
        passes: options.passes.max(1),
        rows,
    };
    if json {
        return output::print_json(&comparison, "comparison");
    }
    output::print(&table(&comparison))
}

fn table(c: &Comparison) -> String {
    let live = c
        .rows
        .iter()
        .find_map(|r| r.report.as_ref())
        .map_or(0, |r| r.peak_live_bytes);
    let passes = if c.passes > 1 {
        format!(" in {} passes", c.passes)
    } else {
        String::new()
    };
    let mut out = format!(
        "trace {} ({}, {} ops{passes}), peak live {} ({live} B)\n\n",
        c.trace,
        c.format,
        c.ops,
        bytes(live)
    );
    out.push_str(&format!(
        "{:<30} {:>13} {:>9} {:>18} {:>7} {:>6}  {}\n",
        "configuration", "peak reserved", "/ live", "segments new/freed", "churn", "OOMs", "conf"
    ));
    for row in &c.rows {
        let conf = if row.conf.is_empty() {
            "(defaults)"
        } else {
            &row.conf
        };
        match (&row.report, &row.error) {
            (Some(r), _) => out.push_str(&format!(
                "{:<30} {:>13} {:>9.4} {:>18} {:>7.2} {:>6}  {conf}\n",
                row.name,
                bytes(r.peak_reserved_bytes),
                r.ratio,
                format!("{} / {}", r.segments_created, r.segments_released),
                r.churn,
                r.num_ooms,
            )),
            (None, error) => {
                let reason = error.as_deref().unwrap_or("");
                let short: String = reason.chars().take(90).collect();
                let more = if short.len() < reason.len() {
                    "..."
                } else {
                    ""
                };
                out.push_str(&format!(
                    "{:<30} not run: {short}{more}  {conf}\n",
                    row.name
                ));
            }
        }
    }
    out
}
