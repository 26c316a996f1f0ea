"""A host's systemd, as NVIDIA's MIG Manager reaches it: over the D-Bus system bus socket.

  python -m tests.testbed.fakehost.systemd_dbus --socket <host-root>/run/dbus/system_bus_socket --units units.json
      [--on-change 'CMD ARG...']

What the real one is: nvidia-mig-manager v0.15.0 (mig-parted `pkg/mig/reconfigure`, `internal/systemd`) connects to
systemd through go-systemd's `dbus.NewSystemConnectionContext` on every reconfiguration, at
`unix:path=<HOST_ROOT_MOUNT>/run/dbus/system_bus_socket` (the host's dbus-daemon, which routes to systemd). It stops and
restarts the host's GPU client units (and kubelet.service for a MIG mode change) when WITH_SHUTDOWN_HOST_GPU_CLIENTS is
set, and runs `daemon-reload` after persisting the selected config. Without a bus there, every reconfiguration fails
before it writes a label.

This endpoint plays the bus and systemd in one process, answering only what go-systemd v22 asks (D-Bus specification,
https://dbus.freedesktop.org/doc/dbus-specification.html; systemd's D-Bus API, org.freedesktop.systemd1(5)):
SASL EXTERNAL (any uid), NEGOTIATE_UNIX_FD, `org.freedesktop.DBus.Hello/AddMatch/RemoveMatch`,
`org.freedesktop.systemd1.Manager.ListUnitsByNames/GetUnit/StartUnit/StopUnit/RestartUnit/Reload` and
`org.freedesktop.DBus.Properties.Get/GetAll` on unit objects. A start/stop job completes at once and is announced with
the `JobRemoved` signal (result `done`) to every connection that asked for signals.

Units: the JSON file `--units` ({"kubelet.service": {"ActiveState": "active", "UnitFileState": "enabled", "Type":
"notify"}, ...}), rewritten on every change, so a test can read what was stopped; each job is also a line on standard
output (`StopUnit kubelet.service: inactive`). A unit not in it is `not-found`.
`--on-change CMD`: after a unit starts or stops, `CMD <unit> <active|inactive>` runs (the agents use it to show a
stopped kubelet.service as a NotReady node).
"""

import argparse
import json
import os
import shlex
import socket
import struct
import subprocess
import sys
import threading
import uuid
from pathlib import Path

BUS = "org.freedesktop.DBus"
SYSTEMD = "org.freedesktop.systemd1"
MANAGER = SYSTEMD + ".Manager"
MANAGER_PATH = "/org/freedesktop/systemd1"
UNIT_PREFIX = MANAGER_PATH + "/unit/"
PROPERTIES = BUS + ".Properties"
METHOD_CALL, METHOD_RETURN, ERROR, SIGNAL = 1, 2, 3, 4
NO_REPLY_EXPECTED = 0x1
PATH, INTERFACE, MEMBER, ERROR_NAME, REPLY_SERIAL, DESTINATION, SENDER, SIGNATURE, UNIX_FDS = range(1, 10)
FIELD_TYPES = {PATH: "o", INTERFACE: "s", MEMBER: "s", ERROR_NAME: "s", REPLY_SERIAL: "u", DESTINATION: "s",
               SENDER: "s", SIGNATURE: "g", UNIX_FDS: "u"}
FIXED = {"y": ("B", 1), "b": ("I", 4), "n": ("h", 2), "q": ("H", 2), "i": ("i", 4), "u": ("I", 4), "x": ("q", 8),
         "t": ("Q", 8), "d": ("d", 8), "h": ("I", 4)}
ALIGN = {"s": 4, "o": 4, "g": 1, "a": 4, "(": 8, "{": 8, "v": 1}


class Variant:
    """A D-Bus variant: its signature and value."""

    def __init__(self, signature, value):
        self.signature, self.value = signature, value

    def __repr__(self):
        return "Variant(%r, %r)" % (self.signature, self.value)


def split_signature(sig):
    """A signature as its complete types: 'sa{sv}(uo)' -> ['s', 'a{sv}', '(uo)']."""
    out, i = [], 0
    while i < len(sig):
        j = _complete_end(sig, i)
        out.append(sig[i:j])
        i = j
    return out


def _complete_end(sig, i):
    c = sig[i]
    if c == "a":
        return _complete_end(sig, i + 1)
    if c in "({":
        close = ")" if c == "(" else "}"
        depth, j = 0, i
        while True:
            if sig[j] == c:
                depth += 1
            elif sig[j] == close:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
    return i + 1


