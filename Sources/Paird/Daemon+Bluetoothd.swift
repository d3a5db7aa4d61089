import DBus
import PairingCore

/// The D-Bus side of following bluetoothd: systemd's view of `bluetooth.service` and bus
/// activation. The decisions are the machine's (`PairingMachine+Bluetoothd`). Every call here is
/// one systemd's and dbus-daemon's stock policies allow any user: `Manager.LoadUnit`, the unit's
/// `Properties.GetAll`, and the bus driver's `StartServiceByName` (README, "When bluetoothd crashes").
extension Daemon {
    static let bluetoothUnit = "bluetooth.service"
    static let systemd = (name: "org.freedesktop.systemd1", path: "/org/freedesktop/systemd1",
                          manager: "org.freedesktop.systemd1.Manager",
                          unit: "org.freedesktop.systemd1.Unit", service: "org.freedesktop.systemd1.Service")

    /// LoadUnit (not GetUnit: a unit stopped and garbage-collected is not loaded), then the
    /// Unit's and the Service's properties. Any failure (no systemd on the bus, no such unit,
    /// denied) answers nil: paird then waits, as without systemd.
    func queryBluetoothdUnit() {
        let s = Self.systemd
        bus.call(destination: s.name, path: s.path, interface: s.manager, method: "LoadUnit",
                 args: [.string(Self.bluetoothUnit)], timeout: .seconds(10)) { [unowned self] result in
            guard case .success(let v) = result, let path = v.first?.objectPath else {
                if case .failure(let e) = result { log.info("systemd: LoadUnit(\(Self.bluetoothUnit)): \(e.name)") }
                return feed(.bluetoothdUnit(nil))
            }
            getAll(path, s.unit) { [unowned self] unitProps in
                getAll(path, s.service) { [unowned self] serviceProps in
                    guard let unitProps, let serviceProps,
                          let active = unitProps["ActiveState"]?.string, let result = serviceProps["Result"]?.string else {
                        return feed(.bluetoothdUnit(nil))
                    }
                    let unit = BluetoothdUnitState(activeState: active, result: result,
                                                   execMainCode: serviceProps["ExecMainCode"]?.int32 ?? 0,
                                                   execMainStatus: serviceProps["ExecMainStatus"]?.int32 ?? 0,
                                                   execMainStart: serviceProps["ExecMainStartTimestampMonotonic"]?.uint64 ?? 0)
                    log.debug("systemd: \(Self.bluetoothUnit) \(unit)")
                    feed(.bluetoothdUnit(unit))
                }
            }
        }
    }

    private func getAll(_ path: String, _ interface: String, _ done: @escaping ([String: DBusValue]?) -> Void) {
        bus.call(destination: Self.systemd.name, path: path, interface: "org.freedesktop.DBus.Properties", method: "GetAll",
                 args: [.string(interface)], timeout: .seconds(10)) { [unowned self] result in
            switch result {
            case .success(let v): done(v.first?.dictionary)
            case .failure(let e):
                log.info("systemd: GetAll(\(interface)): \(e.name)")
                done(nil)
            }
        }
    }

    /// Bus activation: dbus-daemon asks systemd to start `dbus-org.bluez.service` (bluetooth.service).
    func startBluetoothd() {
        bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                 method: "StartServiceByName", args: [.string("org.bluez"), .uint32(0)], timeout: .seconds(60)) { [unowned self] result in
            switch result {
            case .success: log.debug("StartServiceByName(org.bluez): started")
            case .failure(let e):
                log.warning("starting bluetoothd (StartServiceByName org.bluez) failed: \(e.name): \(e.message)")
                feed(.bluetoothdStartFailed)
            }
        }
    }

    /// The journal entry for a `BluetoothdReport` (wording: `BluetoothdJournal`).
    func report(_ r: BluetoothdReport) {
        if case .crashed = r { metrics?.model.bluetoothdVerdict(crashed: true) } else { metrics?.model.bluetoothdVerdict(crashed: false) }
        let entry = BluetoothdJournal(r)
        log.log(entry.priority, entry.message, id: entry.messageID, fieldList: entry.fields)
    }
}
