//! `wgpool bench --oversubscription` (issue 22's measured bars): every strategy the device
//! offers runs, its blocks keep their data, moves happen where the working set is over the
//! budget and not where the hot set fits, and a strategy the device cannot run is named with
//! the capability's reason.

mod common;

use wgpool::bench::BenchError;
use wgpool::bench::oversubscription::{OversubscriptionConfig, STREAM_FACTORS, Strategy, measure};

/// Blocks of 1 MiB under a budget of 4 MiB: the stream's working sets are 6 and 12 blocks.
const BLOCK: u64 = 1 << 20;
const BUDGET: u64 = 4 << 20;

fn wgpool(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_wgpool"))
        .args(args)
        .output()
        .expect("run wgpool")
}

#[test]
fn every_strategy_the_device_offers_runs_and_keeps_the_data() {
    let gpu = common::gpu();
    let caps = gpu.capabilities();
    let config = OversubscriptionConfig::new(BLOCK, BUDGET).with_passes(1, 1);
    let report = measure(gpu, &config).expect("the oversubscription benchmark runs");
    assert!(report.verified);
    assert!(report.prefetch_gbps > 0.0 && report.offload_gbps > 0.0);
    assert!(report.host_to_device_gbps > 0.0 && report.device_to_host_gbps > 0.0);

    let mut expected = vec![Strategy::OffloadPrefetch];
    let mut skipped = Vec::new();
    for (strategy, support) in [
        (Strategy::Residency, &caps.page_mapping),
        (Strategy::ResidencyDeclared, &caps.page_mapping),
        (Strategy::OverflowHost, &caps.host_overflow),
    ] {
        if support.is_available() {
            expected.push(strategy);
        } else {
            skipped.push((strategy, support.text().to_string()));
        }
    }
    let named: Vec<_> = report
        .skipped
        .iter()
        .map(|s| (s.strategy, s.reason.clone()))
        .collect();
    assert_eq!(
        named, skipped,
        "a strategy left out names the capability's reason"
    );

    // The stream: nothing over the budget first, then every strategy at 1.5x and 3x.
    let first = &report.stream[0];
    assert_eq!(first.strategy, Strategy::InBudget);
    assert!(first.working_set_bytes <= BUDGET);
    assert_eq!(first.to_device_gbps + first.to_host_gbps, 0.0);
    assert_eq!(
        report.stream.len(),
        1 + STREAM_FACTORS.len() * expected.len()
    );
    for factor in STREAM_FACTORS {
        for strategy in &expected {
            let row = report
                .stream
                .iter()
                .find(|r| r.strategy == *strategy && r.working_set_over_budget == factor)
                .unwrap_or_else(|| panic!("no stream row for {strategy:?} at {factor}x"));
            assert!(row.working_set_bytes as f64 >= factor * BUDGET as f64);
            assert!(row.effective_gbps > 0.0);
            match strategy {
                // Every block is touched once a pass and the set is over the budget: blocks
                // go out and come back every pass.
                Strategy::Residency | Strategy::OffloadPrefetch => {
                    assert!(
                        row.to_device_gbps > 0.0 && row.to_host_gbps > 0.0,
                        "{row:?}"
                    );
                }
                // Sources are read-only (their kept copies are current) and outputs are
                // discarded before they are written: a pass copies each source in and each
                // output out, half the working set each way.
                Strategy::ResidencyDeclared => {
                    // One timed pass: the rates times its seconds are its bytes.
                    let moved = |gbps: f64| gbps * 1e9 * row.pass_seconds;
                    let half = row.working_set_bytes as f64 / 2.0;
                    for (way, gbps) in [("in", row.to_device_gbps), ("out", row.to_host_gbps)] {
                        let bytes = moved(gbps);
                        assert!(
                            bytes > 0.0 && bytes <= half * 1.001,
                            "{way}: {bytes} bytes moved, half the set is {half}: {row:?}"
                        );
                    }
                }
                // Blocks past the cap are used in host memory, never moved.
                _ => assert_eq!(row.to_device_gbps + row.to_host_gbps, 0.0, "{row:?}"),
            }
        }
    }

    // The hot set fits the budget: once it is on the device, nothing moves.
    assert_eq!(report.hot_set[0].strategy, Strategy::InBudget);
    assert_eq!(report.hot_set[0].over_in_budget, 1.0);
    assert_eq!(report.hot_set.len(), 1 + expected.len());
    for row in &report.hot_set {
        assert!(expected.contains(&row.strategy) || row.strategy == Strategy::InBudget);
        assert_eq!(row.moved_bytes, 0, "{row:?}");
        assert!(row.over_in_budget > 0.0);
    }
    assert!(report.hot_bytes <= BUDGET && report.cold_bytes >= BUDGET);
}

#[test]
fn a_budget_under_four_blocks_is_a_configuration_error() {
    let gpu = common::gpu();
    let config = OversubscriptionConfig::new(BLOCK, 3 * BLOCK);
    match measure(gpu, &config) {
        Err(BenchError::Config(message)) => assert!(message.contains("four blocks"), "{message}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    let config = OversubscriptionConfig::new(BLOCK + 2, BUDGET);
    assert!(matches!(measure(gpu, &config), Err(BenchError::Config(_))));
}

#[test]
fn cli_prints_the_oversubscription_object_and_rejects_a_small_budget() {
    let _ = common::gpu();
    let out = wgpool(&[
        "bench",
        "--quick",
        "--size-mb",
        "1",
        "--kernels",
        "copy_f32",
        "--oversubscription",
        "--budget-mb",
        "4",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let o = &json["oversubscription"];
    assert_eq!(o["block_bytes"], BLOCK);
    assert_eq!(o["budget_bytes"], BUDGET);
    assert_eq!(o["verified"], true);
    for field in [
        "host_to_device_gbps",
        "device_to_host_gbps",
        "prefetch_gbps",
        "offload_gbps",
        "hot_bytes",
        "cold_bytes",
    ] {
        assert!(o[field].is_number(), "{field}: {o}");
    }
    let row = &o["stream"][0];
    for field in [
        "strategy",
        "working_set_over_budget",
        "blocks",
        "working_set_bytes",
        "pass_seconds",
        "effective_gbps",
        "over_host_to_device",
        "to_device_gbps",
        "to_host_gbps",
    ] {
        assert!(!row[field].is_null(), "{field}: {row}");
    }
    assert_eq!(row["strategy"], "in_budget");
    let hot = &o["hot_set"][0];
    for field in [
        "strategy",
        "pass_seconds",
        "effective_gbps",
        "over_in_budget",
        "moved_bytes",
    ] {
        assert!(!hot[field].is_null(), "{field}: {hot}");
    }
    assert!(o["skipped"].is_array());

    let out = wgpool(&[
        "bench",
        "--quick",
        "--size-mb",
        "1",
        "--kernels",
        "copy_f32",
        "--oversubscription",
        "--budget-mb",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("four blocks"), "{stderr}");
}
