/// Seeded edits of existing blobs, for the sync mode's modified files (the
/// same idea as gen-repo.py's `Content.edit`): a few lines replaced, inserted
/// or removed in a text file, a chunk overwritten in a binary one.
extension Content {
    /// `n` bytes of pseudo-source text (ending in a newline).
    func text(_ rng: inout SeededRandom, count n: Int) -> [UInt8] {
        guard n > 0 else { return [] }
        let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: n + maxToken + 1)
        defer { scratch.deallocate() }
        text(&rng, count: n, into: scratch)
        return Array(UnsafeBufferPointer(start: scratch, count: n))
    }

    /// `n` random bytes (incompressible).
    static func binary(_ rng: inout SeededRandom, count n: Int) -> [UInt8] {
        guard n > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: n)
        out.withUnsafeMutableBufferPointer { buffer in
            if let base = buffer.baseAddress { Content.binary(&rng, count: n, into: base) }
        }
        return out
    }

    /// A small realistic edit of `data`; never returns `data` unchanged.
    func edit(_ rng: inout SeededRandom, _ data: [UInt8]) -> [UInt8] {
        if data.isEmpty { return text(&rng, count: rng.between(20, 400)) }
        if data.prefix(8000).contains(0) || data.last != 0x0A {
            // Binary: overwrite one chunk in place.
            var out = data
            let n = min(out.count, rng.between(64, 4096))
            let offset = rng.between(0, out.count - n)
            out.replaceSubrange(offset..<offset + n, with: Content.binary(&rng, count: n))
            return out == data ? out + [0x0A] : out
        }
        // Text: about one line in 30 replaced, inserted or removed.
        var lines = data.split(separator: 0x0A, omittingEmptySubsequences: false).map(Array.init)
        for _ in 0..<max(1, lines.count / 30) {
            let i = rng.below(lines.count)
            let x = rng.unit()
            let fresh = text(&rng, count: rng.between(10, 90)).map { $0 == 0x0A ? 0x20 : $0 }
            if x < 0.5 {
                lines[i] = fresh
            } else if x < 0.8 {
                lines.insert(fresh, at: i)
            } else if lines.count > 2 {
                lines.remove(at: i)
            }
        }
        let out = Array(lines.joined(separator: [0x0A]))
        return out == data ? out + Array("x\n".utf8) : out
    }
}
