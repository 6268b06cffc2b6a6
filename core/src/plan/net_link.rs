//! What the tuner knows of the network between hosts: the speed and latency its device reports,
//! made sane, and one value that every rank of a communicator agrees on.

#![forbid(unsafe_code)]

use std::fmt;

/// Speed of a device that reports none, in Mbit/s (the built-in sockets and the plugin adapter
/// report this for a speed of 0 or less, as NCCL does).
const UNKNOWN_SPEED_MBPS: u32 = 10_000;
/// Slowest speed taken at face value, in Mbit/s: a report below 1 Gb/s is more likely wrong than
/// a network that slow, and the tuner's crossovers are bounded anyway.
const MIN_SPEED_MBPS: u32 = 1_000;
/// Fastest speed taken at face value, in Mbit/s (3.2 Tb/s, beyond any one device today).
const MAX_SPEED_MBPS: u32 = 3_200_000;
/// Lowest latency taken at face value, in ns.
const MIN_LATENCY_NS: u32 = 100;
/// Highest latency taken at face value, in ns (1 ms).
const MAX_LATENCY_NS: u32 = 1_000_000;

/// Latency assumed where a device reports none (0: the built-in sockets), in ns: one way over
/// plain loopback TCP between two polling threads, by `oxccl-net`'s `latency_probe`
/// (docs/perf/defaults.md, "Network hop").
pub const SOCKET_LATENCY_NS: u32 = 5_000;

/// The network device a communicator's NET connections use, as the tuner weighs it.
///
/// Only sane values exist: [`NetLink::reported`] clamps what a device says. Plans are cut from
/// it, so every rank must hold the same one ([`NetLink::slower`] combines the ranks' devices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NetLink {
    /// Link speed in Mbit/s, within [`MIN_SPEED_MBPS`]..=[`MAX_SPEED_MBPS`].
    speed_mbps: u32,
    /// One-way latency in ns, within [`MIN_LATENCY_NS`]..=[`MAX_LATENCY_NS`]; 0: unknown.
    latency_ns: u32,
}

impl NetLink {
    /// What the built-in socket network reports on loopback (no speed in /sys, no latency): the
    /// link the tuner's several-host crossovers were measured on.
    pub const SOCKETS_ON_LOOPBACK: NetLink = NetLink {
        speed_mbps: UNKNOWN_SPEED_MBPS,
        latency_ns: 0,
    };

    /// A link from a device's report (`speed_mbps` as the plugin ABI's speed, `latency_us` as
    /// its latency): speed 0 or less is unknown, latency 0, negative or not finite is unknown,
    /// and everything else is clamped to a sane range.
    pub fn reported(speed_mbps: i32, latency_us: f32) -> NetLink {
        let latency_ns = if latency_us.is_finite() && latency_us > 0.0 {
            // At least 1 ns, so that a positive report stays known; saturates for huge values.
            (f64::from(latency_us) * 1000.0).round().max(1.0) as u64
        } else {
            0
        };
        NetLink::sane(u64::try_from(speed_mbps).unwrap_or(0), latency_ns)
    }

    /// Clamps `speed_mbps` (0: unknown) and `latency_ns` (0: unknown) into the sane ranges.
    fn sane(speed_mbps: u64, latency_ns: u64) -> NetLink {
        let speed_mbps = match speed_mbps {
            0 => UNKNOWN_SPEED_MBPS,
            s => s.clamp(MIN_SPEED_MBPS.into(), MAX_SPEED_MBPS.into()) as u32,
        };
        let latency_ns = match latency_ns {
            0 => 0,
            l => l.clamp(MIN_LATENCY_NS.into(), MAX_LATENCY_NS.into()) as u32,
        };
        NetLink {
            speed_mbps,
            latency_ns,
        }
    }

    /// Link speed in Mbit/s.
    pub fn speed_mbps(self) -> u32 {
        self.speed_mbps
    }

    /// One-way latency in ns as reported, `None` when unknown.
    pub fn reported_latency_ns(self) -> Option<u32> {
        (self.latency_ns != 0).then_some(self.latency_ns)
    }

    /// One-way latency in ns: as reported, else [`SOCKET_LATENCY_NS`].
    pub fn latency_ns(self) -> u32 {
        self.reported_latency_ns().unwrap_or(SOCKET_LATENCY_NS)
    }

    /// The slower of two links in each respect (lower speed, higher latency): what a plan over
    /// both meets, and the same whichever rank combines them in whichever order.
    pub fn slower(self, other: NetLink) -> NetLink {
        let latency_ns = if other.latency_ns() > self.latency_ns() {
            other.latency_ns
        } else if self.latency_ns() > other.latency_ns() {
            self.latency_ns
        } else {
            // Equal in effect: a reported figure says more than the assumption.
            self.latency_ns.max(other.latency_ns)
        };
        NetLink {
            speed_mbps: self.speed_mbps.min(other.speed_mbps),
            latency_ns,
        }
    }

