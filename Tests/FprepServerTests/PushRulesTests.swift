import Foundation
import FprepCore
@testable import FprepPush
import Testing
@testable import FprepServer

let workingSet = ContainerIdentifier.workingSet
let root = ContainerIdentifier.root

@Suite("push rules")
struct PushRulesTests {
    @Test("a container goes only to a device that enumerates it; the working set always")
    func activeOnly() {
        let pushed: Set = [root, "docs", "src"]
        #expect(PushRules.containers(pushed: pushed, active: ["docs", "photos"], replicated: false) == ["docs", workingSet])
        #expect(PushRules.containers(pushed: pushed, active: [], replicated: false) == [workingSet])
    }

    @Test("a replicated device only ever gets the working set")
    func replicated() {
        #expect(PushRules.containers(pushed: [root, "docs"], active: ["docs", root], replicated: true) == [workingSet])
    }

    @Test("a mailbox coalesces pushes: each container once, from the first old to the last new commit")
    func mailbox() {
        var box = Mailbox(old: anchor(1), new: anchor(2))
        box.add(["docs", workingSet], new: anchor(2))
        box.add([workingSet, "src"], new: anchor(3))
        #expect(box.payloads(domain: "d") == [
            PushPayload(container: "docs", domain: "d", old: anchor(1), new: anchor(3)),
            PushPayload(container: workingSet, domain: "d", old: anchor(1), new: anchor(3)),
            PushPayload(container: "src", domain: "d", old: anchor(1), new: anchor(3)),
        ])
    }

    @Test("the payload carries File Provider's keys and both anchors")
    func payloadKeys() throws {
        let text = String(decoding: JSONCoding.encode(PushPayload(container: "docs", domain: "d", old: "a", new: "b")), as: UTF8.self)
        #expect(text == #"{"container-identifier":"docs","domain":"d","new-anchor":"b","old-anchor":"a"}"#)
    }

    @Test("server-sent events round-trip through the parser, split anywhere")
    func sseParser() {
        let events = [ServerSentEvent(id: "7", event: "push", data: #"{"a":1}"#), ServerSentEvent(data: "two\nlines")]
        let bytes = events.flatMap(\.encoded) + ServerSentEvent.comment("heartbeat")
        var parser = ServerSentEventParser()
        var parsed: [ServerSentEvent] = []
        for chunk in stride(from: 0, to: bytes.count, by: 5) {
            parsed += parser.feed(bytes[chunk..<min(chunk + 5, bytes.count)])
        }
        #expect(parsed == events)
    }

    @Test("service URLs: http and https, with a port (80 and 443 by default)")
    func urls() {
        #expect(ServiceURL("http://127.0.0.1:8080/x?y")?.description == "http://127.0.0.1:8080/x?y")
        #expect(ServiceURL("http://[::1]:9/")?.authority == "[::1]:9")
        #expect(ServiceURL("http://example.com")?.port == 80)
        let secure = ServiceURL("https://example.com")
        #expect(secure?.isSecure == true && secure?.port == 443 && secure?.description == "https://example.com:443")
        #expect(secure?.with(path: "/v1/events").description == "https://example.com:443/v1/events")
        #expect(ServiceURL("ftp://example.com") == nil)
        #expect(ServiceURL("http://host:99999") == nil)
        #expect(ServiceURL("http://:80") == nil)
    }
}
