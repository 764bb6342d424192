//! The policy, and the options that decide how requests are rounded and blocks split:
//! `policy`, `max_split_size_mb`, `max_non_split_rounding_mb`, `roundup_power2_divisions`,
//! `roundup_bypass_threshold_mb`.

use super::*;

// ---------------------------------------------------------------------------------------
// policy
// ---------------------------------------------------------------------------------------

#[test]
fn policy_selects_pytorch_or_compact() {
    assert_eq!(
        Config::parse("policy:pytorch").unwrap().policy,
        Policy::Pytorch
    );
    assert_eq!(
        Config::parse("policy:compact").unwrap().policy,
        Policy::Compact
    );
    assert_eq!(Config::default().policy, Policy::Compact);
    let (key, value, _, _) = invalid_value("policy:jemalloc");
    assert_eq!((key.as_str(), value.as_str()), ("policy", "jemalloc"));

    for (conf, name) in [("policy:pytorch", "pytorch"), ("policy:compact", "compact")] {
        let pool = CheckedEngine::new(conf);
        assert_eq!(pool.engine.config().policy.name(), name);
        assert!(
            pool.engine
                .memory_summary()
                .contains(&format!("policy:{name}")),
            "the summary names the policy"
        );
    }

    // Requests that each outgrow every cached block: PyTorch keeps every freed segment
    // cached (reserved is the sum), and compact, whose point is keeping reserved memory
    // close to live memory, never does worse.
    let run = |conf: &str| {
        let mut pool = CheckedEngine::new(conf);
        for mb in [100, 200, 300] {
            let a = pool.alloc(mb * MIB);
            pool.free(a);
        }
        pool.stats()
    };
    let pytorch = run("policy:pytorch");
    assert_eq!(pytorch.reserved_bytes.all.current, 600 * MIB);
    assert_eq!(pytorch.num_device_alloc, 3);
    assert_eq!(pytorch.num_device_free, 0);
    let compact = run("policy:compact");
    assert!(
        compact.reserved_bytes.all.peak <= pytorch.reserved_bytes.all.peak,
        "compact peaks at {} reserved, PyTorch at {}",
        compact.reserved_bytes.all.peak,
        pytorch.reserved_bytes.all.peak
    );
}

/// PyTorch's best fit: the smallest free block of the stream that fits, lowest address
/// first among equals; another stream's blocks are never used.
#[test]
fn pytorch_policy_is_best_fit_per_stream() {
    let mut pool = CheckedEngine::new("policy:pytorch");
    let big = pool.alloc(12 * MIB); // a 12 MiB segment
    let small = pool.alloc(11 * MIB); // a 12 MiB segment too (rounded to 2 MiB)
    let other = pool.alloc_on(11 * MIB, 1);
    assert_eq!(pool.stats().num_device_alloc, 3);
    let small_segment = small.segment;
    pool.free(big);
    pool.free(small);
    pool.free(other);
    // Both stream-0 blocks are 12 MiB: the first-created (lower address) wins.
    let a = pool.alloc(11 * MIB);
    assert_eq!((a.segment, a.offset), (big.segment, 0));
    let b = pool.alloc(11 * MIB);
    assert_eq!((b.segment, b.offset), (small_segment, 0));
    // Stream 0 has nothing left; the free stream-1 block is not taken.
    let c = pool.alloc(11 * MIB);
    assert_ne!(c.segment, other.segment);
    assert_eq!(pool.stats().num_device_alloc, 4);
}

// ---------------------------------------------------------------------------------------
// max_split_size_mb
// ---------------------------------------------------------------------------------------

