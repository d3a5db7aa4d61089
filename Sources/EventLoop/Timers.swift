#if canImport(Glibc)
import Glibc
#endif

/// A one-shot timer. Loop thread only.
public final class TimerHandle {
    private weak var loop: EventLoop?
    /// Nanoseconds of the loop's clock (CLOCK_BOOTTIME, plus a test's skew).
    let deadline: UInt64
    let sequence: UInt64
    var callback: (() -> Void)?
    var fired = false
    /// Position in the loop's heap; -1 when not in it.
    var heapIndex = -1

    init(loop: EventLoop, deadline: UInt64, sequence: UInt64, callback: @escaping () -> Void) {
        self.loop = loop
        self.deadline = deadline
        self.sequence = sequence
        self.callback = callback
    }

    /// True once cancelled (and not fired).
    public private(set) var isCancelled = false
    /// True while the timer may still fire.
    public var isPending: Bool { callback != nil && !isCancelled && !fired }

    /// Prevents the callback from running and releases it. Idempotent; harmless after firing.
    public func cancel() {
        guard !isCancelled else { return }
        isCancelled = true
        callback = nil
        loop?.cancelTimer(self)
    }
}

/// A binary min-heap of timers ordered by (deadline, sequence), each timer knowing its index so
/// cancellation is O(log n) and leaves nothing behind (libdbus adds and removes a timeout per
/// pending call; lazy deletion would let a call storm pile up dead entries).
struct TimerHeap {
    private var items: [TimerHandle] = []

    var first: TimerHandle? { items.first }
    var count: Int { items.count }

    private static func less(_ a: TimerHandle, _ b: TimerHandle) -> Bool {
        a.deadline != b.deadline ? a.deadline < b.deadline : a.sequence < b.sequence
    }

    mutating func insert(_ t: TimerHandle) {
        items.append(t)
        t.heapIndex = items.count - 1
        siftUp(items.count - 1)
    }

    mutating func remove(_ t: TimerHandle) {
        let i = t.heapIndex
        guard i >= 0, i < items.count, items[i] === t else { return }
        let last = items.count - 1
        if i != last {
            items.swapAt(i, last)
            items[i].heapIndex = i
        }
        items.removeLast()
        t.heapIndex = -1
        if i < items.count {
            siftDown(i)
            siftUp(i)
        }
    }

    private mutating func siftUp(_ start: Int) {
        var i = start
        while i > 0 {
            let parent = (i - 1) / 2
            guard Self.less(items[i], items[parent]) else { break }
            items.swapAt(i, parent)
            items[i].heapIndex = i
            items[parent].heapIndex = parent
            i = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var i = start
        while true {
            let l = 2 * i + 1, r = l + 1
            var smallest = i
            if l < items.count && Self.less(items[l], items[smallest]) { smallest = l }
            if r < items.count && Self.less(items[r], items[smallest]) { smallest = r }
            guard smallest != i else { break }
            items.swapAt(i, smallest)
            items[i].heapIndex = i
            items[smallest].heapIndex = smallest
            i = smallest
        }
    }
}
