/// Seeded pseudo-source text and random binary data for blobs.
///
/// Text is drawn from a 4096-token vocabulary of syllable words, punctuation
/// and indented newlines: it looks like code, compresses about 3–4× with zlib
/// like real source, and has no long matches across files, so packs get no
/// artificial cross-file deltas (the same idea as gen-repo.py's `Content`).
struct Content {
    static let syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "xe", "po",
                            "de", "gu", "fi", "ha", "jo", "be", "cu", "wa", "ze", "qi",
                            "str", "get", "set", "buf", "ptr", "idx", "len", "ctx", "err", "val"]
    static let punctuation = ["(", ") ", "{", "}\n", "= ", "; ", ", ", ".", "->", "== ",
                              "+ ", "\"", "[", "] ", "0", "1", "return ", "if ", "for ", "// "]

    /// All tokens back to back; token i is `flat[start[i] ..< start[i] + length[i]]`.
    private let flat: [UInt8]
    private let start: [Int32]
    private let length: [UInt8]
    /// Longest token: the slack a buffer needs past the requested size.
    let maxToken: Int

    init(seed: UInt64) {
        var rng = SeededRandom(seed: seed &* 7919 &+ 17)
        var flat: [UInt8] = []
        var start: [Int32] = []
        var length: [UInt8] = []
        for _ in 0..<4096 {
            let x = rng.unit()
            var token: String
            if x < 0.09 {
                token = "\n" + String(repeating: "    ", count: rng.between(0, 3))
            } else if x < 0.25 {
                token = rng.pick(Content.punctuation)
            } else {
                token = Content.word(&rng, syllables: rng.between(1, 4))
                if rng.unit() < 0.3 { token += "_" + Content.word(&rng, syllables: rng.between(1, 2)) }
                if rng.unit() < 0.7 { token += " " }
            }
            start.append(Int32(flat.count))
            length.append(UInt8(token.utf8.count))
            flat.append(contentsOf: token.utf8)
        }
        self.flat = flat
        self.start = start
        self.length = length
        self.maxToken = Int(length.max() ?? 1)
    }

    /// A name-like word of `syllables` syllables.
    static func word(_ rng: inout SeededRandom, syllables count: Int) -> String {
        var s = ""
        for _ in 0..<count { s += rng.pick(syllables) }
        return s
    }

    /// Fills `out[0..<n]` with text ending in a newline; `out` must have room
    /// for `n + maxToken` bytes because the last token may overrun before the cut.
    func text(_ rng: inout SeededRandom, count n: Int, into out: UnsafeMutablePointer<UInt8>) {
        guard n > 0 else { return }
        flat.withUnsafeBufferPointer { flat in
            start.withUnsafeBufferPointer { start in
                length.withUnsafeBufferPointer { length in
                    var have = 0
                    while have < n {
                        // One 64-bit draw gives four 12-bit token indices.
                        var bits = rng.next()
                        for _ in 0..<4 {
                            let i = Int(bits & 4095)
                            bits >>= 16
                            let len = Int(length[i])
                            (out + have).update(from: flat.baseAddress! + Int(start[i]), count: len)
                            have += len
                            if have >= n { break }
                        }
                    }
                }
            }
        }
        if n > 1 { out[n - 1] = 0x0A }
    }

    /// Fills `out[0..<n]` with random bytes (incompressible, like media files).
    static func binary(_ rng: inout SeededRandom, count n: Int, into out: UnsafeMutablePointer<UInt8>) {
        var i = 0
        while i < n {
            var bits = rng.next()
            for _ in 0..<8 where i < n {
                out[i] = UInt8(truncatingIfNeeded: bits)
                bits >>= 8
                i += 1
            }
        }
    }
}