#[test]
fn max_split_size_keeps_large_cached_blocks_whole() {
    // Without it: a freed 40 MiB block is split for a 2 MiB request.
    let mut pool = CheckedEngine::new("policy:pytorch");
    let big = pool.alloc(40 * MIB);
    pool.free(big);
    let a = pool.alloc(2 * MIB);
    assert_eq!(
        (a.segment, a.offset, a.block_size),
        (big.segment, 0, 2 * MIB)
    );
    assert_eq!(pool.stats().num_device_alloc, 1);
    assert_eq!(pool.stats().oversize_segments.current, 0);

    // With max_split_size_mb:20 the 40 MiB block is oversize: it is counted, never split,
    // and a 2 MiB request gets a new 20 MiB segment instead.
    let mut pool = CheckedEngine::new("policy:pytorch,max_split_size_mb:20");
    let big = pool.alloc(40 * MIB);
    assert_eq!(big.block_size, 40 * MIB);
    let stats = pool.stats();
    assert_eq!(stats.oversize_allocations.current, 1);
    assert_eq!(stats.oversize_segments.current, 1);
    pool.free(big);
    assert_eq!(pool.stats().oversize_allocations.current, 0);
    assert_eq!(pool.stats().oversize_segments.current, 1);
    let a = pool.alloc(2 * MIB);
    assert_ne!(a.segment, big.segment);
    assert_eq!(pool.segment_size(a.segment), 20 * MIB);
    let stats = pool.stats();
    assert_eq!(stats.num_device_alloc, 2);
    // The new 20 MiB segment is itself at max_split_size, so it counts as oversize too.
    assert_eq!(stats.oversize_segments.current, 2);
    assert_eq!(stats.oversize_allocations.current, 0);

    // A request at or above max_split_size takes the cached block whole (40 < 30 + 20).
    let b = pool.alloc(30 * MIB);
    assert_eq!(
        (b.segment, b.offset, b.block_size),
        (big.segment, 0, 40 * MIB)
    );
    assert_eq!(pool.stats().oversize_allocations.current, 1);
    assert_eq!(pool.stats().num_device_alloc, 2);
}

/// Under a cap, a miss with max_split_size set first releases one cached oversize block
/// that covers the request, rather than everything (PyTorch's
/// `release_available_cached_blocks`).
#[test]
fn max_split_size_releases_one_oversize_block_before_everything() {
    let scenario = |conf: &str| {
        let mut pool = CheckedEngine::new(conf);
        let x = pool.alloc(150 * MIB);
        let y = pool.alloc(60 * MIB);
        pool.free(x);
        pool.free(y);
        let z = pool.alloc(120 * MIB);
        (pool, x, y, z)
    };
    // 210 MiB cached. The 150 MiB block is 30 MiB larger than the 120 MiB request, more
    // than max_non_split_rounding allows, so the request misses; a new segment would go
    // over the 250 MiB cap, so the covering 150 MiB block is released and nothing else.
    let (mut pool, _, y, z) = scenario("policy:pytorch,max_split_size_mb:20,memory_limit_mb:250");
    assert_eq!(pool.segment_size(z.segment), 120 * MIB);
    let stats = pool.stats();
    assert_eq!(stats.num_device_free, 1);
    assert_eq!(stats.num_alloc_retries, 0);
    assert_eq!(stats.reserved_bytes.all.current, 180 * MIB);
    let w = pool.alloc(60 * MIB);
    assert_eq!((w.segment, w.offset), (y.segment, 0));

    // Without max_split_size the 150 MiB block is simply split.
    let (pool, x, _, z) = scenario("policy:pytorch,memory_limit_mb:250");
    assert_eq!(
        (z.segment, z.offset, z.block_size),
        (x.segment, 0, 120 * MIB)
    );
    assert_eq!(pool.stats().num_device_free, 0);
    assert_eq!(pool.reserved(), 210 * MIB);
}

