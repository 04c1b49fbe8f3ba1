"""Sets a VM's wall clock from the host's, to well under a millisecond (NTP's offset estimate, best of many).

Why: an emulated VM's clock starts from the virtual RTC, whole seconds only, so two VMs disagree by up to a
second; the training's ground truth (time.time() in each rank) and the probe's flow times (each agent's
clock) are compared across VMs. The VMs' clocks then advance at the host's rate (qemu derives them from the
host clock), so one setting at boot holds for a run; `measure` reports the residual offset (at the end).

  clocksync.py serve IP PORT        on the host side (in the run's namespace): answers each datagram with the
                                    host's time
  clocksync.py set IP PORT          in a VM: estimates host - VM, steps CLOCK_REALTIME by it, prints the
                                    offset and the round trip of the best exchange (ms)
  clocksync.py measure IP PORT      in a VM: prints the offset and round trip without changing anything
"""
import json
import socket
import struct
import sys
import time

EXCHANGES = 40  # the best of 40: under emulation a round trip is ~1-5 ms, and its lowest few are symmetric
SET_ROUNDS = 4  # steps at most (see main)
SET_RESIDUAL_S = 0.25e-3  # a residual the truth can live with: steps are ~1 s, error limits ~0.3 % of them


def serve(ip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, port))
    while True:
        data, peer = s.recvfrom(64)
        s.sendto(data[:8] + struct.pack("!d", time.time()), peer)


def estimate(ip, port):
    """(offset host - VM, round trip) of the exchange with the shortest round trip, in seconds."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    best = None
    for k in range(EXCHANGES):
        t1 = time.time()
        s.sendto(struct.pack("!q", k), (ip, port))
        try:
            data = s.recv(64)
        except socket.timeout:
            continue
        t4 = time.time()
        if len(data) != 16 or struct.unpack("!q", data[:8])[0] != k:
            continue
        t2 = struct.unpack("!d", data[8:])[0]
        rtt = t4 - t1
        if best is None or rtt < best[1]:
            best = (t2 - (t1 + t4) / 2, rtt)
    if best is None:
        sys.exit(f"clocksync: no answer from {ip}:{port}")
    return best


def main():
    mode, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "serve":
        serve(ip, port)
    off, rtt = estimate(ip, port)
    if mode == "set":
        # Stepped again while the residual is above 0.25 ms and above the exchange's own bound (half its round
        # trip): under emulation one best-of-40 estimate was 9 ms off once (residual 8.98 ms measured at a
        # 0.33 ms round trip right after the step, 8.34 ms at the end of the run), and the cross-node timing
        # of the truth and of the agents' views were then 9 ms apart.
        stepped, rounds = 0.0, 0
        while rounds < SET_ROUNDS:
            rounds += 1
            time.clock_settime(time.CLOCK_REALTIME, time.time() + off)
            stepped += off
            off, rtt = estimate(ip, port)
            if abs(off) <= max(SET_RESIDUAL_S, rtt / 2):
                break
        print(json.dumps({"stepped_ms": stepped * 1e3, "offset_ms": off * 1e3, "rtt_ms": rtt * 1e3,
                          "rounds": rounds}))
    else:
        print(json.dumps({"offset_ms": off * 1e3, "rtt_ms": rtt * 1e3}))


if __name__ == "__main__":
    main()
