import ArgumentParser
import DBus

struct Unpair: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Forget a wearable: remove its bond in BlueZ and in paird's state.")
    @OptionGroup var device: DeviceArgument
    func run() throws {
        let client = try PairdClient()
        let a = try device.resolve(client)
        _ = try client.call("Unpair", [.string(a.description)])
        say("unpaired \(a)")
    }
}
