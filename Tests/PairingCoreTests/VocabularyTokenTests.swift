import Testing
import PairingCore

/// Every token of the typed vocabulary, byte for byte: the journal's `PAIRD_REASON=`, the
/// `StateChanged` signal, the status JSON, the history record and the metric labels carry these
/// words, and a renamed case must not change one of them. Cases with payloads: a sample each.
@Suite("vocabulary tokens")
struct VocabularyTokenTests {
    static let adapter = DeviceAddress("00:AA:01:00:00:00")!

    @Test("ReportReason: every case")
    func reportReasons() {
        let table: [(ReportReason, String)] = [
            (.user, "user"),
            (.local, "local"),
            (.adapterGone, "adapter-gone"),
            (.bondOnAdapter(Self.adapter), "bond-on-adapter 00:AA:01:00:00:00"),
            (.servicesLost, "services-lost"),
            (.hostAsleep, "host-asleep"),
            (.hostResumed, "host-resumed"),
            (.onTrialAfterCrashes, "on-trial-after-crashes"),
            (.unresolvableAfterCrash, "unresolvable-after-crash"),
            (.unresolvableAfterBluetoothdLeft, "unresolvable-after-bluetoothd-left"),
            (.adapterWedged, "adapter-wedged"),
            (.resolveTimeout, "resolve-timeout"),
            (.discoveryTimeout, "discovery-timeout"),
            (.linkLoss(nil), "link-loss"),
            (.linkLoss(.unknown), "unknown"),
            (.linkLoss(.timeout), "timeout"),
            (.linkLoss(.local), "local"),
            (.linkLoss(.remote), "remote"),
            (.linkLoss(.authentication), "authentication"),
            (.linkLoss(.suspend), "suspend"),
            (.failure(.connectTimeout), "connect-timeout"),
            (.failure(.other(name: "org.bluez.Error.Failed", message: "x")), "org.bluez.Error.Failed: x"),
            (.health(.noData), "no-data"),
            (.repair(.suspectedBondLoss), "suspected-bond-loss"),
            (.wedge(.powerCycle(attempt: 1, of: 2, adapter: Self.adapter)), "power-cycle 1/2 00:AA:01:00:00:00"),
            (.resume(.init(step: .autoConnect)), "auto-connect-and-connect"),
            (.missingCharacteristics(["2a37", "2a38"]), "2a37 2a38"),
            (.missingCharacteristics(["00002a37-0000-1000-8000-00805f9b34fb"]), "00002a37-0000-1000-8000-00805f9b34fb"),
            (.pairing(.noDeviceFound), "noDeviceFound"),
            (.pairing(.timedOut(phase: "scanning")), "timedOut(phase: \"scanning\")"),
            (.pairing(.authenticationFailed("x")), "authenticationFailed(\"x\")"),
            (.rescan(.connectTimeout, rescan: 1, of: 3), "connect-timeout on a private address, rescan 1 of 3"),
            (.refused(.enterPasskey), "passkey"),
            (.refused(.confirmPasskey(123456)), "numeric-comparison"),
            (.refused(.displayPasskey(1, entered: 0)), "display-passkey"),
            (.refused(.authorizePairing), "authorize-pairing"),
            (.refused(.authorizeService("x")), "authorize-service"),
            (.refused(.pinCode), "pin-code"),
        ]
        for (reason, token) in table { #expect(reason.token == token, "\(reason)") }
        #expect(WedgeWatch.reason == "adapter-wedged")
        #expect(HostWatch.asleepReason == "host-asleep")
    }

    @Test("HealthReason: every case")
    func healthReasons() {
        let table: [(HealthReason, String)] = [
            (.subscriptionLost, "subscription-lost"),
            (.noData, "no-data"),
            (.probeFailed(.noReply), "probe-failed:no-reply"),
            (.probeFailed(.other(name: "org.bluez.Error.Failed", message: "y")), "probe-failed:org.bluez.Error.Failed: y"),
            (.probeTimeout, "probe-timeout"),
        ]
        for (reason, token) in table {
            #expect(reason.token == token, "\(reason)")
            #expect(ReportReason.health(reason).token == token)
        }
    }

    @Test("WedgeReport: both cases")
    func wedgeReports() {
        #expect(WedgeReport.powerCycle(attempt: 2, of: 3, adapter: Self.adapter).token == "power-cycle 2/3 00:AA:01:00:00:00")
        #expect(WedgeReport.capReached(done: 3, of: 3, adapter: Self.adapter).token == "cap-reached 3/3 00:AA:01:00:00:00")
    }

    @Test("ResumeEscalation: every step, with and without its counts and times")
    func resumeEscalations() {
        let table: [(ResumeEscalation, String)] = [
            (.init(step: .autoConnect), "auto-connect-and-connect"),
            (.init(step: .away, after: .seconds(12), deadline: .seconds(10)), "away after 12.0 s (deadline 10.0 s)"),
            (.init(step: .away, after: .milliseconds(12_340), deadline: .milliseconds(9_960)), "away after 12.3 s (deadline 10.0 s)"),
            (.init(step: .powerCycle, powerCycles: 1, powerCycleCap: 2), "power-cycle 1/2"),
            (.init(step: .powerCycle, powerCycles: 1, powerCycleCap: 2, after: .seconds(60), deadline: .seconds(60)),
             "power-cycle 1/2 after 60.0 s (deadline 60.0 s)"),
            (.init(step: .capReached, powerCycles: 0, powerCycleCap: 0, after: .seconds(60), deadline: .seconds(60)),
             "power-cycle-cap-reached 0/0 after 60.0 s (deadline 60.0 s)"),
        ]
        for (escalation, token) in table {
            #expect(escalation.token == token, "\(escalation)")
            #expect(ReportReason.resume(escalation).token == token)
        }
        #expect(ResumeEscalation(step: .powerCycle, powerCycles: 1, powerCycleCap: 2, after: .seconds(60), deadline: .seconds(60)).detail
            == "1/2 after 60.0 s (deadline 60.0 s)")
    }

