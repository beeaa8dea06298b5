#!/usr/bin/env python3
"""Captures the TCP streams on one interface (run inside its network namespace, as root) until
SIGTERM, then prints a JSON summary: bytes and streams seen, the ZeroMQ security mechanism each
stream's greeting names (ZMTP 3: 20 bytes at offset 12), and how many rectrain frames appear in
clear (a frame starts with the magic "RTNF", net.h). Used by bench/deploy_hosts.sh.

usage: sniff.py INTERFACE OUT.json
"""
import json
import signal
import socket
import struct
import sys

iface, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))  # ETH_P_ALL
s.bind((iface, 0))
s.settimeout(0.2)
streams = {}  # (src, sport, dst, dport) -> bytearray of its payload, in capture order
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    try:
        frame, addr = s.recvfrom(65535)
    except socket.timeout:
        continue
    if addr[2] == socket.PACKET_OUTGOING and iface == "lo":
        continue  # loopback shows each packet twice
    if len(frame) < 14 + 20 or struct.unpack("!H", frame[12:14])[0] != 0x0800:
        continue
    ip = frame[14:]
    ihl = (ip[0] & 15) * 4
    if ip[9] != 6:
        continue
    total = struct.unpack("!H", ip[2:4])[0]
    tcp = ip[ihl:total]
    off = (tcp[12] >> 4) * 4
    payload = tcp[off:]
    if not payload:
        continue
    key = (socket.inet_ntoa(ip[12:16]), struct.unpack("!H", tcp[0:2])[0],
           socket.inet_ntoa(ip[16:20]), struct.unpack("!H", tcp[2:4])[0])
    streams.setdefault(key, bytearray()).extend(payload)

mech = {}
frames = 0
for data in streams.values():
    if len(data) >= 32 and data[0] == 0xFF and data[9] == 0x7F:  # a ZMTP 3 greeting
        m = bytes(data[12:32]).rstrip(b"\0").decode("ascii", "replace")
        mech[m] = mech.get(m, 0) + 1
    frames += data.count(b"RTNF")
json.dump({"streams": len(streams), "bytes": sum(len(d) for d in streams.values()), "mechanisms": mech,
           "frames_in_clear": frames}, open(out, "w"))
