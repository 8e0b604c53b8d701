//! The policy-spec syntax: every policy parses, prints back canonically, and bad specs are
//! refused with an error that names the problem.

use vmirq_policy::moderation::Moderator;
use vmirq_policy::spec::{ModerationSpec, SpecError, WaitSpec};
use vmirq_policy::wait::Waiter;

fn m(s: &str) -> Result<ModerationSpec, SpecError> {
    s.parse()
}

fn w(s: &str) -> Result<WaitSpec, SpecError> {
    s.parse()
}

#[test]
fn every_moderation_policy_parses_and_round_trips() {
    for spec in [
        "none",
        "count",
        "count:usecs=100,frames=8",
        "vic",
        "vic:cif_low=2,iops_min=500,max_delay_us=100",
        "vic:table=8:1/2;32:1/10",
        "ipi-gap",
        "ipi-gap:gap_us=50",
        "dim",
        "dim:mode=cqe",
        "dim:variant=rdma",
        "dim:dir=tx,latency=on,share_pct=20",
        "dim-loop",
        "dim-loop:period_ms=1,mode=cqe,dir=tx",
        "dim-loop:period_ms=10000",
        "dim-lat",
        "dim-lat:ack_pct=20",
        "dim-lat:mode=cqe,small_bytes=128,short_pkts=1,gap_us=6",
        "dim-lat:wait=on",
        "dim-lat:overtake=on",
        "dim-lat:wait=on,overtake=on",
        "dim-lat:overtake=on,reserve=0",
        "dim-lat:overtake=on,reserve=32",
        "spdk",
        "spdk:delay_base_us=40,iops_threshold=100000",
        "budget",
        "budget:us=5",
    ] {
        let parsed = m(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let printed = parsed.to_string();
        assert_eq!(m(&printed), Ok(parsed), "{spec} printed as {printed}");
        let policy = parsed.build();
        assert_eq!(policy.in_flight(), 0);
    }
}

#[test]
fn canonical_form_omits_defaults() {
    assert_eq!(
        m("count:usecs=50,frames=32").map(|s| s.to_string()),
        Ok("count".into())
    );
    assert_eq!(
        m(" vic : cif_low=3 ").map(|s| s.to_string()),
        Ok("vic:cif_low=3".into())
    );
    assert_eq!(
        m("dim-loop:period_ms=10,mode=eqe").map(|s| s.to_string()),
        Ok("dim-loop".into())
    );
    assert_eq!(
        m("dim-lat:ack_pct=50,gap_us=15,dir=tx").map(|s| s.to_string()),
        Ok("dim-lat:dir=tx".into())
    );
    assert_eq!(
        w("kvm:max_ns=200_000").map(|s| s.to_string()),
        Ok("kvm".into())
    );
    assert_eq!(
        w("fixed:us=20").map(|s| s.to_string()),
        Ok("fixed:ns=20000".into())
    );
}

#[test]
fn every_wait_policy_parses_and_round_trips() {
    for spec in [
        "never",
        "fixed",
        "fixed:ns=1000",
        "kvm",
        "kvm:max_ns=50000,grow=4,grow_start_ns=2000,shrink=0",
        "guest-haltpoll",
        "guest-haltpoll:allow_shrink=off,max_ns=300000",
        "histogram",
        "histogram:max_ns=100000,wake_ns=5000,cpu_pct=50",
        "histogram:forget=0",
        "histogram:forget=32",
    ] {
        let parsed = w(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(w(&parsed.to_string()), Ok(parsed), "{spec}");
        let waiter = parsed.build();
        assert!(waiter.window_ns() <= waiter.max_window_ns());
    }
}

#[test]
fn errors_name_the_bad_part_and_the_allowed_ones() {
    let e = m("count:usec=5").unwrap_err().to_string();
    assert!(e.contains("usec") && e.contains("usecs, frames"), "{e}");
    let e = m("vic:table=8:3/2").unwrap_err().to_string();
    assert!(e.contains("table=8:3/2"), "{e}");
    let e = m("vic:table=8:1/2;4:1/4").unwrap_err().to_string();
    assert!(e.contains("CIF increasing"), "{e}");
    let e = m("coalesce").unwrap_err().to_string();
    assert!(e.contains("coalesce") && e.contains("vic"), "{e}");
    let e = m("count:usecs=5,usecs=6").unwrap_err().to_string();
    assert!(e.contains("twice"), "{e}");
    let e = m("count:usecs").unwrap_err().to_string();
    assert!(e.contains("key=value"), "{e}");
    let e = m("dim:mode=fast").unwrap_err().to_string();
    assert!(e.contains("eqe or cqe"), "{e}");
    let e = m("dim-loop:period_ms=0").unwrap_err().to_string();
    assert!(e.contains("1 to 10000"), "{e}");
    let e = m("dim-loop:latency=on").unwrap_err().to_string();
    assert!(e.contains("period_ms, mode, dir"), "{e}");
    let e = m("dim-lat:ack_pct=101").unwrap_err().to_string();
    assert!(e.contains("percentage"), "{e}");
    let e = m("dim-lat:variant=rdma").unwrap_err().to_string();
    assert!(e.contains("no parameter"), "{e}");
    let e = m("dim-lat:reserve=40000").unwrap_err().to_string();
    assert!(e.contains("0 to 32768"), "{e}");
    let e = m("dim-lat:overtake=yes").unwrap_err().to_string();
    assert!(e.contains("overtake=yes") && e.contains("on or off"), "{e}");
    let e = w("kvm:max_ns=-1").unwrap_err().to_string();
    assert!(e.contains("max_ns=-1"), "{e}");
    let e = w("fixed:ns=2000000000").unwrap_err().to_string();
    assert!(e.contains("1000000000"), "{e}");
    let e = w("fixed:ns=5,us=1").unwrap_err().to_string();
    assert!(e.contains("only one"), "{e}");
    let e = w("").unwrap_err().to_string();
    assert!(e.contains("never"), "{e}");
    let e = w("histogram:forget=-1").unwrap_err().to_string();
    assert!(e.contains("forget=-1") && e.contains("0 (never)"), "{e}");
    let e = w("histogram:forgets=1").unwrap_err().to_string();
    assert!(e.contains("max_ns, wake_ns, cpu_pct, forget"), "{e}");
    let e = w("never:x=1").unwrap_err().to_string();
    assert!(e.contains("no parameter"), "{e}");
    let e = m("budget:us=99999999999999999999999")
        .unwrap_err()
        .to_string();
    assert!(e.contains("microseconds"), "{e}");
}

#[test]
fn table_of_nine_rows_is_refused() {
    let rows = "1:1/1;2:1/1;3:1/1;4:1/1;5:1/1;6:1/1;7:1/1;8:1/1;9:1/1";
    assert!(m(&format!("vic:table={rows}")).is_err());
    let eight = "1:1/1;2:1/1;3:1/1;4:1/1;5:1/1;6:1/1;7:1/1;8:1/1";
    assert!(m(&format!("vic:table={eight}")).is_ok());
}

#[test]
fn contention_specs_parse_round_trip_and_refuse_nonsense() {
    use vmirq_policy::spec::ContentionSpec;
    let c = |s: &str| s.parse::<ContentionSpec>();
    for spec in [
        "off",
        "stop",
        "stop:wait_pct=25",
        "stop:verdict_ns=2000000,hold_ns=5000000,hold_max_ns=500000000",
    ] {
        let parsed = c(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let printed = parsed.to_string();
        assert_eq!(c(&printed), Ok(parsed), "{spec} printed as {printed}");
    }
    assert_eq!(
        c("stop:wait_pct=10").map(|s| s.to_string()),
        Ok("stop".into())
    );
    assert_eq!(ContentionSpec::default().to_string(), "stop");
    assert!(!c("off").expect("off").0.enabled());
    // A cap below the first hold is raised to it: the gate cannot back off below its start.
    let s = c("stop:hold_ns=50000000,hold_max_ns=1000").expect("spec");
    assert_eq!(s.0.hold_max_ns, 50_000_000);
    for bad in [
        "",
        "maybe",
        "stop:wait_pct=0",
        "stop:wait_pct=101",
        "stop:x=1",
        "off:wait_pct=5",
    ] {
        assert!(c(bad).is_err(), "{bad} accepted");
    }
    let msg = c("stop:hold=1").expect_err("unknown key").to_string();
    assert!(
        msg.contains("wait_pct, verdict_ns, hold_ns, hold_max_ns"),
        "{msg}"
    );
}

/// A network transmit queue runs a DIM spec on net_dim's TX table (EQE: 128 us at 128
/// packets at most), the receive queue on the RX table (256 us at 256); `dim-loop`'s loop
/// runs on the receive queue only; other specs are the same on both.
#[test]
fn dim_specs_take_the_tx_table_on_transmit_queues() {
    use vmirq_policy::moderation::Knob;
    for (spec, rx_hold_us, tx_hold_us) in [
        ("dim", 256, 128),
        ("dim-lat", 256, 128),
        ("dim-loop", 256, 128),
        // CQE: a hold is bounded by usecs x frames, largest at 64 us x 64 (RX), x 32 (TX).
        ("dim:mode=cqe", 64 * 64, 64 * 32),
    ] {
        let m: ModerationSpec = spec.parse().expect("valid");
        let (rx, tx) = (m.build(), m.for_tx_queue().build());
        assert_eq!(rx.max_hold_ns(), rx_hold_us * 1_000, "{spec} rx");
        assert_eq!(tx.max_hold_ns(), tx_hold_us * 1_000, "{spec} tx");
        // Both start at net_dim's default profile 1 (8 us).
        for p in [rx, tx] {
            assert!(
                matches!(
                    p.knob(),
                    Knob::Profile {
                        index: 1,
                        usecs: 8,
                        ..
                    }
                ),
                "{spec}"
            );
        }
    }
    // One control loop per port: the receive queue's; the transmit queue runs DIM in path.
    let lp: ModerationSpec = "dim-loop:period_ms=5".parse().expect("valid");
    assert!(lp.build().control_loop().is_some());
    assert!(lp.for_tx_queue().build().control_loop().is_none());
    assert_eq!(lp.for_tx_queue().name(), "dim");
    for spec in ["none", "count:usecs=50,frames=32", "vic", "budget"] {
        let m: ModerationSpec = spec.parse().expect("valid");
        assert_eq!(m.for_tx_queue(), m, "{spec}");
    }
}