/// The option's meaning in the table is policy-independent ("cached blocks this large or
/// larger are never split").
#[test]
fn default_policy_also_keeps_large_cached_blocks_whole() {
    let mut pool = CheckedEngine::new("max_split_size_mb:20");
    let big = pool.alloc(40 * MIB);
    pool.free(big);
    let a = pool.alloc(2 * MIB);
    assert_eq!(
        pool.segment_size(a.segment),
        20 * MIB,
        "the oversize cached block was split: {a:?}"
    );
    let mut pool = CheckedEngine::new("max_split_size_mb:20,max_non_split_rounding_mb:5");
    let cached = pool.alloc(110 * MIB);
    pool.free(cached);
    let a = pool.alloc(100 * MIB);
    assert_eq!(
        a.block_size,
        100 * MIB,
        "110 MiB is not within 5 MiB of 100 MiB: {a:?}"
    );
}

// ---------------------------------------------------------------------------------------
// max_non_split_rounding_mb
// ---------------------------------------------------------------------------------------

#[test]
fn max_non_split_rounding_limits_how_much_larger_a_whole_block_may_be() {
    // A cached 110 MiB oversize block and a 100 MiB request: taken whole only when
    // 110 MiB < 100 MiB + max_non_split_rounding.
    for (extra, taken) in [
        ("", true),
        (",max_non_split_rounding_mb:11", true),
        (",max_non_split_rounding_mb:10", false),
        (",max_non_split_rounding_mb:5", false),
    ] {
        let conf = format!("policy:pytorch,max_split_size_mb:20{extra}");
        let mut pool = CheckedEngine::new(&conf);
        let cached = pool.alloc(110 * MIB);
        pool.free(cached);
        let a = pool.alloc(100 * MIB);
        if taken {
            assert_eq!(
                (a.segment, a.block_size),
                (cached.segment, 110 * MIB),
                "`{conf}`"
            );
            assert_eq!(pool.stats().num_device_alloc, 1, "`{conf}`");
        } else {
            assert_ne!(a.segment, cached.segment, "`{conf}`");
            assert_eq!(a.block_size, 100 * MIB, "`{conf}`");
            assert_eq!(pool.segment_size(a.segment), 100 * MIB, "`{conf}`");
            assert_eq!(pool.stats().num_device_alloc, 2, "`{conf}`");
        }
    }
    // Without max_split_size the block is not oversize and is split instead.
    let mut pool = CheckedEngine::new("policy:pytorch,max_non_split_rounding_mb:5");
    let cached = pool.alloc(110 * MIB);
    pool.free(cached);
    let a = pool.alloc(100 * MIB);
    assert_eq!((a.segment, a.block_size), (cached.segment, 100 * MIB));
}

// ---------------------------------------------------------------------------------------
// roundup_power2_divisions
// ---------------------------------------------------------------------------------------

#[test]
fn roundup_power2_divisions_rounds_to_equal_steps() {
    let sizes = |conf: &str, requests: &[u64]| -> Vec<u64> {
        let mut pool = CheckedEngine::new(conf);
        requests.iter().map(|&r| pool.alloc(r).block_size).collect()
    };
    let requests = [2500 * KIB, 1200, MIB, 5 * MIB + 1, 3 * MIB];
    assert_eq!(
        sizes("policy:pytorch", &requests),
        vec![2500 * KIB, 1536, MIB, 5 * MIB + 512, 3 * MIB]
    );
    // 4 divisions: 2500 KiB lies between 2 and 4 MiB, in steps of 512 KiB -> 2560 KiB.
    // 1200 B is below 512 B * 4, so only the 512 B rounding applies; powers of two stay.
    assert_eq!(
        sizes("policy:pytorch,roundup_power2_divisions:4", &requests),
        vec![2560 * KIB, 1536, MIB, 6 * MIB, 3 * MIB]
    );
    // 2 divisions: steps of 1 MiB between 2 and 4 MiB, 2 MiB between 4 and 8 MiB.
    assert_eq!(
        sizes("policy:pytorch,roundup_power2_divisions:2", &requests),
        vec![3 * MIB, 1536, MIB, 6 * MIB, 3 * MIB]
    );
    // The rounded size is what is allocated; the caller's size is what is requested.
    let mut pool = CheckedEngine::new("policy:pytorch,roundup_power2_divisions:4");
    pool.alloc(2500 * KIB);
    let stats = pool.stats();
    assert_eq!(stats.allocated_bytes.all.current, 2560 * KIB);
    assert_eq!(stats.requested_bytes.all.current, 2500 * KIB);
}

