"""nvml_clocks.py — a GPU's SM clock, power, power-cap share and energy through a timed stretch,
for the PyTorch peer (torch_peer.py), read as zerolab's report reads them (common/clocks.h): NVML
every 20 ms on a thread and once more at the end, from libnvidia-ml.so.1 through ctypes (no
pynvml needed); the energy from the board's energy counter, where it keeps one, timed by its moves
as common/clocks.h explains (it moves every 100 ms on H100 and H200).

A busy H100 or H200 on lab-1b runs at its power limit with its SM clock well under the highest,
so the two sides of a comparison are read beside the clock each ran at.

    c = Clocks("00000000:19:00.0")   # the GPU's PCI bus id; nothing read yet
    c.start(); ...timed steps...; c.stop(steps)   # steps: how many ran between the two
    c.summary()  # {"readings": n, "sm_mhz_median": ..., ...} or {"readings": 0, "why": "..."}
"""
import ctypes
import statistics
import threading
import time

PERIOD_S = 0.020
NVML_CLOCK_SM = 1
POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap


class Clocks:
    def __init__(self, pci_bus_id):
        self.readings, self.why, self.steps = [], "", 0  # (sm MHz, power W, limit W, reasons, energy J or -1, s)
        self._stop, self._thread = threading.Event(), None
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            self._check(nvml.nvmlInit_v2(), nvml)
            self._dev = ctypes.c_void_p()
            self._check(nvml.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(self._dev)), nvml)
            self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                nvml.nvmlDeviceGetCurrentClocksThrottleReasons
            self._energy = getattr(nvml, "nvmlDeviceGetTotalEnergyConsumption", None)  # mJ; Volta and later
            self._nvml = nvml
        except (OSError, AttributeError, RuntimeError) as e:
            self._nvml, self.why = None, "NVML: %s" % e

    @staticmethod
    def _check(rc, nvml):
        if rc != 0:
            nvml.nvmlErrorString.restype = ctypes.c_char_p
            raise RuntimeError(nvml.nvmlErrorString(rc).decode())

    def _read(self):
        mhz, mw, limit, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        n = self._nvml
        for rc in (n.nvmlDeviceGetClockInfo(self._dev, NVML_CLOCK_SM, ctypes.byref(mhz)),
                   n.nvmlDeviceGetPowerUsage(self._dev, ctypes.byref(mw)),
                   n.nvmlDeviceGetEnforcedPowerLimit(self._dev, ctypes.byref(limit)),
                   self._reasons(self._dev, ctypes.byref(reasons))):
            if rc != 0:
                self.why = "NVML error %d while reading" % rc
                return False
        mj = ctypes.c_ulonglong()  # the energy counter is optional: clocks are read without it
        energy = mj.value / 1e3 if self._energy and self._energy(self._dev, ctypes.byref(mj)) == 0 else -1.0
        self.readings.append((mhz.value, mw.value / 1e3, limit.value / 1e3, reasons.value, energy, time.monotonic()))
        return True

    def _loop(self):
        while not self._stop.wait(PERIOD_S) and self._read():
            pass

    def start(self):
        """The first reading now (outside the timed work), then every 20 ms on a thread."""
        if self._nvml is not None and self._read():
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def stop(self, steps=0):
        """Stop reading, with one last reading now: the energy then covers the `steps` timed steps."""
        self._stop.set()
        if self._thread:
            self._thread.join()
            if not self.why and self._read():
                self.steps = steps

    def summary(self):
        """The readings' medians, power-cap share and energy, zerolab's JSON `clocks` keys."""
        if not self.readings:
            return {"readings": 0, "why": self.why or "not started"}
        return summarize(self.readings, self.steps)


def summarize(readings, steps=0):
    sm = [r[0] for r in readings]
    s = {"readings": len(readings), "period_ms": PERIOD_S * 1e3, "sm_mhz_median": statistics.median(sm),
         "sm_mhz_min": min(sm), "sm_mhz_max": max(sm),
         "power_w_median": statistics.median(r[1] for r in readings), "power_limit_w": readings[-1][2],
         "power_cap_fraction": sum(1 for r in readings if r[3] & POWER_CAP) / len(readings)}
    return {**s, **energy(readings, steps)}


