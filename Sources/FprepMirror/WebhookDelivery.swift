/// The git host a webhook delivery came from, by its headers.
public enum WebhookHost: String, Sendable {
    case github = "GitHub"
    case gitlab = "GitLab"
    /// Gitea, and Forgejo (which sends Gitea's headers and its own).
    case gitea = "Gitea"
}

/// A delivery whose signature (or token) was verified.
public struct WebhookDelivery: Sendable, Equatable {
    /// What the host's event was.
    public enum Kind: Sendable, Equatable {
        /// A push: `ref` moved from `before` to `after` (40 hex digits each).
        case push(ref: String, before: String, after: String)
        /// GitHub's `ping`, sent when a webhook is made.
        case ping
        /// An event this mirror has no use for (its name, for the log).
        case other(String)
    }

    public let host: WebhookHost
    /// The host's id of this delivery (a redelivery repeats it); nil when
    /// the host sent none.
    public let id: String?
    public let kind: Kind
}

/// The fields of a push event's JSON body this mirror reads; GitHub, GitLab
/// and Gitea all name them alike.
struct PushEventBody: Decodable {
    let ref: String
    let before: String
    let after: String
    /// GitLab's `"push"` (absent from the others' bodies).
    let objectKind: String?

    enum CodingKeys: String, CodingKey {
        case ref, before, after
        case objectKind = "object_kind"
    }
}
