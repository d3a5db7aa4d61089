import ArgumentParser
import DBus

struct Disconnect: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Disconnect a wearable and keep it down (also across restarts) until pairctl connect.")
    @OptionGroup var device: DeviceArgument
    func run() throws {
        let client = try PairdClient()
        let a = try device.resolve(client)
        _ = try client.call("Disconnect", [.string(a.description)])
        say("disconnected \(a); it stays down until pairctl connect")
    }
}
