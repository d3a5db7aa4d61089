import ArgumentParser
import DBus

struct Connect: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Want a wearable connected again (after pairctl disconnect).")
    @OptionGroup var device: DeviceArgument
    func run() throws {
        let client = try PairdClient()
        let a = try device.resolve(client)
        _ = try client.call("Connect", [.string(a.description)])
        say("connecting \(a); paird keeps it connected from now on")
    }
}
