//! The README carries the option table exactly as the parser's table renders it, the test
//! command that CI runs, and the GL test script CI runs after it.

const README: &str = include_str!("../README.md");
const CI: &str = include_str!("../.ci/run");

fn between<'a>(text: &'a str, begin: &str, end: &str) -> &'a str {
    let start = text
        .find(begin)
        .unwrap_or_else(|| panic!("README lacks {begin}"))
        + begin.len();
    let stop = text[start..]
        .find(end)
        .unwrap_or_else(|| panic!("README lacks {end}"))
        + start;
    &text[start..stop]
}

#[test]
fn readme_option_table_is_the_parser_table() {
    let table = between(README, "<!-- options:begin -->\n", "<!-- options:end -->");
    assert_eq!(
        table,
        wgpool::config::options_markdown_table(),
        "README's option table is stale: replace it with the output of `wgpool options`"
    );
    for option in wgpool::config::OPTIONS {
        assert!(
            table.contains(&format!("`{}`", option.key)),
            "{} missing",
            option.key
        );
    }
}

#[test]
fn ci_runs_the_readme_test_command() {
    let command = CI
        .lines()
        .find(|line| !line.trim_start().starts_with('#') && line.contains("cargo test"))
        .expect(".ci/run runs cargo test")
        .trim();
    let quick_start = between(README, "## Quick start", "## Using the pool");
    let readme_commands: Vec<&str> = quick_start
        .lines()
        .filter(|l| l.starts_with("./scripts/"))
        .collect();
    assert_eq!(
        readme_commands.len(),
        2,
        "the quick start has two commands: {readme_commands:?}"
    );
    assert_eq!(
        readme_commands[1].trim(),
        command,
        "the README's second command is what CI runs"
    );
    assert!(
        readme_commands[0].contains("bench"),
        "the first command runs the benchmark"
    );
}

#[test]
fn ci_runs_the_gl_tests_the_readme_describes() {
    assert!(
        CI.lines().any(|line| line.trim() == "./scripts/test-gl"),
        ".ci/run runs scripts/test-gl"
    );
    let backends = between(README, "## Backends", "## Non-goals");
    for name in ["scripts/test-gl", "scripts/setup-gl", "scripts/gl-excluded"] {
        assert!(backends.contains(name), "the Backends section names {name}");
    }
}
