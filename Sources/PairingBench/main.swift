// Events per second through PairingMachine on one core: a benchmark program, not a test.
//
//   swift run -c release PairingBench [devices] [seconds]
//
// Each device runs the reconnect cycle the daemon lives in: link lost → fallback countdown
// fires → a Connect that fails after 40 s → countdown → a Connect that succeeds → services
// resolved → link set up → connected, plus stale countdowns and duplicate signals. The runtime's
// part (performing actions) is reduced to remembering countdown ids and call ids.
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

func fixed(_ x: Double, _ digits: Int) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let r = (x * scale).rounded() / scale
    return digits == 0 ? "\(Int(r))" : "\(r)"
}

func clockSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

func runBenchmark() {
    let deviceCount = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 100 : 100
    let seconds = CommandLine.arguments.count > 2 ? Double(CommandLine.arguments[2]) ?? 3 : 3

    let addresses = (0..<deviceCount).map { DeviceAddress(value: 0x00AA_0100_0000 + UInt64($0)) }
    let state = PersistedState(devices: addresses.map {
        PersistedDevice(identity: DeviceIdentity(address: $0, serviceUUIDs: [ServiceUUID.heartRate]),
                        wanted: .connected, pairedAt: 0, updatedAt: 0)
    })
    var machine = PairingMachine(restoring: state, now: .at(0))
    var now = Moment.at(0)
    var actions: [Action] = []
    actions.reserveCapacity(16)
    // The runtime's bookkeeping, by device number (addresses are consecutive), so the figure is the machine's.
    let base = addresses[0].value
    var lastCountdown = [Countdown.ID?](repeating: nil, count: deviceCount)
    var lastCall = [UInt64](repeating: 0, count: deviceCount)
    var events = 0

    func feed(_ e: Event) {
        actions.removeAll(keepingCapacity: true)
        machine.handle(e, now: now, into: &actions)
        events += 1
        for a in actions {
            switch a {
            case .arm(let c): if case .device(let d) = c.id.owner { lastCountdown[Int(d.value - base)] = c.id }
            case .connect(let d, let call, _): lastCall[Int(d.value - base)] = call
            case .cancel, .disconnect, .setUpLink, .setTrusted, .removeDevice, .startDiscovery, .stopDiscovery, .restartDiscovery, .pair, .answerAgent,
                 .cancelPairing, .updateAutoConnect, .queryBluetoothdUnit, .resubscribe, .probe, .startBluetoothd, .bluetoothdReport, .persist, .report,
                 .pairingProgress, .pairingEnded, .powerCycleAdapter, .powerCycle, .releaseSleepInhibitor, .powerOn, .powerOnReport, .batteryChanged:
                break
            }
        }
    }

    var views: [DeviceAddress: BlueZDeviceView] = [:]
    for a in addresses { views[a] = BlueZDeviceView(connected: true, servicesResolved: true) }
    feed(.adapterReady(views))
    for a in addresses { feed(.setUpLinkFinished(a, failure: nil)) }


    let start = clockSeconds()
    var cycles = 0
    let deadline = start + seconds
    while true {
        for (n, a) in addresses.enumerated() {
            now = now + .milliseconds(1)
            feed(.linkDown(a, DisconnectClassifier.Evidence()))
            let stale = lastCountdown[n]!
            feed(.countdownFired(lastCountdown[n]!))                     // fallback Connect
            now = now + .seconds(40)
            feed(.connectFailed(a, call: lastCall[n], .abortedByLocal))  // away
            feed(.countdownFired(stale))                                  // stale: ignored
            feed(.countdownFired(lastCountdown[n]!))                     // next fallback Connect
            feed(.connectSucceeded(a, call: lastCall[n]))
            feed(.linkUp(a))                                              // duplicate signal
            feed(.servicesResolved(a))
            feed(.setUpLinkFinished(a, failure: nil))
        }
        cycles += 1
        if cycles % 16 == 0, clockSeconds() >= deadline { break }
    }
    let elapsed = clockSeconds() - start
    let connected = machine.devices.values.filter { $0.state.isConnected }.count
    precondition(connected == deviceCount, "benchmark drove the machine off its cycle")
    print("PairingMachine: \(deviceCount) devices, \(events) events in \(fixed(elapsed, 2)) s on one core")
    print("events/s: \(fixed(Double(events) / elapsed / 1e6, 2)) million  (\(fixed(elapsed / Double(events) * 1e9, 0)) ns/event)")
}

runBenchmark()
