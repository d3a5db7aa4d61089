import DBus
import PairingCore

/// Following the host's sleep through logind (`org.freedesktop.login1.Manager`): the
/// `PrepareForSleep` signal, and a `delay` inhibitor so paird acts before the host sleeps. The
/// decisions are the machine's (`PairingMachine+Sleep`). logind's stock polkit policy lets any
/// user take a delay inhibitor (`org.freedesktop.login1.inhibit-delay-sleep`); without logind
/// (a container, no systemd) paird simply never hears of a sleep.
extension Daemon {
    static let login1 = (name: "org.freedesktop.login1", path: "/org/freedesktop/login1", manager: "org.freedesktop.login1.Manager")

    func followSleep() {
        // The bus delivers only what the real org.freedesktop.login1 sends (sender in the rule).
        bus.onSignal(interface: Self.login1.manager, member: "PrepareForSleep", path: Self.login1.path, sender: Self.login1.name,
                     ready: { [unowned self] error in
                         if let error { log.warning("cannot follow the host's sleep (AddMatch: \(error.name))") }
                     }) { [unowned self] message in
            guard let going = (try? message.arguments())?.first?.bool else { return }
            going ? hostGoingToSleep() : hostResumed()
        }
        takeSleepInhibitor()
    }

    /// Takes the delay inhibitor (again after each resume: it is released before each sleep).
    func takeSleepInhibitor() {
        guard sleepInhibitor == nil else { return }
        let l = Self.login1
        bus.call(destination: l.name, path: l.path, interface: l.manager, method: "Inhibit",
                 args: [.string("sleep"), .string("paird"), .string("lets the wearables' links go in order before the host sleeps"), .string("delay")],
                 timeout: .seconds(10)) { [unowned self] result in
            switch result {
            case .success(let v):
                sleepInhibitor = v.first?.unixFD
                sleepInhibitorError = nil
                log.debug("logind: holding a delay inhibitor for sleep (\(sleepInhibitor.map { "\($0)" } ?? "none"))")
            case .failure(let e):
                if sleepInhibitorError != e.name {
                    log.info("logind: no sleep inhibitor (\(e.name)): paird follows the host's sleeps without delaying them")
                }
                sleepInhibitorError = e.name
            }
        }
    }

    func hostGoingToSleep() {
        let linked = machine.devices.values.filter { $0.wanted == .connected && $0.state.link != nil }.count
        log.log(.info, "the host is going to sleep: letting \(linked) wearable link(s) go; they come back after the resume",
                id: Log.MessageID.hostSleeping, fields: ["PAIRD_SLEEP": "sleeping"])
        // The machine lets the links go and says when the inhibitor goes (`Action.releaseSleepInhibitor`).
        feed(.hostSleeping)
    }

    /// Closing the fd releases it: logind may put the host to sleep now.
    func releaseSleepInhibitor(_ why: SleepRelease) {
        guard sleepInhibitor != nil else { return }
        sleepInhibitor = nil
        log.debug("logind: sleep inhibitor released (\(why))")
    }

    /// The resume's last step (`ResumeStep.powerCycle`), or a wedged adapter's (`adapter`; nil:
    /// the default adapter): Powered off, then on; the adapter's return reconciles every
    /// wearable (`adapterReady`). A failed Powered=true goes to the machine, which tries it again
    /// (`PairingMachine+Power`).
    func powerCycleAdapter(_ adapter: DeviceAddress? = nil) {
        bluez.setAdapterPowered(false, adapter: adapter) { [unowned self] failure in
            if let failure { log.warning("power cycle: Powered=false failed: \(failure.token); powering on anyway") }
            powerOn(adapter, attempt: 1)
        }
    }

    func powerOn(_ adapter: DeviceAddress?, attempt: Int) {
        bluez.setAdapterPowered(true, adapter: adapter) { [unowned self] failure in
            guard let failure else { return log.log(.notice, "power cycle: the adapter is powered again") }
            feed(.powerOnFailed(adapter: adapter, attempt: attempt, failure))
        }
    }

    /// The journal's words for what the machine made of a failed Powered=true.
    func logPowerOn(_ outcome: PowerOnOutcome) {
        switch outcome {
        case .rfkillBlocked(let failure):
            // Set between the two halves of the cycle (paird power-cycles only a ready adapter).
            log.warning("power cycle: rfkill blocks the adapter (\(failure.token)): paird does not lift a block "
                        + "a person or a switch set; `rfkill unblock bluetooth` if it was not meant, and paird brings the wearables back")
        case .gaveUp(let tries, let failure):
            log.error("power cycle: Powered=true failed \(tries) times (\(failure.token)): the adapter stays off; `bluetoothctl power on` or `pairctl doctor`")
        case .retrying(let after, let failure):
            log.warning("power cycle: Powered=true failed (\(failure.token)); again in \(Int(after.seconds)) s")
        }
    }

    func hostResumed() {
        log.log(.info, "the host woke up: bringing the wearables back (the kernel's auto-connect, then paird's Connect())",
                id: Log.MessageID.hostResumed, fields: ["PAIRD_SLEEP": "resumed"])
        sleepInhibitor = nil
        feed(.hostResumed)
        takeSleepInhibitor()
    }
}
