import FoundationEssentials
import Testing
@testable import FprepServer

@Suite("push payload")
struct PayloadTests {
    @Test("the payload has File Provider's keys and both anchors")
    func keys() throws {
        let payload = PushPayload(container: "docs", domain: "d", old: "a", new: "b")
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let text = String(decoding: try encoder.encode(payload), as: UTF8.self)
        #expect(text == #"{"container-identifier":"docs","domain":"d","new-anchor":"b","old-anchor":"a"}"#)
    }
}
