import Foundation
import Testing
@testable import FprepCore

/// The hand-written JSON of a change batch must stay what JSONEncoder
/// writes for it: consumers of `changes` see one format either way.
struct JSONTextTests {
    static let awkward = "quote \" backslash \\ slash / tab \t newline \n return \r bell \u{07} \u{1F} \u{08}\u{0C} del \u{7F} é 日本 🙂"

    static func item(_ name: String, size: Int64?, executable: Bool?, unsupported: String?) -> Item {
        Item(identifier: "folder/" + name, parent: "folder", filename: name, kind: "file", size: size,
             contentVersion: String(repeating: "ab", count: 20), state: .dataless, modified: "2023-11-14T22:13:20Z",
             executable: executable, unsupported: unsupported)
    }

    static let batches: [ChangeBatch] = [
        ChangeBatch(anchor: String(repeating: "0", count: 40), moreComing: false),
        ChangeBatch(
            updated: [item(awkward, size: 12, executable: true, unsupported: nil),
                      item("plain.txt", size: nil, executable: nil, unsupported: "submodule"),
                      item("big", size: Int64.max, executable: false, unsupported: nil)],
            deleted: ["gone", awkward],
            moved: [ChangeBatch.MovedItem(from: "a/b", to: awkward, kind: "folder")],
            anchor: "c1.x.y.3", moreComing: true),
    ]

    @Test(arguments: [true, false])
    func writesWhatJSONEncoderWrites(pretty: Bool) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
                                          : [.sortedKeys, .withoutEscapingSlashes]
        for batch in Self.batches {
            let expected = String(decoding: try encoder.encode(batch), as: UTF8.self)
            let written = String(decoding: batch.json(pretty: pretty), as: UTF8.self)
            #expect(written == expected)
        }
    }
}
