#!/usr/bin/env python3
"""Build the vmirq-sim `this-host` costs (format vmirq-sim-costs-v1) from primitive
measurements only (issue 16). Usage: make-profile.py [--reentry] [--halt] [--v4] [--v5] [--v6] [--v7] [--v8] [--v9] [--v10] [--v11] [--v12] MEASURE_DIR > profile.json

--v11 (profile v11, fifteenth session, lead): v10 plus the device thread's own notification.
`vmirq kvm device`'s device thread polls its rings and completions in one loop and signals the
guest with an irqfd `write()` inside it; while it is in that call it sees nothing. Into a vCPU
that runs guest code the call includes KVM's kick IPI (an exit of its own on this nested
host); into a vCPU outside guest mode it is `irqfd_inject_ns`. New primitive, from the forced
interrupt loop (`vmirq kvm exits`' `forced_irq`, the writer's TSC before and after its
`write()` into the vCPU spinning in ring 3, since this session):
  device_notify_ns = exits forced_irq.write_ns p50 (median over rounds).
Chosen after seeing that a quiet device run's timer-bound `count` cell took 55 us between
notifications where the model's took 51, and after a loaded device run that recorded the
device thread's own write times (p50 6.4 us in that cell, 0.6 us in `none`); see the crate
README, fifteenth session. The number itself is a primitive of each window.

--v12 (profile v12, fifteenth session, lead, after the three v11 windows): v11 plus the
handler's return when a device interrupt is already pending (held in the IRR while
the masked handler ran, as `none`'s signals during the handler are): v1-v10 charged it the
return to ring 3 (`irq_return_ns`), then a forced exit and a delivery. New primitive, the
chained loop (`vmirq kvm exits`' `chained_irq`: the writer signals again as soon as the first
handler has logged its entry, so the second interrupt is pending at its `iretq`; rounds in
which the ring-3 loop ran between the two handlers are left out and counted):
  irq_chain_ns = exits chained_irq.iret_to_handler_ns p50 - 3 * insn (the probe handler's
                 two stores after its last TSC and the `iretq`'s own instruction, which the
                 device handler's isr_ns counts).
Chosen after seeing that the model's `none` cell puts its p50 on either side of a ~10 us gap
(window v11-b) and, post hoc, that taking the held interrupt at the `iretq` with the delivery
cost alone gave `none` a mean and p90 near the measured ones; the chained primitive was then
built and measured (8.3-8.4 us from the last TSC, against 15.4 us of return plus forced
delivery in `forced_irq`).

--v10 (profile v10, thirteenth session, lead): v9 with the IPI send's one instruction that a
paired difference takes away. A paired net cost is the operation's span minus the `nop`
span: the operation's instructions (`ipi_self`'s `mov ecx; mov eax; xor edx; wrmsr`) minus one
instruction. On this host every guest ring-0 instruction is emulated and costs `insn`
(~0.6 us), so the paired net is one `insn` short of the time the operation's own
instructions take. The wake program's sender (vmirq-kvm `guest/ipi.rs`) runs, after the
timestamp the composite counts from, exactly as many instructions up to and including its
ICR write (`mov r9d, edx; xchg eax, esi; xor edx, edx; wrmsr`) as the probe's operation
(`mov ecx; mov eax; xor edx; wrmsr`), so:
  ipi_send_other_ns = v9's ipi_send_other_ns + insn.
Chosen knowing that v8's and v9's polled IPI cells were predicted 20-35 % short (four quiet
windows with v8, the tenth session's loaded probe runs for v9); the correction is an
instruction count and `insn`, both fixed before any v10 window was measured. Every other cost
is v9's (the same subtraction in `wrmsr_exit_ns` for timer writes and EOIs is left as v8 has
it, so that only the IPI send moves).

--v9 (profile v9, tenth session, helper `icrprobe`): v8 plus the ICR write of an IPI to
*another* vCPU, from `vmirq kvm exits`' `ipi_other[]` (since vmirq-kvm ab5b392): vCPU 1
alternates the `ipi_self` span, aimed at APIC id 0 = vCPU 0, halted with KVM halt polling at
200 us as the polled wake cells' target, with a `nop` span, each after the target took the
previous IPI and 30 us more; the net cost is the p50 of the per-pair differences:
  ipi_send_other_ns = max(0, ipi_other[target=polled].net_ns.p50), median over the rounds
                      whose target polled (polled_share_pct >= 90); if none did, v8's
                      wrmsr_exit_ns (said so in the derivation). A round whose target's polls
                      failed (another task runnable on its CPU: a loaded host) measures the
                      ICR write to a sleeping target, which wakes its thread (~8-10 us here).
vmirq-sim charges it for every ICR write to another vCPU (`Costs::ipi_send_other`), i.e.
the IPI wake cells' send; wrmsr_exit_ns (the self-IPI) stays v8's for every other MSR or
register write it stands for (timer writes, EOIs, storage register exits, kicks). The
sleeping variant (polling off: the ICR write then also wakes the target's thread, the model's
kick) is recorded only, as ipi_other_sleeping_ns, with the polled variant's polled share
(ipi_other_polled_share_pct). Exits files without `ipi_other` stop the script.

--v8 (profile v8, ninth session, helper `simprobe`): v7 with the two exit costs it derives by
subtraction taken from `vmirq kvm exits`' paired loops (`paired[]`, since vmirq-kvm f0efc07),
where the operation alternates span by span with its reference in one loop of one VM and the
net cost is the p50 of the per-pair differences, instead of one loop's p50 minus another
loop's p50 measured in another VM a moment earlier (the empty-loop baseline those subtract
moved 4.9-6.7 us between six quiet runs, and the net costs with it):
  wrmsr_exit_ns      = max(0, paired ipi_self against baseline: net_ns.p50)
                       (v1-v7: exits ipi_self net_p50_ns, recorded as wrmsr_exit_ns);
  guest_irq_entry_ns = max(insn, paired irq_entry against pio_user: net_ns.p50), the same
                       difference v5-v7 take (irq_entry net p50 - pio_user net p50, recorded
                       as irq_entry_ns) pair by pair; running_irq_exit_ns (v6: forced
                       to_handler p50 - guest_irq_entry_ns) follows it.
Every other cost, spread and mapping is v7's; insn (baseline raw p50 / 6, a level, not a
difference) is unchanged. Exits files without `paired` stop the script.

--v7 (profile v7, eighth session, helper `simvar`): v6 plus the measured spread of the four
exit costs the device path charges, from the same primitives' distributions (`vmirq kvm
exits` records min/p50/p90 of every loop): for each, `_lo_ns` = p50 - min and `_hi_ns` =
p90 - p50 of its primitive (per round; the profile takes the median over rounds):
  doorbell_exit_{lo,hi}_ns     from exits doorbell_user3 raw_ns;
  running_irq_exit_{lo,hi}_ns  from exits forced_irq.to_handler_ns;
  irq_return_{lo,hi}_ns        from exits forced_irq.return_ns;
  guest_irq_entry_{lo,hi}_ns   from exits irq_entry raw_ns.
The model then charges each of these per event, drawn from a piecewise-linear distribution
through (min, p50, p90) (vmirq-sim `costs::spread_draw`), not at the p50 every time. The
p50s, and every other cost, are v6's.

--v6 (profile v6, seventh session, helper `simdev`): v5 plus two primitives, each measured
without the composites:
  running_irq_exit_ns = exits forced_irq.to_handler_ns p50 - guest_irq_entry_ns: vCPU 0 spins
      in guest ring 3 (native) reading the TSC; a writer on CPU 1 writes the irqfd; the
      handler's first `rdtsc` minus the spinner's last `rdtsc` before it is the time the
      running guest stops making progress until its handler starts: the forced exit, KVM's
      injection at the re-entry and the delivery. The delivery is already charged as
      guest_irq_entry_ns (v5's irq_entry primitive), so the exit is the rest. v5 charged
      the ring-3 doorbell (an MMIO store, its decode and an ioeventfd) as an upper bound.
  irq_return_ns = exits forced_irq.return_ns p50 - insn: the same loop, the handler's TSC
      before `iretq` to the ring-3 loop's next TSC: the return out of the emulated ring 0
      into native ring 3. The device scenario's isr_ns counts `iretq` as one emulated
      instruction (26 x insn), so the charge is the rest; v1-v5 charged nothing more.
      Recorded: forced_irq.lost_ns (to_handler + return), handler_ns, arrival_ns.
  host_idle_deep_exit_ns / host_idle_deep_residency_ns: probe `wake` 1->0 after idling 20,
      30, 50 and 100 us (p50, median over rounds per gap). The gaps split into short and long
      at the place where the mean wake of the long ones minus that of the short ones is
      largest; that difference is the deep state's extra exit latency (0 if under 300 ns:
      no step), the middle between the two gaps at the split its target residency. The
      governor (menu-like, the model's existing mechanism) picks the state per idle.
      sched_wakeup_ns is then the short-idle wake: mean wake p50 over the short gaps minus
      the write() p50 at 100 us (the kick's measurement), plus vcpu_block_ns as in v5.
      Recorded only: `pollnotice` after the same gaps (a polled thread; no model mechanism
      makes the poll's notice depend on the gap) and `timerfd` after 20/30/50/100 us.
  The device model's handler masks interrupts (predict-then-measure.sh sets
  `workload.isr_masks_irqs=true` with --v6): not a cost, a model fix; see README.

--v5 (profile v5, sixth session, helper `simwake`): v4 plus four primitives, each one
mechanism measured without the composites, that v1-v4 charged from an instruction count or
an assumption instead:
  guest_irq_entry_ns = exits irq_entry net p50 - pio_user net p50: a pending interrupt
      injected at a VM entry up to the handler's first `rdtsc`, against the same span with
      the loop's `rdtsc` after the entry (the `sti` before the `out` stands in for the
      handler's `rdtsc` that v1-v4 counted as 1 insn). v1-v4: 2 * insn, a count of emulator
      steps; the delivery (IDT walk, frame push, in PVM's emulator) was never timed.
  irqfd_inject_ns = exits irqfd_write.irqfd_ns p50: the sender's irqfd `write()` from the
      other CPU into a vCPU outside guest mode (as in KVM's poll loop): signal, KVM's irqfd
      callback, MSI, IRR, a kick that wakes no thread. v1-v4 charged nothing for it on a
      polled wake (the post-hoc idea of the first prediction, now a primitive).
  kick_ns = probe wake write() p50 - exits irqfd_write.plain_ns p50: the part of a write
      that wakes a sleeping thread (ttwu, the IPI to the idle CPU) beyond the signal, which
      irqfd_inject_ns already charges on the irqfd path. (On the IPI path the kick follows
      the ICR write, as before.)
  sched_wakeup_ns = probe wake p50 - write() p50 + vcpu_block_ns, where vcpu_block_ns =
      max(0, (exits timer slept p50 - timer polled p50) - (probe timerfd@20 p50 - probe
      timerspin@20 p50)): what sleeping adds to a wake by the vCPU's own LAPIC timer (same
      CPU, no sender, no irqfd) beyond what sleeping adds for a plain thread woken by its own
      timerfd on that CPU: KVM's block and resume of the vCPU thread (kvm_vcpu_block,
      kvm_sched_out/in = vcpu_put/vcpu_load, the nested guest's state). Charged on slept
      wakes only, the one cost the model charges there and nowhere else. Recorded with the
      timer loop's polled share: below ~90 % (a loaded host) the polled loop mostly slept too
      and the difference means little.
  doorbell_exit_ns = exits doorbell_user3 p50: `vmirq kvm device`'s ring-3 driver's doorbell
      (an MMIO store to an ioeventfd from native ring 3: a real exit). v1-v4 charged the
      storage model's register exit (exit_roundtrip_ns + wrmsr_exit_ns, ring-0 costs).
  running_irq_exit_ns = exits doorbell_user3 p50 as well: an interrupt forced into a vCPU
      running ring-3 code (the device driver) takes it out of hardware ring 3 through PVM's
      switcher and back, a real exit; v1-v4 charged exit_roundtrip_ns = insn, an emulated
      ring-0 step, which it is not. The doorbell is the only real exit from ring 3 measured
      here (`out` faults in ring 3 on this host; `cpuid` from ring 3, 0.97 us flat, exits to
      the outer hypervisor, not to PVM: recorded as cpuid_user3_ns only), and it includes
      the MMIO store's decode, so this charge is an upper bound of the forced exit.

--v4 (profile v4, fifth session): v1's mapping (no re-entry penalty, no halt round trip) plus
`halt_poll_notice_ns` = probe `pollnotice` p50: KVM's halt-poll loop (check, PAUSE, clock
read) noticing an interrupt made pending by the other CPU, charged on polled wakes only (v1
charged nothing for it). Why v1's sleeping mapping and not v2's: the `hlt_pending` primitive
(erratum) puts nothing extra on the halt path, and the re-entry probe's thread returns to user
space and re-enters through `KVM_RUN`, which a vCPU thread woken inside `kvm_vcpu_block`
does not do. Said openly: the 07:43 quiet composites (v1 sleeping 0.70x, v2/v3 further off)
were known when this choice was made. Recorded, not used: `vmirq kvm exits`' LAPIC-timer
loops (`timer`: its running reference waits for an `out` iteration of unknown length, see
README), `signal`, `timerfd`, `wake` at 30 us.

--halt (profile v3, fourth session, added after the polled wakes of the first prediction were
measured at 1.8-2.9x the prediction): add to `vm_entry_ns` half of KVM's halt handling beyond
an emulated instruction, from `vmirq kvm exits`: `hlt_pending` (a HLT that finds a self-IPI
pending, then the handler) minus `irq_pending` (the same with an `out` to the VMM in place of
the HLT) plus `pio_user`'s net cost (that exit to the VMM). Half: a wake contains only the part
after the wake is noticed, and no probe splits it (an assumption). Erratum: profile v3
(commit ae8a6ed) was made when `irq_pending` had a `nop` in place of the `out`, which on this
host never took the interrupt, so v3's "halt round trip" (8.58 us, `vm_entry_ns` = half of it)
was the interrupt's delivery and handler, not the halt; the corrected difference is 0 +- 0.07
us (3 runs, 06:28 UTC), so `--halt` on a new measurement gives `vm_entry_ns` = insn.

Inputs (written by measure-primitives.sh): MEASURE_DIR/primitives.jsonl (host probes,
primitives.c) and MEASURE_DIR/exits-*.json (`vmirq kvm exits --json`). Every derived cost
is computed per round, and the profile takes the median over rounds; min and max are
recorded next to it. The composite wake latencies `vmirq kvm exits` also prints
(`hlt_wakeup_sleeping`, `hlt_wakeup_polling`) are what the profile must predict, so they
are never read here; nor is `irq_inject` (an interrupt to a *running* vCPU: a forced exit
through the outer hypervisor plus delivery, not the model's `guest_irq_entry_ns`).

Mapping (fixed before the prediction; the reasoning is in README "This host"):
  insn      = exits baseline raw p50 / 6: the baseline sample spans 6 guest ring-0
              instructions (mov, mov, xor, xor, nop, rdtsc); on this nested PVM host guest
              ring 0 is emulated, each instruction a trip into the host's emulator.
  kick_ns          = probe `wake` write() p50: the sender's eventfd write that wakes a
                     thread sleeping on the other CPU (irqfd -> kvm_vcpu_kick -> wake_up).
  sched_wakeup_ns  = probe `wake` p50 minus its write() p50: the rest of the cross-CPU
                     wakeup until the woken thread runs (outer hypervisor idle exit included).
  poll_notice_ns   = probe `notice` p50: a store seen by a spinner on the other CPU.
  wrmsr_exit_ns    = exits ipi_self net p50: the ICR write as the guest sender runs it.
  exit_roundtrip_ns = insn: an exit handled in the host kernel and back (here every guest
                     ring-0 instruction is one).
  vm_entry_ns      = insn: resuming the emulated guest after a halt (one world switch).
  guest_irq_entry_ns = 2 * insn: the event delivery into emulated ring 0 (one emulator
                     step) plus the handler's first instruction (the rdtsc that ends the
                     measured latency).
  context_switch_ns = probe `wake` p50 minus write() p50 as well (no better probe here).
"""
import glob
import json
import os
import statistics
import sys