def energy(readings, steps=0):
    """The counter's moves (energy_updates) and, with two or more, the mean power between the first
    and the last move (each taken half-way between the reading that saw it and the one before)
    over the readings' span: zerolab's summarize_energy (common/clocks.c)."""
    e, t = [r[4] for r in readings], [r[5] for r in readings]
    if e[0] < 0 or any(b < a for a, b in zip(e, e[1:])):
        return {}  # no counter, or one that went back (a driver reload)
    moves = [i for i in range(1, len(e)) if e[i] > e[i - 1]]
    out = {"energy_updates": len(moves)}
    if len(moves) < 2:
        return out
    first, last = moves[0], moves[-1]
    t_first, t_last = (t[first - 1] + t[first]) / 2, (t[last - 1] + t[last]) / 2
    if t_last <= t_first:
        return out
    w = (e[last] - e[first]) / (t_last - t_first)
    out = {**out, "energy_w": w, "energy_j": w * (t[-1] - t[0])}
    if steps > 0:
        out = {**out, "energy_steps": steps, "energy_j_per_step": out["energy_j"] / steps}
    return out


if __name__ == "__main__":  # a check without a GPU: the summary by hand, and NVML's absence said
    r = [(1980, 120.0, 700.0, 0x1, 5000.25, 1.00), (1440, 690.0, 700.0, 0x4, 5010.0, 1.02),
         (1230, 699.0, 700.0, 0x24, 5010.0, 1.04), (1410, 688.0, 700.0, 0x80, 5040.0, 1.06),
         (1470, 650.0, 650.0, 0x48, 5069.0, 1.07)]  # the last reading sooner, as at a stop
    s = summarize(r, steps=4)
    assert (s["sm_mhz_median"], s["sm_mhz_min"], s["sm_mhz_max"]) == (1440, 1230, 1980), s
    assert (s["power_w_median"], s["power_limit_w"], s["power_cap_fraction"]) == (688.0, 650.0, 0.4), s
    # moves at 1.01, 1.05 and 1.065 s: 59 J from the first to the last, 0.055 s, over the span's 0.07
    assert s["energy_updates"] == 3 and abs(s["energy_w"] - 59 / 0.055) < 1e-6, s
    assert abs(s["energy_j"] - 59 / 0.055 * 0.07) < 1e-9 and s["energy_steps"] == 4, s
    assert abs(s["energy_j_per_step"] - s["energy_j"] / 4) < 1e-12, s
    assert "energy_j_per_step" not in summarize(r) and abs(summarize(r)["energy_j"] - s["energy_j"]) < 1e-12
    # a counter moving every 100 ms read every 20 ms, 5000 J + 700 W at its moves 0.1 m + 0.01 s:
    # 700 W over the 0.86 s span, 602 J, where the rise end to end is 630
    import math
    c = [(1410, 690.0, 700.0, 0x4, 5000 + 700 * (math.floor((0.02 * j - 0.01) / 0.1 + 1e-9) * 0.1 + 0.01), 0.02 * j)
         for j in range(44)]
    s = summarize(c, steps=8)
    assert s["energy_updates"] == 9 and abs(s["energy_w"] - 700) < 1e-9 and abs(s["energy_j"] - 602) < 1e-9, s
    assert abs((c[-1][4] - c[0][4]) - 630) < 1e-9
    assert summarize(r[:2])["energy_updates"] == 1 and "energy_j" not in summarize(r[:2])  # one move: no power
    assert "energy_updates" not in summarize(r[:4] + [r[4][:4] + (-1.0, 1.07)])  # no counter at the end
    assert "energy_updates" not in summarize(r[:4] + [r[4][:4] + (12.0, 1.07)])  # a counter that went back
    k = Clocks("00000000:00:00.0")
    k.start(), k.stop()
    print("nvml_clocks: summary ok;", k.summary())