    @Test("RepairReason: every case")
    func repairReasons() {
        let table: [(RepairReason, String)] = [
            (.deviceRemoved, "device-removed"),
            (.bondRemoved, "bond-removed"),
            (.authentication, "authentication"),
            (.deviceGone, "device-gone"),
            (.suspectedBondLoss, "suspected-bond-loss"),
            (.bluetoothdCrashes, "bluetoothd-crashed"),
            (.bondLostInCrash, "bond-lost-in-crash"),
            (.bluetoothdDiedOnLink, "bluetoothd-died-on-link"),
        ]
        #expect(table.count == RepairReason.allCases.count)
        for (reason, token) in table {
            #expect(reason.token == token, "\(reason)")
            #expect(ReportReason.repair(reason).token == token)
        }
    }

    @Test("BluetoothdWait: every case")
    func bluetoothdWaits() {
        let table: [(BluetoothdWait, String)] = [
            (.noSystemdUnit, "no systemd unit"),
            (.unitNotSettled, "systemd did not settle bluetooth.service"),
            (.unitResult("start-limit-hit"), "start-limit-hit"),
            (.systemdRestarts, "systemd restarts it"),
            (.notOnBusAtStart, "not on the bus when paird started"),
        ]
        for (wait, token) in table { #expect(wait.token == token, "\(wait)") }
    }

    @Test("DeviceState.Kind, PairingStep and ReportState: every case")
    func states() {
        let kinds: [(DeviceState.Kind, String)] = [
            (.restoring, "restoring"),
            (.connecting, "connecting"),
            (.discovering, "discovering"),
            (.connected, "connected"),
            (.waitingForDevice, "waitingForDevice"),
            (.disconnected, "disconnected"),
            (.needsRepair, "needsRepair"),
            (.adapterUnavailable, "adapterUnavailable"),
        ]
        #expect(kinds.count == DeviceState.Kind.allCases.count)
        for (kind, token) in kinds {
            #expect(kind.token == token, "\(kind)")
            #expect(ReportState.state(kind).token == token)
        }
        #expect(DeviceState.disconnected.name == "disconnected" && DeviceState.adapterUnavailable.kind == .adapterUnavailable)
        let steps: [(PairingStep, String)] = [
            (.scanning, "scanning"),
            (.removingOldBond, "removing-old-bond"),
            (.pairing, "pairing"),
            (.settling, "connecting"),
        ]
        #expect(steps.count == PairingStep.allCases.count)
        for (step, token) in steps {
            #expect(step.token == token, "\(step)")
            #expect(ReportState.pairing(step).token == token)
        }
        let words: [(ReportState, String)] = [(.paired, "paired"), (.unpaired, "unpaired"), (.refused, "refused")]
        for (state, token) in words { #expect(state.token == token, "\(state)") }
        let none = Report(kind: .adapterWedged, device: nil)
        #expect(none.fromToken == "" && none.toToken == "" && none.reasonToken == nil)
    }
}
