//! CPU definitions of the words `fill_pattern` writes and the sum `checksum` computes; the
//! shaders implement exactly these.

/// lowbias32 (Chris Wellons): a bijection on `u32` with good avalanche.
pub fn mix32(value: u32) -> u32 {
    let mut x = value;
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// The word `fill_pattern` writes at word `index` of an operand for `seed`. For a fixed seed
/// distinct indices give distinct words, so a block that landed in the wrong place, or at the
/// wrong offset, does not match.
///
/// ```
/// use wgpool::kernels::pattern_word;
/// assert_ne!(pattern_word(1, 0), pattern_word(1, 1));
/// assert_ne!(pattern_word(1, 0), pattern_word(2, 0));
/// ```
pub fn pattern_word(seed: u32, index: u32) -> u32 {
    mix32(index ^ mix32(seed ^ 0x9e37_79b9))
}

/// The checksum kernel's result for `words`, whose first word has index `first_index`
/// within its operand: the wrapping sum of `mix32(word ^ mix32(index))`. Position-dependent,
/// so swapped words change it.
pub fn checksum(words: &[u32], first_index: u32) -> u32 {
    words.iter().enumerate().fold(0u32, |sum, (i, &word)| {
        let index = first_index.wrapping_add(i as u32);
        sum.wrapping_add(mix32(word ^ mix32(index)))
    })
}