class Writer:
    def __init__(self):
        self.buf = bytearray()

    def pad(self, n):
        self.buf += b"\0" * (-len(self.buf) % n)

    def write(self, sig, value):
        c = sig[0]
        if c in FIXED:
            fmt, size = FIXED[c]
            self.pad(size)
            self.buf += struct.pack("<" + fmt, int(value) if c != "d" else value)
        elif c in "so":
            data = value.encode()
            self.pad(4)
            self.buf += struct.pack("<I", len(data)) + data + b"\0"
        elif c == "g":
            data = value.encode()
            self.buf += struct.pack("<B", len(data)) + data + b"\0"
        elif c == "v":
            self.write("g", value.signature)
            self.write(value.signature, value.value)
        elif c == "a":
            elem = sig[1:]
            self.pad(4)
            at = len(self.buf)
            self.buf += b"\0\0\0\0"
            self.pad(ALIGN.get(elem[0], FIXED.get(elem[0], (None, 1))[1]))
            start = len(self.buf)
            items = value.items() if elem[0] == "{" else value
            for item in items:
                self.write(elem, item)
            struct.pack_into("<I", self.buf, at, len(self.buf) - start)
        elif c in "({":
            self.pad(8)
            for part, item in zip(split_signature(sig[1:-1]), value):
                self.write(part, item)
        else:
            raise ValueError("cannot marshal type %r" % sig)

    def write_all(self, signature, values):
        for part, value in zip(split_signature(signature), values):
            self.write(part, value)


class Reader:
    def __init__(self, data, pos=0):
        self.data, self.pos = data, pos

    def align(self, n):
        self.pos += -self.pos % n

    def read(self, sig):
        c = sig[0]
        if c in FIXED:
            fmt, size = FIXED[c]
            self.align(size)
            (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
            self.pos += size
            return bool(value) if c == "b" else value
        if c in "so":
            self.align(4)
            (n,) = struct.unpack_from("<I", self.data, self.pos)
            value = self.data[self.pos + 4:self.pos + 4 + n].decode()
            self.pos += 4 + n + 1
            return value
        if c == "g":
            n = self.data[self.pos]
            value = self.data[self.pos + 1:self.pos + 1 + n].decode()
            self.pos += 1 + n + 1
            return value
        if c == "v":
            inner = self.read("g")
            return Variant(inner, self.read(inner))
        if c == "a":
            elem = sig[1:]
            self.align(4)
            (n,) = struct.unpack_from("<I", self.data, self.pos)
            self.pos += 4
            self.align(ALIGN.get(elem[0], FIXED.get(elem[0], (None, 1))[1]))
            end, items = self.pos + n, []
            while self.pos < end:
                items.append(self.read(elem))
            return dict(items) if elem[0] == "{" else items
        if c in "({":
            self.align(8)
            return tuple(self.read(part) for part in split_signature(sig[1:-1]))
        raise ValueError("cannot unmarshal type %r" % sig)

    def read_all(self, signature):
        return [self.read(part) for part in split_signature(signature)]


def encode_message(kind, serial, fields, signature="", body=(), flags=0):
    body_w = Writer()
    body_w.write_all(signature, body)
    if signature:
        fields = dict(fields)
        fields[SIGNATURE] = signature
    head = Writer()
    head.buf += struct.pack("<cBBBII", b"l", kind, flags, 1, len(body_w.buf), serial)
    head.write("a(yv)", [(code, Variant(FIELD_TYPES[code], value)) for code, value in sorted(fields.items())])
    head.pad(8)
    return bytes(head.buf + body_w.buf)


def bus_escape(name):
    """systemd's object path escaping of a unit name (as go-systemd's PathBusEscape)."""
    if not name:
        return "_"
    out = []
    for i, ch in enumerate(name.encode()):
        if (ord("a") <= ch <= ord("z") or ord("A") <= ch <= ord("Z") or (ord("0") <= ch <= ord("9") and i > 0)):
            out.append(chr(ch))
        else:
            out.append("_%02x" % ch)
    return "".join(out)


def bus_unescape(escaped):
    if escaped == "_":
        return ""
    out, i = bytearray(), 0
    while i < len(escaped):
        if escaped[i] == "_" and i + 3 <= len(escaped):
            out.append(int(escaped[i + 1:i + 3], 16))
            i += 3
        else:
            out += escaped[i].encode()
            i += 1
    return out.decode()


class DBusError(Exception):
    def __init__(self, name, message):
        super().__init__(message)
        self.name = name


class Systemd:
    """The unit table (a JSON file) and the jobs on it."""

    def __init__(self, units_file, on_change=None):
        self.units_file = Path(units_file)
        self.on_change = on_change
        self.lock = threading.Lock()
        self.job = 0

    def units(self):
        try:
            return json.loads(self.units_file.read_text())
        except (OSError, ValueError):
            return {}

    def save(self, units):
        tmp = self.units_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(units, indent=1, sort_keys=True))
        os.replace(tmp, self.units_file)

    @staticmethod
    def props(name, unit):
        if unit is None:
            return {"Id": name, "Description": name, "LoadState": "not-found", "ActiveState": "inactive",
                    "SubState": "dead", "UnitFileState": "", "Type": ""}
        active = unit.get("ActiveState", "inactive")
        return {"Id": name, "Description": unit.get("Description", name), "LoadState": unit.get("LoadState", "loaded"),
                "ActiveState": active, "SubState": unit.get("SubState", "running" if active == "active" else "dead"),
                "UnitFileState": unit.get("UnitFileState", "enabled"), "Type": unit.get("Type", "simple")}

    def prop(self, name):
        return self.props(name, self.units().get(name))

    def run_job(self, verb, name):
        """StartUnit/StopUnit/RestartUnit: done at once; returns (job id, job path)."""
        with self.lock:
            units = self.units()
            if name not in units:
                raise DBusError(SYSTEMD + ".NoSuchUnit", "Unit %s not found." % name)
            state = "inactive" if verb == "StopUnit" else "active"
            units[name].update({"ActiveState": state, "SubState": "dead" if state == "inactive" else "running"})
            self.save(units)
            self.job += 1
            job = self.job
        sys.stdout.write("%s %s: %s\n" % (verb, name, state))
        sys.stdout.flush()
        if self.on_change:
            subprocess.run(self.on_change + [name, state], check=False)
        return job, "%s/job/%d" % (MANAGER_PATH, job)


