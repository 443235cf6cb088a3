//! A direction's limit as tbf parameters, computed as the reference
//! computes them, so that either plugin's CHECK accepts the other's
//! qdiscs:
//!
//! - rate: bits/s ÷ 8, in bytes per second;
//! - bucket: burst bits ÷ 8 in bytes, given to the kernel as the time the
//!   rate takes to fill it, in ticks of its clock ([`PschedClock`]);
//! - queue limit: what arrives at the rate within 25 ms, plus the bucket.
//!
//! The reference does this in float64 and converts to uint32 as Go does
//! on amd64: through a 64-bit integer whose low 32 bits are kept. A
//! large burst at a low rate (more than about 4.3 s of traffic) thereby
//! wraps around instead of saturating; the kernel takes the wrapped value.
//! [`go_uint32`] does the same, on purpose: a node moving between the two
//! plugins keeps passing CHECK.

use libcni::netlink::tc::{PschedClock, Tbf};

use crate::config::Limit;

/// The queue holds this much traffic at the configured rate.
const LATENCY_MILLIS: f64 = 25.0;
/// `TIME_UNITS_PER_SEC`: the reference's times are in microseconds.
const USEC_PER_SEC: f64 = 1_000_000.0;

/// Go's `uint32(f)` for a float64 on amd64: truncated toward zero to a
/// 64-bit integer, then its low 32 bits. Where no 64-bit integer holds the
/// value (infinity from a rate below 8 bit/s, which is 0 bytes/s), amd64
/// gives the "integer indefinite" 0x8000_0000_0000_0000, whose low bits
/// are 0.
pub fn go_uint32(value: f64) -> u32 {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    // NaN is in no range, so it takes this branch too.
    if !(-TWO_POW_63..TWO_POW_63).contains(&value) {
        return 0;
    }
    (value as i64) as u32
}

/// The tbf qdisc that enforces `limit`.
pub fn tbf(limit: Limit, clock: PschedClock) -> Tbf {
    let rate = limit.rate / 8;
    // Validated: burst ÷ 8 < 2³² - 1.
    let burst = u32::try_from(limit.burst / 8).unwrap_or(u32::MAX);
    Tbf {
        rate,
        limit: queue_limit(rate, burst),
        buffer: buffer(rate, burst, clock),
    }
}

/// The bucket as ticks: `time2Tick(uint32(burst × 10⁶ ÷ rate))`.
fn buffer(rate: u64, burst: u32, clock: PschedClock) -> u32 {
    let usec = go_uint32(f64::from(burst) * USEC_PER_SEC / rate as f64);
    go_uint32(f64::from(usec) * clock.ticks_per_usec)
}

/// `uint32(rate × latency ÷ 10⁶) + burst`, wrapping as Go's uint32 sum.
fn queue_limit(rate: u64, burst: u32) -> u32 {
    let latency_usec = USEC_PER_SEC * (LATENCY_MILLIS / 1000.0);
    go_uint32(rate as f64 * latency_usec / USEC_PER_SEC).wrapping_add(burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's `/proc/net/psched`: 15.625 ticks per µs.
    const CLOCK: PschedClock = PschedClock {
        ticks_per_usec: 15.625,
    };

    fn tbf_of(rate: u64, burst: u64) -> Tbf {
        tbf(Limit { rate, burst }, CLOCK)
    }

    /// The reference's test vectors (rate and limit) and their buffers.
    #[test]
    fn reference_vectors() {
        let t = tbf_of(8, 8);
        assert_eq!((t.rate, t.limit), (1, 1));
        assert_eq!(t.buffer, 15_625_000);
        let t = tbf_of(16, 8);
        assert_eq!((t.rate, t.limit), (2, 1));
        let t = tbf_of(8000, 80);
        assert_eq!((t.rate, t.limit), (1000, 35));
        assert_eq!(t.buffer, 156_250);
    }

    /// What the reference put in the kernel on this machine (read back
    /// with `tc -raw`): 1 Mbit/s with a 2³¹-bit burst wraps the buffer.
    #[test]
    fn overflowing_buffer_wraps_as_the_reference() {
        let t = tbf_of(1_000_000, 2_147_483_647);
        assert_eq!(t.rate, 125_000);
        assert_eq!(t.buffer, 0xcfff_ff83);
        assert_eq!(t.limit, 268_438_580);
        let t = tbf_of(1_000_000, 21_474_836);
        assert_eq!(t.buffer, 0x13ff_ffba);
        assert_eq!(t.limit, 2_687_479);
    }

    /// A rate below one byte per second (refused by validation before it
    /// gets here): no panic, the reference's values.
    #[test]
    fn sub_byte_rates_do_not_panic() {
        let t = tbf_of(7, 8);
        assert_eq!((t.rate, t.limit, t.buffer), (0, 1, 0));
    }

    #[test]
    fn go_conversion_keeps_the_low_bits() {
        assert_eq!(go_uint32(4_294_967_296.0 + 5.7), 5);
        assert_eq!(go_uint32(33_554_431_875.0), 3_489_660_803);
        assert_eq!(go_uint32(12.9), 12);
        assert_eq!(go_uint32(f64::INFINITY), 0);
        assert_eq!(go_uint32(f64::NAN), 0);
        assert_eq!(go_uint32(1e300), 0);
    }
}