#[test]
fn roundup_power2_divisions_list_form_follows_pytorchs_parser() {
    // PyTorch 2.11 (checked on an H200): `K:N` covers [K, 2K) MiB, the first entry also
    // everything below it, `>:N` everything above the previous entry's interval.
    let conf = "policy:pytorch,roundup_power2_divisions:[256:1,512:2,>:8]";
    let mut pool = CheckedEngine::new(conf);
    let cases = [
        (100 * MIB + 1, 100 * MIB + 512), // below 256: the first entry, 1 division
        (300 * MIB + 1, 300 * MIB + 512), // [256, 512): 1 division, 512 B rounding only
        (510 * MIB + 1, 510 * MIB + 512),
        (512 * MIB, 512 * MIB),   // a power of two stays
        (513 * MIB, 768 * MIB),   // [512, 1024): 2 divisions of 256 MiB
        (800 * MIB, 1024 * MIB),  // still 2 divisions
        (1100 * MIB, 1152 * MIB), // from 1 GiB: 8 divisions of 128 MiB
    ];
    for (request, expected) in cases {
        let a = pool.alloc(request);
        assert_eq!(a.block_size, expected, "`{conf}`: {request} B");
        // A request of 10 MiB or more gets a segment of its rounded size.
        assert_eq!(
            pool.segment_size(a.segment),
            expected.div_ceil(2 * MIB) * 2 * MIB
        );
    }
    // Without `>`, sizes above the last entry's interval keep 512 B rounding.
    let mut pool = CheckedEngine::new("policy:pytorch,roundup_power2_divisions:[64:2]");
    assert_eq!(pool.alloc(40 * MIB).block_size, 48 * MIB);
    assert_eq!(pool.alloc(100 * MIB).block_size, 128 * MIB);
    assert_eq!(pool.alloc(1100 * MIB + 1).block_size, 1100 * MIB + 512);
}

// ---------------------------------------------------------------------------------------
// roundup_bypass_threshold_mb
// ---------------------------------------------------------------------------------------

#[test]
fn roundup_bypass_threshold_skips_division_rounding_above_it() {
    let sizes = |conf: &str| -> Vec<u64> {
        let mut pool = CheckedEngine::new(conf);
        [2500 * KIB, 1536 * KIB + 1, 2 * MIB + 1]
            .iter()
            .map(|&r| pool.alloc(r).block_size)
            .collect()
    };
    assert_eq!(
        sizes("policy:pytorch,roundup_power2_divisions:4"),
        vec![2560 * KIB, 1792 * KIB, 2560 * KIB]
    );
    // Above 2 MiB: 512 B rounding only. At or below it: the divisions still apply.
    assert_eq!(
        sizes("policy:pytorch,roundup_power2_divisions:4,roundup_bypass_threshold_mb:2"),
        vec![2500 * KIB, 1792 * KIB, 2 * MIB + 512]
    );
    // "Above" is strict: a request of exactly the threshold is still rounded.
    let mut pool = CheckedEngine::new(
        "policy:pytorch,roundup_power2_divisions:2,roundup_bypass_threshold_mb:5",
    );
    assert_eq!(pool.alloc(5 * MIB).block_size, 6 * MIB);
    assert_eq!(pool.alloc(5 * MIB + 1).block_size, 5 * MIB + 512);
    // Without divisions the threshold changes nothing.
    assert_eq!(
        sizes("policy:pytorch,roundup_bypass_threshold_mb:2"),
        vec![2500 * KIB, 1536 * KIB + 512, 2 * MIB + 512]
    );
}
