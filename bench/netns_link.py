"""Description: a bottleneck between network namespaces for the network
benches and tests (bench/net_scavenger.py, tests/integration/
test_net_scavenger.py).

    snd (10.77.1.1) --veth-- rtr (10.77.1.2 | 10.77.2.1) --veth-- rcv (10.77.2.2)
                                      tbf on rtr's egress toward rcv

The bottleneck sits in a router namespace, not on the sender's own
interface: a qdisc on the sender's host would be seen by its TCP (TCP
Small Queues, local congestion), which is not what a home uplink looks
like.  tbf with a large `latency` is a deep, bloated FIFO.  Needs root
(CAP_NET_ADMIN); everything is deleted on exit, also after a failure
(deleting a namespace deletes its veth ends and their qdiscs).
"""
import os
import shutil
import subprocess

LINK_BPS = 10_000_000 // 8      # tbf rate 10mbit, in bytes per second
SND_ADDR, RCV_ADDR = "10.77.1.1", "10.77.2.2"


def why_not():
    """None if this machine can build the link, else the reason."""
    if os.geteuid() != 0:
        return "network namespaces and tc need root"
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            return f"needs iproute2 ({tool} is not installed)"
    probe = f"dnprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode:
        return "cannot create a network namespace: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Bottleneck:
    def __init__(self, rate="10mbit", latency_ms=1000, tag=None, cc="cubic"):
        tag = tag or str(os.getpid())
        self.snd, self.rtr, self.rcv = (f"dn{tag}{x}" for x in ("snd", "rtr", "rcv"))
        self.rate, self.latency_ms, self.cc = rate, latency_ms, cc
        self.made = []

    def _sh(self, *cmd):
        subprocess.run(cmd, check=True, capture_output=True, text=True)

    def ns(self, name, *cmd):
        self._sh("ip", "netns", "exec", name, *cmd)

    def prefix(self, name):
        """The command prefix that runs a program inside namespace name
        (with the congestion control its peers should ask for)."""
        return ["ip", "netns", "exec", name, "env", f"DN_PEER_CC={self.cc}"]

    def __enter__(self):
        try:
            for n in (self.snd, self.rtr, self.rcv):
                self._sh("ip", "netns", "add", n)
                self.made.append(n)
                self.ns(n, "ip", "link", "set", "lo", "up")
            self._sh("ip", "link", "add", "s0", "netns", self.snd, "type", "veth",
                     "peer", "name", "r0", "netns", self.rtr)
            self._sh("ip", "link", "add", "r1", "netns", self.rtr, "type", "veth",
                     "peer", "name", "c0", "netns", self.rcv)
            self.ns(self.snd, "ip", "addr", "add", SND_ADDR + "/24", "dev", "s0")
            self.ns(self.rtr, "ip", "addr", "add", "10.77.1.2/24", "dev", "r0")
            self.ns(self.rtr, "ip", "addr", "add", "10.77.2.1/24", "dev", "r1")
            self.ns(self.rcv, "ip", "addr", "add", RCV_ADDR + "/24", "dev", "c0")
            for n, dev in ((self.snd, "s0"), (self.rtr, "r0"), (self.rtr, "r1"), (self.rcv, "c0")):
                self.ns(n, "ip", "link", "set", dev, "up")
            self.ns(self.snd, "ip", "route", "add", "default", "via", "10.77.1.2")
            self.ns(self.rcv, "ip", "route", "add", "default", "via", "10.77.2.1")
            self.ns(self.rtr, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            # The senders' congestion control: loss-based, as Linux's
            # default cubic, which fills a deep queue until it drops
            # (bufferbloat).  A new namespace inherits the host's choice,
            # bbr on this VM, which keeps its own queue short and hides the
            # problem; a namespace may only pick from the host's allowed
            # list (reno, bbr here), so the namespace gets reno and the
            # peers ask for cubic per socket (TCP_CONGESTION, as root:
            # net_scavenger_peer.py, DN_PEER_CC).
            self.ns(self.snd, "sysctl", "-qw", "net.ipv4.tcp_congestion_control=reno")
            # The bottleneck: 10 Mbit/s, a queue of `latency` (limit =
            # rate x latency + burst: ~1.25 MB at 1 s), on the way to rcv.
            self.ns(self.rtr, "tc", "qdisc", "add", "dev", "r1", "root", "tbf", "rate", self.rate,
                    "burst", "32kbit", "latency", f"{self.latency_ms}ms")
            return self
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc):
        for n in reversed(self.made):
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        self.made = []
        return False
