/// JSON written directly, byte for byte as JSONEncoder writes it with
/// `.sortedKeys` and `.withoutEscapingSlashes` (and `.prettyPrinted` when
/// `pretty`), for the answers an enumerator asks for many times a second:
/// the Codable path instantiates generic metadata for each type it meets,
/// 0.5 ms of a `changes` that takes 10. The caller writes keys in sorted
/// order; a test holds the output to JSONEncoder's.
public struct JSONText {
    public private(set) var bytes: [UInt8] = []
    private let pretty: Bool
    private var depth = 0
    /// Nothing written yet in the innermost container.
    private var empty = true

    public init(pretty: Bool) {
        self.pretty = pretty
    }

    public mutating func beginObject() { open(UInt8(ascii: "{")) }
    public mutating func endObject() { close(UInt8(ascii: "}")) }
    public mutating func beginArray() { open(UInt8(ascii: "[")) }
    public mutating func endArray() { close(UInt8(ascii: "]")) }

    /// Starts the next member of the object: its key; its value follows.
    public mutating func key(_ name: String) {
        element()
        string(name)
        if pretty { bytes.append(UInt8(ascii: " ")) }
        bytes.append(UInt8(ascii: ":"))
        if pretty { bytes.append(UInt8(ascii: " ")) }
    }

    /// Starts the next element of the array; its value follows.
    public mutating func element() {
        if !empty { bytes.append(UInt8(ascii: ",")) }
        empty = false
        if pretty { newline() }
    }

    public mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        // Most strings need no escape: copied whole.
        let plain = value.withUTF8 { utf8 in
            guard !utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if plain {
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x08: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
            case 0x0C: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
            case 0..<0x20:
                let hex: StaticString = "0123456789abcdef"
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                          hex.utf8Start[Int(byte >> 4)], hex.utf8Start[Int(byte & 0xF)]]
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    public mutating func int(_ value: Int64) { bytes += Array(String(value).utf8) }
    public mutating func null() { bytes += Array("null".utf8) }
    public mutating func bool(_ value: Bool) {
        let text: StaticString = value ? "true" : "false"
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    private mutating func open(_ bracket: UInt8) {
        bytes.append(bracket)
        depth += 1
        empty = true
    }

    private mutating func close(_ bracket: UInt8) {
        depth -= 1
        if pretty {
            // An empty container is written with a blank line inside.
            if empty { bytes.append(0x0A) }
            newline()
        }
        bytes.append(bracket)
        empty = false
    }

    private mutating func newline() {
        bytes.append(0x0A)
        for _ in 0..<2 * depth { bytes.append(UInt8(ascii: " ")) }
    }
}

extension ChangeBatch {
    /// The batch as JSON, as JSONEncoder would write it (see `JSONText`).
    public func json(pretty: Bool) -> [UInt8] {
        var out = JSONText(pretty: pretty)
        out.beginObject()
        out.key("anchor")
        out.string(anchor)
        out.key("deleted")
        out.beginArray()
        for identifier in deleted {
            out.element()
            out.string(identifier)
        }
        out.endArray()
        out.key("moreComing")
        out.bool(moreComing)
        out.key("moved")
        out.beginArray()
        for move in moved {
            out.element()
            out.beginObject()
            out.key("from")
            out.string(move.from)
            out.key("kind")
            out.string(move.kind)
            out.key("to")
            out.string(move.to)
            out.endObject()
        }
        out.endArray()
        out.key("updated")
        out.beginArray()
        for item in updated {
            out.element()
            item.write(to: &out)
        }
        out.endArray()
        out.endObject()
        return out.bytes
    }
}

extension Item {
    /// The item as a JSON object, keys sorted, absent values left out.
    func write(to out: inout JSONText) {
        out.beginObject()
        out.key("contentVersion")
        out.string(contentVersion)
        if let executable {
            out.key("executable")
            out.bool(executable)
        }
        out.key("filename")
        out.string(filename)
        out.key("identifier")
        out.string(identifier)
        out.key("kind")
        out.string(kind)
        out.key("modified")
        out.string(modified)
        out.key("parent")
        out.string(parent)
        // A file's unknown size is said (null); a folder has none (see `Item.encode`).
        if let size {
            out.key("size")
            out.int(size)
        } else if kind != "folder" {
            out.key("size")
            out.null()
        }
        out.key("state")
        out.string(state.rawValue)
        if let unsupported {
            out.key("unsupported")
            out.string(unsupported)
        }
        out.endObject()
    }
}
