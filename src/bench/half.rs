//! IEEE 754 binary16 conversions (stable Rust has no `f16`), for f16 kernel data and
//! references.

/// Converts an `f32` to the nearest binary16 value (round to nearest, ties to even),
/// returned as its bits. Overflow gives infinity; NaN stays NaN.
///
/// ```
/// use wgpool::bench::half::{f16_bits_from_f32, f32_from_f16_bits};
/// assert_eq!(f16_bits_from_f32(1.0), 0x3c00);
/// assert_eq!(f16_bits_from_f32(-2.5), 0xc100);
/// assert_eq!(f16_bits_from_f32(65520.0), 0x7c00); // rounds up to infinity
/// assert_eq!(f32_from_f16_bits(f16_bits_from_f32(0.333)), 0.33300781);
/// assert_eq!(f32_from_f16_bits(0x0001), 5.9604645e-8); // smallest subnormal
/// ```
pub fn f16_bits_from_f32(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exponent = ((bits >> 23) & 0xff) as i32;
    let mantissa = bits & 0x007f_ffff;
    if exponent == 0xff {
        let nan = if mantissa != 0 { 0x0200 } else { 0 };
        return sign | 0x7c00 | nan;
    }
    let half_exponent = exponent - 127 + 15;
    if half_exponent >= 0x1f {
        return sign | 0x7c00;
    }
    if half_exponent <= 0 {
        // Subnormal or zero: shift the mantissa (with its implicit 1) into place.
        if half_exponent < -10 {
            return sign;
        }
        let full = mantissa | 0x0080_0000;
        let shift = (14 - half_exponent) as u32;
        let mut half = full >> shift;
        let remainder = full & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        if remainder > halfway || (remainder == halfway && half & 1 == 1) {
            half += 1;
        }
        return sign | half as u16;
    }
    let mut half = ((half_exponent as u32) << 10) | (mantissa >> 13);
    let remainder = mantissa & 0x1fff;
    if remainder > 0x1000 || (remainder == 0x1000 && half & 1 == 1) {
        half += 1; // may carry into the exponent, up to infinity: still correct
    }
    sign | half as u16
}

/// Converts binary16 bits to the `f32` of the same value (exact).
pub fn f32_from_f16_bits(bits: u16) -> f32 {
    let sign = u32::from(bits & 0x8000) << 16;
    let exponent = u32::from((bits >> 10) & 0x1f);
    let mantissa = u32::from(bits & 0x03ff);
    let out = match exponent {
        0 if mantissa == 0 => sign,
        0 => {
            // Subnormal: value = mantissa * 2^-24.
            let value = mantissa as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -value } else { value };
        }
        0x1f => sign | 0x7f80_0000 | (mantissa << 13),
        _ => sign | ((exponent + 127 - 15) << 23) | (mantissa << 13),
    };
    f32::from_bits(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_finite_f16_round_trips_through_f32() {
        for bits in 0..=u16::MAX {
            let exponent = (bits >> 10) & 0x1f;
            if exponent == 0x1f && bits & 0x3ff != 0 {
                assert!(f32_from_f16_bits(bits).is_nan());
                continue;
            }
            assert_eq!(
                f16_bits_from_f32(f32_from_f16_bits(bits)),
                bits,
                "{bits:#06x}"
            );
        }
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        let one = 1.0f32;
        let step = 1.0 / 1024.0; // f16 spacing just above 1
        assert_eq!(f16_bits_from_f32(one + step / 2.0), 0x3c00); // tie, to even (down)
        assert_eq!(f16_bits_from_f32(one + 1.5 * step), 0x3c02); // tie, to even (up)
        assert_eq!(f16_bits_from_f32(one + 0.6 * step), 0x3c01);
        assert_eq!(f16_bits_from_f32(1.0e-9), 0x0000);
        assert_eq!(f16_bits_from_f32(f32::NAN) & 0x7c00, 0x7c00);
    }
}
