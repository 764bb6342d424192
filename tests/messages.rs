//! Error messages read as English (issue 15, F9).

use wgpool::config::Config;
use wgpool::engine::{AllocError, Engine, EngineLimits, VirtualSegments};

#[test]
fn out_of_memory_names_the_segment_kind_once() {
    let config = Config::parse("policy:pytorch,memory_limit_mb:30").unwrap();
    let mut engine = Engine::new(config, EngineLimits::unlimited()).unwrap();
    let mut device = VirtualSegments::unlimited();
    let error = engine.allocate(40 << 20, 0, &mut device).unwrap_err();
    assert!(matches!(error, AllocError::OutOfMemory(_)), "{error}");
    let text = error.to_string();
    assert!(text.contains(" large segment)"), "{text}");
    assert!(!text.contains("pool pool"), "{text}");
}

/// Issue 24, item 7: `fn main() -> Result<(), PoolError>` prints the message, not a bare
/// variant name, and messages have no runs of spaces from unescaped line breaks.
#[test]
fn errors_debug_print_their_message() {
    use wgpool::pool::{BindingError, PoolError};
    let debug = format!("{:?}", PoolError::HostOverflowUnsupported);
    assert!(
        debug.starts_with("overflow:host serves blocks from host memory"),
        "{debug}"
    );
    let binding = format!("{:?}", BindingError::ForeignDevice { binding: 3 });
    assert!(binding.contains("binding 3 is a block of a pool on another device"));
    // An out-of-memory with held blocks and a segment that does not fit: every sentence.
    let config = Config::parse("policy:pytorch,memory_limit_mb:30").unwrap();
    let mut engine = Engine::new(config, EngineLimits::unlimited()).unwrap();
    let mut device = VirtualSegments::unlimited();
    let _kept = engine.allocate(15 << 20, 0, &mut device).unwrap();
    let AllocError::OutOfMemory(mut oom) = engine.allocate(5 << 20, 0, &mut device).unwrap_err()
    else {
        panic!("out of memory expected")
    };
    oom.held_for_submission = Some(1 << 20);
    let text = AllocError::OutOfMemory(oom).to_string();
    assert!(
        text.contains("waiting for their recorded commands"),
        "{text}"
    );
    assert!(
        text.contains("The segment size is what does not fit"),
        "{text}"
    );
    assert!(!text.contains("   "), "a run of spaces: {text}");
}

/// Counts read as English: one block, two blocks.
#[test]
fn counts_take_the_right_number() {
    use wgpool::format::count;
    assert_eq!(count(1, "block", "blocks"), "1 block");
    assert_eq!(count(0, "block", "blocks"), "0 blocks");
    assert_eq!(count(2, "request was", "requests were"), "2 requests were");
}