    /// Bytes to send to the other ranks ([`NetLink::from_bytes`] reads them).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0; 8];
        b[..4].copy_from_slice(&self.speed_mbps.to_le_bytes());
        b[4..].copy_from_slice(&self.latency_ns.to_le_bytes());
        b
    }

    /// The link [`NetLink::to_bytes`] wrote at the start of `b` (made sane again: it came from
    /// another process); `None` when `b` is too short.
    pub fn from_bytes(b: &[u8]) -> Option<NetLink> {
        let speed = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        let latency = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?);
        Some(NetLink::sane(speed.into(), latency.into()))
    }
}

impl fmt::Display for NetLink {
    /// `100 Gb/s, latency 2 us`, or `10 Gb/s, latency unknown (5 us assumed)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.speed_mbps.is_multiple_of(1000) {
            write!(f, "{} Gb/s", self.speed_mbps / 1000)?;
        } else {
            write!(f, "{} Mb/s", self.speed_mbps)?;
        }
        let us = |ns: u32| f64::from(ns) / 1000.0;
        match self.reported_latency_ns() {
            Some(ns) => write!(f, ", latency {} us", us(ns)),
            None => write!(
                f,
                ", latency unknown ({} us assumed)",
                us(SOCKET_LATENCY_NS)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_made_sane() {
        assert_eq!(NetLink::reported(10_000, 0.0), NetLink::SOCKETS_ON_LOOPBACK);
        assert_eq!(NetLink::reported(0, 0.0), NetLink::SOCKETS_ON_LOOPBACK);
        assert_eq!(
            NetLink::reported(-5, f32::NAN),
            NetLink::SOCKETS_ON_LOOPBACK
        );
        let l = NetLink::reported(400_000, 2.0);
        assert_eq!((l.speed_mbps(), l.latency_ns()), (400_000, 2_000));
        assert_eq!(NetLink::reported(1, -1.0).speed_mbps(), MIN_SPEED_MBPS);
        assert_eq!(
            NetLink::reported(i32::MAX, 0.0).speed_mbps(),
            MAX_SPEED_MBPS
        );
        assert_eq!(
            NetLink::reported(100, f32::INFINITY).reported_latency_ns(),
            None
        );
        assert_eq!(NetLink::reported(100, 1e30).latency_ns(), MAX_LATENCY_NS);
        assert_eq!(NetLink::reported(100, 1e-6).latency_ns(), MIN_LATENCY_NS);
        assert_eq!(NetLink::SOCKETS_ON_LOOPBACK.latency_ns(), SOCKET_LATENCY_NS);
    }

    #[test]
    fn ranks_agree_on_the_slower_link() {
        let fast = NetLink::reported(400_000, 2.0);
        let slow = NetLink::reported(25_000, 8.0);
        let unknown = NetLink::SOCKETS_ON_LOOPBACK;
        assert_eq!(fast.slower(slow), slow);
        assert_eq!(slow.slower(fast), slow);
        // Unknown latency counts as the socket assumption: slower than 2 us, faster than 8.
        let a = fast.slower(unknown);
        assert_eq!((a.speed_mbps(), a.reported_latency_ns()), (10_000, None));
        assert_eq!(unknown.slower(slow), slow.slower(unknown));
        assert_eq!(unknown.slower(slow).latency_ns(), 8_000);
        let five = NetLink::reported(10_000, 5.0);
        assert_eq!(five.slower(unknown), unknown.slower(five));
    }

    #[test]
    fn bytes_round_trip() {
        for l in [
            NetLink::SOCKETS_ON_LOOPBACK,
            NetLink::reported(400_000, 2.5),
            NetLink::reported(1_000, 999.0),
        ] {
            assert_eq!(NetLink::from_bytes(&l.to_bytes()), Some(l));
        }
        assert_eq!(NetLink::from_bytes(&[1, 2, 3]), None);
        // Zeros from a peer are an unknown device, not a zero-speed one.
        assert_eq!(
            NetLink::from_bytes(&[0; 8]),
            Some(NetLink::SOCKETS_ON_LOOPBACK)
        );
        assert_eq!(
            NetLink::from_bytes(&[0xff; 8]).map(NetLink::speed_mbps),
            Some(MAX_SPEED_MBPS)
        );
    }

    #[test]
    fn display() {
        assert_eq!(
            NetLink::SOCKETS_ON_LOOPBACK.to_string(),
            "10 Gb/s, latency unknown (5 us assumed)"
        );
        assert_eq!(
            NetLink::reported(2_500, 1.5).to_string(),
            "2500 Mb/s, latency 1.5 us"
        );
    }
}
