//! Creating a wgpu instance through wgpool readies the pools' owner bias before wgpu starts
//! any thread (`create_instance` registers first, as `prepare_owner_bias` does). A binary of its own: nothing
//! else in it may register the process first.

use wgpool::gpu::{HeadlessOptions, create_instance};
use wgpool::pool::{owner_bias_prepared, prepare_owner_bias};

#[test]
fn creating_an_instance_readies_the_owner_bias_first() {
    assert!(!owner_bias_prepared(), "nothing has asked yet");
    let instance = create_instance(&HeadlessOptions::default()).expect("an instance");
    assert!(owner_bias_prepared());
    // Asking again gives the answer the first call found.
    let available = prepare_owner_bias();
    assert_eq!(prepare_owner_bias(), available);
    drop(instance);
}
