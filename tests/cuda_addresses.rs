//! The CUDA driver's address choices, recorded on an H200 (driver 580, CUDA 13, PyTorch 2.11)
//! while PyTorch replayed oracle traces, against [`CudaAddressModel`].
//!
//! Each file in tests/data/cuda_addresses is one process's sequence of `cudaMalloc` (`malloc,
//! SIZE, ADDRESS`), `cudaFree` (`free, SIZE, ADDRESS`) and stream creations (`stream,,`),
//! taken from an oracle pair: `decode_kv.mixed_cap` releases chunks and reuses their space,
//! `random_borders.rp4` creates a second stream, `resnet50_bs_cycle.mixed_cap` creates and
//! releases 637 segments under garbage collection.

use std::collections::HashMap;

use wgpool::trace::CudaAddressModel;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cuda_addresses");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{DATA}/{name}.csv")).unwrap()
}

/// Replays the sequence `text` through the model; returns (addresses reproduced up to the
/// first one's offset, cudaMallocs).
fn reproduce(name: &str, text: &str) -> (usize, usize) {
    let mut driver = CudaAddressModel::new();
    let mut offset: Option<u64> = None;
    let mut ours_of: HashMap<u64, u64> = HashMap::new();
    let (mut same, mut mallocs) = (0, 0);
    for (n, line) in text.lines().enumerate().skip(1) {
        let fields: Vec<&str> = line.split(',').collect();
        let address = || fields[2].parse::<u64>().unwrap();
        match fields[0] {
            "malloc" => {
                let size: u64 = fields[1].parse().unwrap();
                let ours = driver.allocate(size).expect("address space left");
                let recorded = address();
                let offset = *offset.get_or_insert(recorded.wrapping_sub(ours));
                mallocs += 1;
                if ours.wrapping_add(offset) == recorded {
                    same += 1;
                }
                ours_of.insert(recorded, ours);
            }
            "free" => {
                let ours = ours_of.remove(&address()).expect("freed after its malloc");
                assert!(driver.free(ours), "{name} line {}: not live", n + 1);
            }
            "stream" => driver.create_stream(),
            other => panic!("{name} line {}: unknown event {other}", n + 1),
        }
    }
    assert_eq!(driver.live_allocations(), ours_of.len(), "{name}");
    (same, mallocs)
}

#[test]
fn every_recorded_address_is_reproduced() {
    for (name, mallocs) in [
        ("decode_kv.mixed_cap", 70),
        ("random_borders.rp4", 93),
        ("resnet50_bs_cycle.mixed_cap", 637),
    ] {
        assert_eq!(reproduce(name, &read(name)), (mallocs, mallocs), "{name}");
    }
}

/// Without the second stream's reservation, every segment created after it lands 32 MiB
/// away from the rest: the reservation is part of what the recording shows.
#[test]
fn the_second_stream_reserves_address_space() {
    let text = read("random_borders.rp4");
    let without: String = text
        .lines()
        .filter(|line| !line.starts_with("stream"))
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(without.len() < text.len());
    assert_eq!(reproduce("without the stream", &without), (1, 93));
}
