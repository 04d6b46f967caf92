import FoundationEssentials
import FprepCore
import FprepGit
import FprepPush
import FprepServer

/// One pass of the mirror, the work a webhook delivery or the sweep queues:
/// fetch the host, and for each branch that moved since the last pass
/// publish the new blobs' sizes, then record the push signals in the
/// mirror's outbox as the post-receive hook does (`PushHook.record`). Sizes
/// go first, so a device that syncs on the signal finds them. The branch
/// tips are marked done last: a pass that dies midway is done again.
struct MirrorPass {
    let mirror: MirrorRepository
    let store: MirrorStore
    let log: @Sendable (String) -> Void

    /// Runs the pass; returns how many branch pushes it recorded.
    func run() throws -> Int {
        do {
            try mirror.fetch()
        } catch let error as GitCommandError {
            throw FprepError("cannot fetch '\(mirror.url)': \(error.reason)")
        }
        let tips = try mirror.branchTips()
        let done = try store.doneTips()
        let repository = try Repository(openingAt: mirror.gitDirectory)
        var moves: [ManifestPublisher.Move] = []
        var updates: [PostReceive.Update] = []
        for (reference, new) in tips.sorted(by: { $0.key < $1.key }) where done?[reference] != new.hex {
            // A commit the mirror no longer has (a force-push, then a gc) is
            // taken as a new branch: every container is signalled.
            let old = done?[reference].flatMap { ObjectID(hex: $0) }.flatMap { (try? repository.commit($0)) != nil ? $0 : nil }
            moves.append(ManifestPublisher.Move(old: old, new: new))
            updates.append(PostReceive.Update(old: old ?? ObjectID.zero, new: new, reference: reference))
        }
        if !moves.isEmpty, let published = ManifestPublisher(mirror: mirror).publish(moves) { log(published) }
        // The first pass of a new mirror has no devices to signal: it only
        // learns the tips (and publishes the sizes above).
        var recorded = 0
        if done != nil, !updates.isEmpty {
            recorded = try PushHook.record(gitDirectory: mirror.gitDirectory, updates: updates).recorded
            for update in updates {
                log("host push: \(update.reference) \(update.old.hex.prefix(12))…\(update.new.hex.prefix(12))")
            }
        }
        try store.setDoneTips(tips.mapValues(\.hex))
        return recorded
    }
}
