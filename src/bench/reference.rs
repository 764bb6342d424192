//! Fresh random inputs for each kernel and the CPU check of its result.
//!
//! All data is held as 32-bit words (`Vec<u32>`), viewed as f32 or pairs of f16 as the
//! kernel needs. Generation and checking run on all CPU cores, so 1 GiB operands are
//! affordable.

use std::ops::Range;

use crate::kernels::{Dtype, Kernel, checksum, pattern_word};

use super::half::{f16_bits_from_f32, f32_from_f16_bits};
use super::mismatch_error::MismatchError;
use crate::rng::SplitMix64;

/// The scalar of scale and triad (STREAM's 3.0; exact in f16).
pub const SCALAR: f32 = 3.0;
/// The word fill writes (the bits of 1.5f32).
pub const FILL_WORD: u32 = 0x3fc0_0000;
/// The seed fill_pattern uses.
pub const PATTERN_SEED: u32 = 0x5eed;
/// How many words compare's second operand differs in.
pub const COMPARE_MISMATCHES: u64 = 7;

/// Relative tolerance of f32 arithmetic (two roundings: a fused or unfused multiply-add).
const F32_TOLERANCE: f32 = 2.0 * f32::EPSILON;
/// Relative tolerance of f16 arithmetic (two roundings of an 11-bit significand).
const F16_TOLERANCE: f32 = 2.0 / 1024.0;

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Splits `0..len` into one range per thread (at least 1 M words each).
fn chunks(len: usize) -> Vec<Range<usize>> {
    let per = len.div_ceil(threads()).max(1 << 20);
    (0..len)
        .step_by(per)
        .map(|s| s..(s + per).min(len))
        .collect()
}

/// `words` random words for an operand of `dtype`: f32 in [-1, 1), f16 pairs in [-1, 1]
/// or any bits for u32. Deterministic for a seed.
pub fn random_words(dtype: Dtype, words: usize, seed: u64) -> Vec<u32> {
    let mut out = vec![0u32; words];
    let ranges = chunks(words);
    std::thread::scope(|scope| {
        let mut rest = out.as_mut_slice();
        for (index, range) in ranges.iter().enumerate() {
            let (mine, tail) = rest.split_at_mut(range.len());
            rest = tail;
            scope.spawn(move || {
                let mut rng =
                    SplitMix64::new(seed ^ (index as u64).wrapping_mul(0xa076_1d64_78bd_642f));
                for word in mine {
                    *word = match dtype {
                        Dtype::F32 => rng.next_unit_f32().to_bits(),
                        Dtype::F16 => {
                            let low = f16_bits_from_f32(rng.next_unit_f32());
                            let high = f16_bits_from_f32(rng.next_unit_f32());
                            u32::from(low) | (u32::from(high) << 16)
                        }
                        Dtype::U32 => rng.next_u64() as u32,
                    };
                }
            });
        }
    });
    out
}

/// The inputs of one verification run of `kernel` on operands of `words` words.
pub fn inputs(kernel: Kernel, words: usize, seed: u64) -> Vec<Vec<u32>> {
    let count = kernel.input_names().len();
    let mut inputs: Vec<Vec<u32>> = (0..count)
        .map(|i| random_words(kernel.dtype(), words, seed.wrapping_add(i as u64 + 1)))
        .collect();
    if kernel == Kernel::Compare {
        // y = x with a known number of words changed, spread over the operand.
        let mut y = inputs[0].clone();
        let changes = (COMPARE_MISMATCHES as usize).min(words);
        for k in 0..changes {
            let index = if changes > 1 {
                k * (words - 1) / (changes - 1)
            } else {
                0
            };
            y[index] ^= 1 << (k % 32);
        }
        inputs[1] = y;
    }
    inputs
}