class Connection(threading.Thread):
    def __init__(self, server, sock, unique):
        super().__init__(daemon=True)
        self.server, self.sock, self.unique = server, sock, unique
        self.buf = b""
        self.serial = 0
        self.wants_signals = False
        self.send_lock = threading.Lock()

    # -- transport -------------------------------------------------------------------------
    def recv_more(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def read_line(self):
        while b"\r\n" not in self.buf:
            self.recv_more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode()

    def read_exact(self, n):
        while len(self.buf) < n:
            self.recv_more()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def send(self, kind, fields, signature="", body=()):
        with self.send_lock:
            self.serial += 1
            self.sock.sendall(encode_message(kind, self.serial, fields, signature, body))

    # -- protocol --------------------------------------------------------------------------
    def authenticate(self):
        if self.read_exact(1) != b"\0":
            raise EOFError
        while True:
            words = self.read_line().split()
            if not words:
                continue
            if words[0] == "AUTH" and len(words) == 2 and words[1] == "EXTERNAL":
                self.sock.sendall(b"DATA\r\n")  # no initial response (sd-bus): an empty challenge, then DATA
            elif (words[0] == "AUTH" and len(words) == 3 and words[1] == "EXTERNAL") or words[0] == "DATA":
                self.sock.sendall(b"OK %s\r\n" % self.server.guid.encode())
            elif words[0] == "AUTH":
                self.sock.sendall(b"REJECTED EXTERNAL\r\n")
            elif words[0] == "NEGOTIATE_UNIX_FD":
                self.sock.sendall(b"AGREE_UNIX_FD\r\n")
            elif words[0] == "BEGIN":
                return
            elif words[0] == "CANCEL":
                self.sock.sendall(b"REJECTED EXTERNAL\r\n")
            else:
                self.sock.sendall(b"ERROR\r\n")

    def read_message(self):
        head = self.read_exact(16)
        if head[0:1] != b"l":
            raise ValueError("only little-endian messages are handled")
        kind, flags, _version, body_len, serial, fields_len = struct.unpack_from("<BBBIII", head, 1)
        rest = self.read_exact(fields_len + (-(16 + fields_len) % 8) + body_len)
        data = head + rest
        fields = dict((code, v.value) for code, v in Reader(data, 12).read("a(yv)"))
        body_start = 16 + fields_len + (-(16 + fields_len) % 8)
        signature = fields.get(SIGNATURE, "")
        body = Reader(data, body_start).read_all(signature) if signature else []
        return kind, flags, serial, fields, body

    def run(self):
        try:
            self.authenticate()
            while True:
                kind, flags, serial, fields, body = self.read_message()
                if kind == METHOD_CALL:
                    self.dispatch(flags, serial, fields, body)
        except (EOFError, OSError, ValueError, struct.error):
            pass
        finally:
            self.server.drop(self)
            try:
                self.sock.close()
            except OSError:
                pass

    def reply(self, serial, sender, signature="", body=()):
        self.send(METHOD_RETURN, {REPLY_SERIAL: serial, DESTINATION: self.unique, SENDER: sender}, signature, body)

    def error(self, serial, sender, name, message):
        self.send(ERROR, {REPLY_SERIAL: serial, DESTINATION: self.unique, SENDER: sender, ERROR_NAME: name}, "s",
                  [message])

    def dispatch(self, flags, serial, fields, body):
        dest = fields.get(DESTINATION, "")
        sender = BUS if dest == BUS else self.server.systemd_name
        try:
            result = self.call(fields.get(PATH, ""), fields.get(INTERFACE, ""), fields.get(MEMBER, ""), body, dest)
        except DBusError as err:
            if not flags & NO_REPLY_EXPECTED:
                self.error(serial, sender, err.name, str(err))
            return
        signature, values, after = result
        if not flags & NO_REPLY_EXPECTED:
            self.reply(serial, sender, signature, values)
        if after:
            after()

    def call(self, path, interface, member, body, dest):
        systemd = self.server.systemd
        if dest == BUS:
            if member == "Hello":
                return "s", [self.unique], None
            if member in ("AddMatch", "RemoveMatch"):
                self.wants_signals = member == "AddMatch" or self.wants_signals
                return "", [], None
            if member == "GetNameOwner" and body and body[0] == SYSTEMD:
                return "s", [self.server.systemd_name], None
            raise DBusError(BUS + ".Error.UnknownMethod", "%s.%s is not provided here" % (interface, member))
        if path == MANAGER_PATH and interface in (MANAGER, ""):
            if member == "ListUnitsByNames":
                rows = []
                for name in body[0]:
                    p = systemd.prop(name)
                    rows.append((name, p["Description"], p["LoadState"], p["ActiveState"], p["SubState"], "",
                                 UNIT_PREFIX + bus_escape(name), 0, "", "/"))
                return "a(ssssssouso)", [rows], None
            if member == "GetUnit":
                if body[0] not in systemd.units():
                    raise DBusError(SYSTEMD + ".NoSuchUnit", "Unit %s not loaded." % body[0])
                return "o", [UNIT_PREFIX + bus_escape(body[0])], None
            if member in ("StartUnit", "StopUnit", "RestartUnit"):
                name = body[0]
                job, job_path = systemd.run_job(member, name)
                return "o", [job_path], lambda: self.server.signal_job_removed(job, job_path, name, "done")
            if member in ("Reload", "Reexecute"):
                return "", [], None
        if path.startswith(UNIT_PREFIX) and interface == PROPERTIES:
            props = systemd.prop(bus_unescape(path[len(UNIT_PREFIX):]))
            if member == "GetAll":
                return "a{sv}", [dict((k, Variant("s", v)) for k, v in props.items())], None
            if member == "Get":
                if body[1] not in props:
                    raise DBusError(BUS + ".Error.UnknownProperty", "Unknown property %s" % body[1])
                return "v", [Variant("s", props[body[1]])], None
        raise DBusError(BUS + ".Error.UnknownMethod", "%s.%s on %s is not provided here" % (interface, member, path))


class Server:
    def __init__(self, socket_path, systemd):
        self.socket_path = Path(socket_path)
        self.systemd = systemd
        self.guid = uuid.uuid4().hex
        self.systemd_name = ":1.0"
        self.connections = []
        self.lock = threading.Lock()
        self.count = 0

    def drop(self, conn):
        with self.lock:
            if conn in self.connections:
                self.connections.remove(conn)

    def signal_job_removed(self, job, job_path, unit, result):
        with self.lock:
            targets = [c for c in self.connections if c.wants_signals]
        for conn in targets:
            try:
                conn.send(SIGNAL, {PATH: MANAGER_PATH, INTERFACE: MANAGER, MEMBER: "JobRemoved",
                                   SENDER: self.systemd_name}, "uoss", [job, job_path, unit, result])
            except OSError:
                pass

    def serve(self):
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        if self.socket_path.exists():
            self.socket_path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Bound by its name from its own directory: a socket address holds at most 107 bytes, less than a pytest tmp
        # path with the node's work dir. Clients reach it by a short path (/host/run/dbus/... in the namespace).
        os.chdir(self.socket_path.parent)
        sock.bind(self.socket_path.name)
        sock.listen(16)
        while True:
            client = sock.accept()[0]
            with self.lock:
                self.count += 1
                conn = Connection(self, client, ":1.%d" % self.count)
                self.connections.append(conn)
            conn.start()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="path of the bus socket (<host-root>/run/dbus/system_bus_socket)")
    parser.add_argument("--units", required=True, help="JSON unit table (created with kubelet.service if missing)")
    parser.add_argument("--on-change", default=None,
                        help="command (one shell-quoted string) run with <unit> <state> after a change")
    args = parser.parse_args(argv)
    units = Path(args.units)
    if not units.exists():
        units.write_text(json.dumps({"kubelet.service": {"ActiveState": "active", "UnitFileState": "enabled",
                                                         "Type": "notify"}}, indent=1))
    server = Server(Path(args.socket).resolve(),
                    Systemd(units.resolve(), shlex.split(args.on_change) if args.on_change else None))
    sys.stdout.write("systemd D-Bus endpoint at %s\n" % args.socket)
    sys.stdout.flush()
    server.serve()


if __name__ == "__main__":
    main()
