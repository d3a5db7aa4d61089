internal import CDBus

/// `org.freedesktop.DBus.Introspectable` for exported objects: the XML BlueZ and busctl read.
extension DBusConnection {
    // MARK: - Introspection

    /// The introspection document for `path`, or nil when nothing is exported at or below it.
    func introspectionXML(for path: String) -> String? {
        let object = objects[path]
        let isManager = objectManagers.contains(path)
        var children = Set<String>()
        for p in objects.keys where Self.isStrictDescendant(p, of: path) {
            let rest = path == "/" ? p.dropFirst() : p.dropFirst(path.count + 1)
            if let first = rest.split(separator: "/").first { children.insert(String(first)) }
        }
        guard object != nil || isManager || !children.isEmpty else { return nil }

        var xml = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        <node>
          <interface name="\(Standard.introspectable)">
            <method name="Introspect"><arg name="xml_data" type="s" direction="out"/></method>
          </interface>
          <interface name="\(Standard.peer)">
            <method name="Ping"/>
            <method name="GetMachineId"><arg name="machine_uuid" type="s" direction="out"/></method>
          </interface>

        """
        if object != nil {
            xml += """
              <interface name="\(Standard.properties)">
                <method name="Get"><arg name="interface_name" type="s" direction="in"/><arg name="property_name" type="s" direction="in"/><arg name="value" type="v" direction="out"/></method>
                <method name="GetAll"><arg name="interface_name" type="s" direction="in"/><arg name="props" type="a{sv}" direction="out"/></method>
                <method name="Set"><arg name="interface_name" type="s" direction="in"/><arg name="property_name" type="s" direction="in"/><arg name="value" type="v" direction="in"/></method>
                <signal name="PropertiesChanged"><arg name="interface_name" type="s"/><arg name="changed_properties" type="a{sv}"/><arg name="invalidated_properties" type="as"/></signal>
              </interface>

            """
        }
        if isManager {
            xml += """
              <interface name="\(Standard.objectManager)">
                <method name="GetManagedObjects"><arg name="objects" type="a{oa{sa{sv}}}" direction="out"/></method>
                <signal name="InterfacesAdded"><arg name="object" type="o"/><arg name="interfaces" type="a{sa{sv}}"/></signal>
                <signal name="InterfacesRemoved"><arg name="object" type="o"/><arg name="interfaces" type="as"/></signal>
              </interface>

            """
        }
        for iface in object?.interfaces ?? [] {
            xml += "  <interface name=\"\(Self.escape(iface.name))\">\n"
            for m in iface.methods {
                xml += "    <method name=\"\(Self.escape(m.name))\">"
                for (i, t) in (Syntax.completeTypes(m.inSignature) ?? []).enumerated() {
                    xml += "<arg name=\"arg\(i)\" type=\"\(Self.escape(String(t)))\" direction=\"in\"/>"
                }
                for (i, t) in (Syntax.completeTypes(m.outSignature) ?? []).enumerated() {
                    xml += "<arg name=\"out\(i)\" type=\"\(Self.escape(String(t)))\" direction=\"out\"/>"
                }
                xml += "</method>\n"
            }
            for p in iface.properties {
                let access = p.set == nil ? "read" : "readwrite"
                xml += "    <property name=\"\(Self.escape(p.name))\" type=\"\(Self.escape(p.signature))\" access=\"\(access)\"/>\n"
            }
            for s in iface.signals {
                xml += "    <signal name=\"\(Self.escape(s.name))\">"
                for (i, t) in (Syntax.completeTypes(s.signature) ?? []).enumerated() {
                    xml += "<arg name=\"arg\(i)\" type=\"\(Self.escape(String(t)))\"/>"
                }
                xml += "</signal>\n"
            }
            xml += "  </interface>\n"
        }
        for child in children.sorted() {
            xml += "  <node name=\"\(Self.escape(child))\"/>\n"
        }
        xml += "</node>\n"
        return xml
    }

    private static func escape(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for ch in s {
            switch ch {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(ch)
            }
        }
        return out
    }
}