/// Checks a kernel's output words (or reduction result) against the CPU reference for
/// `inputs`.
///
/// # Errors
///
/// [`MismatchError`]: the first difference.
pub fn check(
    kernel: Kernel,
    inputs: &[Vec<u32>],
    output: Option<&[u32]>,
    result: Option<u32>,
    words: usize,
) -> Result<(), MismatchError> {
    match kernel {
        Kernel::Checksum => {
            let want = checksum(&inputs[0], 0);
            let got = result.ok_or(MismatchError::NoResult)?;
            return if got == want {
                Ok(())
            } else {
                Err(MismatchError::Checksum { got, want })
            };
        }
        Kernel::Compare => {
            let want = (COMPARE_MISMATCHES as usize).min(words) as u32;
            let got = result.ok_or(MismatchError::NoResult)?;
            return if got == want {
                Ok(())
            } else {
                Err(MismatchError::Compare { got, want })
            };
        }
        _ => {}
    }
    let output = output.ok_or(MismatchError::NoOutput)?;
    if output.len() != words {
        return Err(MismatchError::Length {
            got: output.len(),
            expected: words,
        });
    }
    let failures: Vec<Option<(usize, String)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks(words)
            .into_iter()
            .map(|range| scope.spawn(move || check_range(kernel, inputs, output, range)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("checker thread"))
            .collect()
    });
    match failures.into_iter().flatten().min_by_key(|(i, _)| *i) {
        None => Ok(()),
        Some((word, detail)) => Err(MismatchError::Word { word, detail }),
    }
}

