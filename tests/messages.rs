//! Error messages read as English (issue 15, F9).

use wgpool::config::Config;
use wgpool::engine::{AllocError, Engine, EngineLimits, VirtualSegments};

#[test]
fn out_of_memory_names_the_pool_once() {
    let config = Config::parse("policy:pytorch,memory_limit_mb:30").unwrap();
    let mut engine = Engine::new(config, EngineLimits::unlimited()).unwrap();
    let mut device = VirtualSegments::unlimited();
    let error = engine.allocate(40 << 20, 0, &mut device).unwrap_err();
    assert!(matches!(error, AllocError::OutOfMemory(_)), "{error}");
    let text = error.to_string();
    assert!(text.contains("in the large pool)"), "{text}");
    assert!(!text.contains("pool pool"), "{text}");
}