def med_min_max(xs):
    return [round(statistics.median(xs)), min(xs), max(xs)]


def main():
    args = sys.argv[1:]
    reentry = "--reentry" in args
    halt = "--halt" in args
    v12 = "--v12" in args
    v11 = "--v11" in args or v12
    v10 = "--v10" in args or v11
    v9 = "--v9" in args or v10
    v8 = "--v8" in args or v9
    v7 = "--v7" in args or v8
    v6 = "--v6" in args or v7
    v5 = "--v5" in args or v6
    v4 = "--v4" in args or v5
    if v4 and (reentry or halt):
        sys.exit("--v4/--v5 are v1's mapping plus primitives: no --reentry or --halt with them")
    d = [a for a in args if a not in ("--reentry", "--halt", "--v4", "--v5", "--v6", "--v7", "--v8", "--v9", "--v10", "--v11", "--v12")][0]
    rows = [json.loads(l) for l in open(os.path.join(d, "primitives.jsonl")) if l.strip()]
    exits = {}
    for p in sorted(glob.glob(os.path.join(d, "exits-*.json"))):
        r = int(os.path.basename(p)[6:-5])
        exits[r] = json.load(open(p))
    rounds = sorted(set(x["round"] for x in rows) & set(exits))
    if not rounds:
        sys.exit("no round has both probes and exits")

    def probe(r, mode, interval):
        for x in rows:
            if x["round"] == r and x["mode"] == mode and x["interval_us"] == interval:
                return x
        raise KeyError((r, mode, interval))

    def op(r, name):
        for o in exits[r]["ops"]:
            if o["op"] == name:
                return o
        raise KeyError((r, name))

    def paired(r, name, reference):
        if "paired" not in exits[r]:
            sys.exit(f"--v8: exits-{r}.json has no paired loops (vmirq kvm exits before f0efc07)")
        for p in exits[r]["paired"]:
            if p["op"] == name and p["reference"] == reference:
                return p
        raise KeyError((r, name, reference))

    def ipi_other(r, target):
        if "ipi_other" not in exits[r]:
            sys.exit(f"--v9: exits-{r}.json has no ipi_other (vmirq kvm exits before ab5b392)")
        for c in exits[r]["ipi_other"]:
            if c["target"] == target:
                return c
        return None

    per = {k: [] for k in ["insn", "kick_ns", "sched_wakeup_ns", "poll_notice_ns",
                           "wrmsr_exit_ns", "wake_30_ns", "timerfd_ns", "reentry_penalty_ns",
                           "halt_roundtrip_ns", "signal_ns", "halt_poll_notice_ns",
                           "timer_polled_extra_ns", "timer_slept_extra_ns",
                           "irq_entry_ns", "irqfd_write_ns", "eventfd_write_ns",
                           "vcpu_block_ns", "timer_slept_minus_polled_ns",
                           "timerfd_minus_timerspin_ns", "timer_polled_share_pct",
                           "doorbell_user3_ns", "cpuid_user3_ns",
                           "forced_to_handler_ns", "forced_return_ns", "forced_lost_ns",
                           "forced_handler_ns", "forced_arrival_ns", "forced_write_ns",
                           "chained_iret_ns"]}
    spreads = {"doorbell_exit": ("op", "doorbell_user3", "raw_ns"),
               "running_irq_exit": ("forced_irq", "to_handler_ns"),
               "irq_return": ("forced_irq", "return_ns"),
               "guest_irq_entry": ("op", "irq_entry", "raw_ns")}
    if v8:
        per["ipi_self_paired_ns"] = []
        per["irq_entry_paired_ns"] = []
    if v9:
        for k in ("ipi_other_polled_ns", "ipi_other_sleeping_ns", "ipi_other_polled_share_pct"):
            per[k] = []
    for c in spreads:
        per[f"{c}_lo_ns"] = []
        per[f"{c}_hi_ns"] = []
    gaps = [20, 30, 50, 100]
    for g in gaps:
        for m in ("wake", "pollnotice", "timerfd"):
            per[f"{m}_{g}_ns"] = []
    for r in rounds:
        w = probe(r, "wake", 100)
        per["insn"].append(round(op(r, "baseline")["raw_ns"]["p50"] / 6))
        per["kick_ns"].append(w["write_ns"][0])
        per["sched_wakeup_ns"].append(w["wake_ns"][0] - w["write_ns"][0])
        per["poll_notice_ns"].append(probe(r, "notice", 100)["wake_ns"][0])
        per["wrmsr_exit_ns"].append(op(r, "ipi_self")["net_p50_ns"])
        per["wake_30_ns"].append(probe(r, "wake", 30)["wake_ns"][0])
        per["timerfd_ns"].append(probe(r, "timerfd", 100)["wake_ns"][0])
        if v4:
            per["halt_poll_notice_ns"].append(probe(r, "pollnotice", 100)["wake_ns"][0])
            per["signal_ns"].append(probe(r, "signal", 100)["wake_ns"][0])
            t = exits[r].get("timer")
            if t:  # recorded only
                per["timer_polled_extra_ns"].append(t["polled_extra_ns"])
                per["timer_slept_extra_ns"].append(t["slept_extra_ns"])
        if v5:
            # A round whose exits run lost a loop (logged, null in the JSON) adds nothing
            # for that loop's costs; the medians are over the rounds that have it, and a
            # cost no round measured stops the script below (KeyError on its median).
            iw, t = exits[r].get("irqfd_write"), exits[r].get("timer")
            if not iw or not t:
                print(f"round {r}: exits has no irqfd_write or timer result: its v5 "
                      "inputs are left out", file=sys.stderr)
            per["irq_entry_ns"].append(op(r, "irq_entry")["net_p50_ns"]
                                       - op(r, "pio_user")["net_p50_ns"])
            if iw:
                per["irqfd_write_ns"].append(iw["irqfd_ns"]["p50"])
                per["eventfd_write_ns"].append(iw["plain_ns"]["p50"])
            if t:
                vcpu = t["slept"]["lat_ns"]["p50"] - t["polled"]["lat_ns"]["p50"]
                thread = (probe(r, "timerfd", 20)["wake_ns"][0]
                          - probe(r, "timerspin", 20)["wake_ns"][0])
                per["timer_slept_minus_polled_ns"].append(vcpu)
                per["timerfd_minus_timerspin_ns"].append(thread)
                per["vcpu_block_ns"].append(max(0, vcpu - thread))
                per["timer_polled_share_pct"].append(round(t["polled_share_pct"]))
            per["doorbell_user3_ns"].append(op(r, "doorbell_user3")["net_p50_ns"])
            per["cpuid_user3_ns"].append(op(r, "cpuid_user3")["net_p50_ns"])
        if v6:
            f = exits[r].get("forced_irq")
            if f:
                per["forced_to_handler_ns"].append(f["to_handler_ns"]["p50"])
                per["forced_return_ns"].append(f["return_ns"]["p50"])
                per["forced_lost_ns"].append(f["lost_ns"]["p50"])
                per["forced_handler_ns"].append(f["handler_ns"]["p50"])
                per["forced_arrival_ns"].append(f["arrival_ns"]["p50"])
                if "write_ns" in f:
                    per["forced_write_ns"].append(f["write_ns"]["p50"])
                elif v11:
                    sys.exit(f"--v11: exits-{r}.json's forced_irq has no write_ns "
                             "(vmirq kvm exits before the fifteenth session)")
            c = exits[r].get("chained_irq")
            if c and c["iret_to_handler_ns"]["n"] > 0:
                per["chained_iret_ns"].append(c["iret_to_handler_ns"]["p50"])
            elif c and v12:
                print(f"round {r}: no chained round took the interrupt at the iretq "
                      f"({c['ran_between']} ran between): left out", file=sys.stderr)
            elif v12:
                print(f"round {r}: exits has no chained_irq result: left out", file=sys.stderr)
            else:
                print(f"round {r}: exits has no forced_irq result: left out", file=sys.stderr)
            for g in gaps:
                for m, frm, to in (("wake", 1, 0), ("pollnotice", 1, 0), ("timerfd", 0, 0)):
                    for x in rows:
                        if (x["round"] == r and x["mode"] == m and x["interval_us"] == g
                                and x["from"] == frm and x["to"] == to):
                            per[f"{m}_{g}_ns"].append(x["wake_ns"][0])
                            break
        if v7:
            for c, src in spreads.items():
                if src[0] == "op":
                    q = op(r, src[1])[src[2]]
                else:
                    f = exits[r].get(src[0])
                    if not f:
                        continue
                    q = f[src[1]]
                per[f"{c}_lo_ns"].append(q["p50"] - q["min"])
                per[f"{c}_hi_ns"].append(q["p90"] - q["p50"])
        if v8:
            per["ipi_self_paired_ns"].append(paired(r, "ipi_self", "baseline")["net_ns"]["p50"])
            per["irq_entry_paired_ns"].append(paired(r, "irq_entry", "pio_user")["net_ns"]["p50"])
        if v9:
            # A round whose probe failed (logged, left out of the JSON) adds nothing; a
            # cost no round measured stops the script below (KeyError on its median).
            polled, sleeping = ipi_other(r, "polled"), ipi_other(r, "sleeping")
            if polled:
                per["ipi_other_polled_share_pct"].append(round(polled["polled_share_pct"]))
                if polled["polled_share_pct"] >= 90:
                    per["ipi_other_polled_ns"].append(polled["net_ns"]["p50"])
                else:
                    print(f"round {r}: the ICR probe's target polled "
                          f"{polled['polled_share_pct']:.0f} % of its halts: its "
                          f"{polled['net_ns']['p50']} ns is left out", file=sys.stderr)
            else:
                print(f"round {r}: exits has no polled ipi_other: left out", file=sys.stderr)
            if sleeping:
                per["ipi_other_sleeping_ns"].append(sleeping["net_ns"]["p50"])
        if reentry:
            per["reentry_penalty_ns"].append(exits[r]["reentry"]["penalty_ns"])
        if halt:
            per["halt_roundtrip_ns"].append(op(r, "hlt_pending")["raw_ns"]["p50"]
                                            - op(r, "irq_pending")["raw_ns"]["p50"]
                                            + op(r, "pio_user")["net_p50_ns"])
            try:
                per["signal_ns"].append(probe(r, "signal", 100)["wake_ns"][0])
            except KeyError:
                pass
    s = {k: med_min_max(v) for k, v in per.items() if v}
    insn = s["insn"][0]
    costs = {
        "kick_ns": s["kick_ns"][0],
        "sched_wakeup_ns": s["sched_wakeup_ns"][0] + (s["reentry_penalty_ns"][0] if reentry else 0),
        "context_switch_ns": s["sched_wakeup_ns"][0],
        "poll_notice_ns": s["poll_notice_ns"][0],
        "wrmsr_exit_ns": max(0, s["ipi_self_paired_ns"][0]) if v8 else s["wrmsr_exit_ns"][0],
        "exit_roundtrip_ns": insn,
        "vm_entry_ns": insn + max(0, s["halt_roundtrip_ns"][0]) // 2 if halt else insn,
        "guest_irq_entry_ns": 2 * insn,
    }
    if v4:
        costs["halt_poll_notice_ns"] = s["halt_poll_notice_ns"][0]
    if v5:
        costs["guest_irq_entry_ns"] = max(insn, s["irq_entry_paired_ns" if v8 else "irq_entry_ns"][0])
        costs["irqfd_inject_ns"] = s["irqfd_write_ns"][0]
        costs["kick_ns"] = max(0, s["kick_ns"][0] - s["eventfd_write_ns"][0])
        costs["sched_wakeup_ns"] = s["sched_wakeup_ns"][0] + s["vcpu_block_ns"][0]
        costs["doorbell_exit_ns"] = s["doorbell_user3_ns"][0]
        costs["running_irq_exit_ns"] = s["doorbell_user3_ns"][0]
    if v6:
        w = {g: s[f"wake_{g}_ns"][0] for g in gaps}  # KeyError: a gap no round measured
        best = None
        for k in range(1, len(gaps)):
            short, long_ = gaps[:k], gaps[k:]
            step = (sum(w[g] for g in long_) / len(long_)) - (sum(w[g] for g in short) / len(short))
            if best is None or step > best[0]:
                best = (step, k)
        step, k = best
        short = gaps[:k]
        w_short = sum(w[g] for g in short) / len(short)
        deep = round(step) if step >= 300 else 0
        s["idle_split"] = [k, gaps[k - 1], gaps[k]]
        costs["host_idle_deep_exit_ns"] = deep
        costs["host_idle_deep_residency_ns"] = (gaps[k - 1] + gaps[k]) * 500 if deep else 0
        costs["sched_wakeup_ns"] = (max(0, round(w_short) - s["kick_ns"][0])
                                    + s["vcpu_block_ns"][0])
        costs["running_irq_exit_ns"] = max(0, s["forced_to_handler_ns"][0]
                                           - costs["guest_irq_entry_ns"])
        costs["irq_return_ns"] = max(0, s["forced_return_ns"][0] - insn)
    if v7:
        for c in spreads:
            costs[f"{c}_lo_ns"] = s[f"{c}_lo_ns"][0]
            costs[f"{c}_hi_ns"] = s[f"{c}_hi_ns"][0]
    if v9:
        polled = s.get("ipi_other_polled_ns")
        costs["ipi_send_other_ns"] = max(0, polled[0]) if polled else costs["wrmsr_exit_ns"]
        if v10:
            costs["ipi_send_other_ns"] += insn
    if v11:
        costs["device_notify_ns"] = s["forced_write_ns"][0]
    if v12:
        costs["irq_chain_ns"] = max(0, s["chained_iret_ns"][0] - 3 * insn)
    dates = sorted(x["date"] for x in rows if x["round"] in rounds)
    loads = sorted((x["loadavg"] for x in rows if x["round"] in rounds), key=lambda s: float(s.split()[0]))
    out = {
        "format": "vmirq-sim-costs-v1",
        "source": f"this-host: {len(rounds)} rounds {dates[0]} .. {dates[-1]} (load averages "
                  f"{loads[0]} .. {loads[-1]}), crates/vmirq-sim/this-host/measure-primitives.sh "
                  f"+ make-profile.py",
        "costs_ns": costs,
        "inputs_median_min_max": s,
        "derivation": {
            "kick_ns": "probe wake 1->0 @100us: write() p50"
                       + (" - exits irqfd_write.plain_ns p50" if v5 else ""),
            "sched_wakeup_ns": "probe wake 1->0 @100us: wake p50 - write() p50"
                               + (" + exits reentry.penalty_ns" if reentry else "")
                               + (" + vcpu_block_ns (max(0, exits timer slept p50 - polled p50"
                                  " - (probe timerfd@20 p50 - timerspin@20 p50)))" if v5 else ""),
            "context_switch_ns": "probe wake 1->0 @100us: wake p50 - write() p50 (no separate probe)",
            "poll_notice_ns": "probe notice 1->0 @100us: p50",
            "wrmsr_exit_ns": ("max(0, exits paired ipi_self - baseline: p50 of per-pair differences)"
                              if v8 else "vmirq kvm exits: ipi_self net p50"),
            "exit_roundtrip_ns": "insn = vmirq kvm exits: baseline raw p50 / 6",
            "vm_entry_ns": ("insn + max(0, exits hlt_pending raw p50 - irq_pending raw p50"
                            " + pio_user net p50) / 2" if halt else "insn"),
            "guest_irq_entry_ns": ("max(insn, exits paired irq_entry - pio_user: p50 of per-pair "
                                   "differences)" if v8
                                   else "max(insn, exits irq_entry net p50 - pio_user net p50)"
                                   if v5 else "2 * insn"),
            **({"halt_poll_notice_ns": "probe pollnotice 1->0 @100us: p50 (PAUSE-and-clock spinner)"}
               if v4 else {}),
            **({"irqfd_inject_ns": "exits irqfd_write.irqfd_ns p50 (other CPU, vCPU outside guest mode)",
                "doorbell_exit_ns": "exits doorbell_user3 p50 (ring-3 MMIO store to an ioeventfd)",
                "running_irq_exit_ns": "exits doorbell_user3 p50 (the one real ring-3 exit measured; an upper bound)"}
               if v5 else {}),
            **({"running_irq_exit_ns": "exits forced_irq.to_handler_ns p50 - guest_irq_entry_ns "
                                       "(spinning ring-3 vCPU, irqfd from CPU 1: last spinner rdtsc "
                                       "to the handler's first rdtsc, minus the delivery)",
                "sched_wakeup_ns": "mean over the short gaps of probe wake 1->0 p50 - write() p50 @100us"
                                   " + vcpu_block_ns (as v5)",
                "host_idle_deep_exit_ns": "probe wake 1->0 p50: mean over the long gaps - mean over "
                                          "the short gaps (split where that is largest; 0 under 300 ns)",
                "host_idle_deep_residency_ns": "middle of the two gaps at the split",
                "irq_return_ns": "exits forced_irq.return_ns p50 - insn (iretq to ring 3 beyond "
                                 "the one instruction isr_ns counts)"}
               if v6 else {}),
            **({f"{c}_{side}_ns": (f"exits {'.'.join(src[1:]) if src[0] == 'op' else '.'.join(src)} "
                                   + ("p50 - min" if side == "lo" else "p90 - p50")
                                   + " (median over rounds; the per-event spread of "
                                   + f"{c}_ns, vmirq-sim costs::spread_draw)")
                for c, src in spreads.items() for side in ("lo", "hi")}
               if v7 else {}),
            **({"ipi_send_other_ns": ("max(0, exits ipi_other polled: vCPU 1's ICR write to halted "
                                      "vCPU 0 (halt poll 200 us, 30 us after its last wake) - nop: "
                                      "p50 of per-pair differences; rounds whose target polled "
                                      ">= 90 % of its halts); the IPI wake cells' send"
                                      if "ipi_other_polled_ns" in s else
                                      "wrmsr_exit_ns: no round's ICR probe target polled >= 90 % "
                                      "of its halts (a loaded host), so v8's self-IPI")
                                     + (" + insn (v10: the one instruction the paired "
                                        "difference takes away with its nop)" if v10 else "")}
               if v9 else {}),
            **({"device_notify_ns": "exits forced_irq.write_ns p50 (the writer's own irqfd write() "
                                    "into a vCPU spinning in guest ring 3: the kick's IPI inside "
                                    "it; what a polling device thread spends per notification)"}
               if v11 else {}),
            **({"irq_chain_ns": "exits chained_irq.iret_to_handler_ns p50 - 3 * insn (a second "
                                "irqfd interrupt pending at the first handler's iretq: iretq to "
                                "the next handler's first instruction, beyond the instructions "
                                "the handler's isr_ns counts)"}
               if v12 else {}),
            "not used": "exits hlt_wakeup_sleeping/hlt_wakeup_polling (composites to predict), "
                        "irq_inject (running vCPU), pio/mmio/hlt to user (no such path in "
                        "the scenarios); probes wake @30us, timerfd and signal are recorded only"
                        + ("; exits timer running loop and polled/slept extras recorded only"
                           if v5 else "; exits timer (LAPIC-timer wake loops) recorded only"
                           if v4 else ""),
        },
    }
    json.dump(out, sys.stdout, indent=1)
    print()


main()