/// The first wrong word in `range`, as `(word index, description)`.
fn check_range(
    kernel: Kernel,
    inputs: &[Vec<u32>],
    output: &[u32],
    range: Range<usize>,
) -> Option<(usize, String)> {
    let f = |word: u32| f32::from_bits(word);
    let close = |got: f32, want: f32, magnitude: f32, tolerance: f32| {
        (got - want).abs() <= tolerance * magnitude.max(f32::MIN_POSITIVE)
    };
    for i in range {
        let got = output[i];
        let wrong = match kernel {
            Kernel::CopyF32 | Kernel::CopyF16 | Kernel::Move => (got != inputs[0][i])
                .then(|| format!("word {i} is {got:#010x}, source has {:#010x}", inputs[0][i])),
            Kernel::Fill => (got != FILL_WORD)
                .then(|| format!("word {i} is {got:#010x}, fill value {FILL_WORD:#010x}")),
            Kernel::FillPattern => {
                let want = pattern_word(PATTERN_SEED, i as u32);
                (got != want).then(|| format!("word {i} is {got:#010x}, pattern {want:#010x}"))
            }
            Kernel::ScaleF32 => {
                let want = SCALAR * f(inputs[0][i]);
                (!close(f(got), want, want.abs(), F32_TOLERANCE))
                    .then(|| format!("element {i} is {}, reference {want}", f(got)))
            }
            Kernel::AddF32 => {
                let (a, b) = (f(inputs[0][i]), f(inputs[1][i]));
                (!close(f(got), a + b, a.abs() + b.abs(), F32_TOLERANCE))
                    .then(|| format!("element {i} is {}, reference {}", f(got), a + b))
            }
            Kernel::TriadF32 => {
                let (b, c) = (f(inputs[0][i]), f(inputs[1][i]));
                let want = b + SCALAR * c;
                (!close(f(got), want, b.abs() + (SCALAR * c).abs(), F32_TOLERANCE))
                    .then(|| format!("element {i} is {}, reference {want}", f(got)))
            }
            Kernel::TriadF16 => (0..2).find_map(|half| {
                let pick = |word: u32| f32_from_f16_bits((word >> (16 * half)) as u16);
                let (b, c, g) = (pick(inputs[0][i]), pick(inputs[1][i]), pick(got));
                let want = b + SCALAR * c;
                // Plus one f16 subnormal step for results near zero.
                let slack = F16_TOLERANCE * (b.abs() + (SCALAR * c).abs()) + 6.0e-8;
                ((g - want).abs() > slack)
                    .then(|| format!("f16 element {} is {g}, reference {want}", 2 * i + half))
            }),
            Kernel::Checksum | Kernel::Compare => None,
        };
        if let Some(detail) = wrong {
            return Some((i, detail));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORDS: usize = 1000;

    fn reference_output(kernel: Kernel, inputs: &[Vec<u32>]) -> Vec<u32> {
        let f = |w: u32| f32::from_bits(w);
        (0..WORDS)
            .map(|i| match kernel {
                Kernel::CopyF32 | Kernel::CopyF16 | Kernel::Move => inputs[0][i],
                Kernel::ScaleF32 => (SCALAR * f(inputs[0][i])).to_bits(),
                Kernel::AddF32 => (f(inputs[0][i]) + f(inputs[1][i])).to_bits(),
                Kernel::TriadF32 => (f(inputs[0][i]) + SCALAR * f(inputs[1][i])).to_bits(),
                Kernel::TriadF16 => {
                    let half = |word: u32, h: u32| {
                        let b = f32_from_f16_bits((inputs[0][i] >> (16 * h)) as u16);
                        let c = f32_from_f16_bits((word >> (16 * h)) as u16);
                        u32::from(f16_bits_from_f32(b + SCALAR * c)) << (16 * h)
                    };
                    half(inputs[1][i], 0) | half(inputs[1][i], 1)
                }
                Kernel::Fill => FILL_WORD,
                Kernel::FillPattern => pattern_word(PATTERN_SEED, i as u32),
                Kernel::Checksum | Kernel::Compare => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn correct_outputs_pass_and_one_wrong_word_fails_naming_its_index() {
        for kernel in Kernel::ALL {
            let inputs = inputs(kernel, WORDS, 7);
            assert_eq!(inputs.len(), kernel.input_names().len());
            if kernel.has_result() {
                let good = if kernel == Kernel::Checksum {
                    checksum(&inputs[0], 0)
                } else {
                    COMPARE_MISMATCHES as u32
                };
                assert_eq!(
                    check(kernel, &inputs, None, Some(good), WORDS),
                    Ok(()),
                    "{kernel:?}"
                );
                assert!(
                    check(kernel, &inputs, None, Some(good + 1), WORDS).is_err(),
                    "{kernel:?}"
                );
                continue;
            }
            let mut output = reference_output(kernel, &inputs);
            assert_eq!(
                check(kernel, &inputs, Some(&output), None, WORDS),
                Ok(()),
                "{kernel:?}"
            );
            output[613] ^= 0x0040_0000; // a large change to the significand or a bit flip
            let err = check(kernel, &inputs, Some(&output), None, WORDS)
                .expect_err("wrong word")
                .to_string();
            assert!(
                err.contains("613") || err.contains("1226") || err.contains("1227"),
                "{kernel:?}: {err}"
            );
            assert!(
                check(kernel, &inputs, Some(&output[1..]), None, WORDS).is_err(),
                "short output"
            );
        }
    }

    #[test]
    fn compare_inputs_differ_in_exactly_the_announced_number_of_words() {
        let inputs = inputs(Kernel::Compare, WORDS, 3);
        let differing = inputs[0]
            .iter()
            .zip(&inputs[1])
            .filter(|(x, y)| x != y)
            .count();
        assert_eq!(differing as u64, COMPARE_MISMATCHES);
    }

    #[test]
    fn random_words_are_deterministic_and_in_range() {
        assert_eq!(
            random_words(Dtype::F32, 100, 1),
            random_words(Dtype::F32, 100, 1)
        );
        assert_ne!(
            random_words(Dtype::F32, 100, 1),
            random_words(Dtype::F32, 100, 2)
        );
        assert!(
            random_words(Dtype::F32, 10_000, 5)
                .iter()
                .all(|&w| (-1.0..1.0).contains(&f32::from_bits(w)))
        );
        assert!(random_words(Dtype::F16, 10_000, 5).iter().all(|&w| {
            [w as u16, (w >> 16) as u16]
                .iter()
                // Rounding to f16 can reach 1.0 itself.
                .all(|&h| (-1.0..=1.0).contains(&f32_from_f16_bits(h)))
        }));
    }
}
