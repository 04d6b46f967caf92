import Glibc

/// A small seeded PRNG (xoshiro256**, state filled by SplitMix64).
///
/// The benchmark must give the same repository (same commit id) for the same
/// arguments on every run and Swift release, so it cannot use
/// `SystemRandomNumberGenerator` or a library generator whose algorithm may change.
/// (`logUniform` goes through libm's exp/log: another libm could, rarely, shift
/// a size by a byte.)
struct SeededRandom {
    private var s0: UInt64
    private var s1: UInt64
    private var s2: UInt64
    private var s3: UInt64

    init(seed: UInt64) {
        // SplitMix64 spreads a small seed over the whole 256-bit state;
        // xoshiro must never start from all zeros, which SplitMix64 cannot produce.
        var x = seed
        func splitmix() -> UInt64 {
            x &+= 0x9E37_79B9_7F4A_7C15
            var z = x
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        s0 = splitmix()
        s1 = splitmix()
        s2 = splitmix()
        s3 = splitmix()
    }

    /// Next 64 random bits.
    @inline(__always)
    mutating func next() -> UInt64 {
        let result = ((s1 &* 5) << 7 | (s1 &* 5) >> 57) &* 9
        let t = s1 << 17
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = (s3 << 45) | (s3 >> 19)
        return result
    }

    /// Uniform double in [0, 1) from the top 53 bits.
    mutating func unit() -> Double {
        Double(next() >> 11) * 0x1.0p-53
    }

    /// Uniform integer in [0, n) (multiply-high; the bias is below 2^-40 for our n).
    mutating func below(_ n: Int) -> Int {
        precondition(n > 0, "below(0)")
        return Int(UInt64(n).multipliedFullWidth(by: next()).high)
    }

    /// Uniform integer in the closed range [lo, hi].
    mutating func between(_ lo: Int, _ hi: Int) -> Int {
        lo + below(hi - lo + 1)
    }

    /// One element of a non-empty array.
    mutating func pick<T>(_ items: [T]) -> T {
        items[below(items.count)]
    }

    /// Uniform on a log scale between lo and hi: file sizes spread over decades.
    mutating func logUniform(_ lo: Double, _ hi: Double) -> Int {
        Int(exp(log(lo) + unit() * (log(hi) - log(lo))))
    }
}
