//! The engine's one use of `unsafe`: a CPU cache hint for block records.

use super::records::BlockRecord;

/// Asks the CPU to start loading `records[index]` (when it exists) into its cache, so that
/// a record read a few instructions later does not stall on memory.
///
/// Audit: the only `unsafe` in the engine. `_mm_prefetch` is a hint: it never faults, reads
/// no value into the program and writes nothing, whatever the address. The pointer passed
/// here is in any case to a live element of `records` (obtained by a bounds-checked `get`),
/// so even a stricter reading of the intrinsic's contract holds. On other architectures the
/// function does nothing.
#[inline(always)]
#[allow(unsafe_code)]
pub(super) fn preload_record(records: &[BlockRecord], index: u32) {
    #[cfg(target_arch = "x86_64")]
    if let Some(record) = records.get(index as usize) {
        // SAFETY: a prefetch only hints the cache (see the audit note above); the pointer is
        // to a live element of the slice.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                (record as *const BlockRecord).cast::<i8>(),
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (records, index);
}
