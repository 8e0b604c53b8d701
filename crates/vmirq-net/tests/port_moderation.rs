//! `--port-moderation N=SPEC` (`ServerConfig::port_moderation`): which configurations the
//! switch refuses at start-up, and which policies each port's queues then follow. The data
//! path's side (a port with its own policy is not held while another port is) is in
//! `tests/netload_clients.rs`.

use vmirq_net::queues::{Datapath, PortModeration};
use vmirq_net::server::{Server, ServerConfig, ServerError};
use vmirq_policy::spec::ModerationSpec;

fn config(sockets: usize, overrides: &[&str]) -> (tempfile::TempDir, ServerConfig) {
    let dir = tempfile::tempdir().expect("dir");
    let paths = (0..sockets)
        .map(|i| dir.path().join(format!("p{i}")))
        .collect();
    let mut c = ServerConfig::new(paths);
    c.policies.moderation = "dim".parse().expect("spec");
    c.port_moderation = overrides
        .iter()
        .map(|o| o.parse().expect("override"))
        .collect();
    (dir, c)
}

fn refused(c: ServerConfig) -> String {
    match Server::new(c) {
        Err(ServerError::Config(msg)) => msg,
        Err(e) => panic!("not a configuration error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn each_port_follows_its_own_moderation_or_the_switch_wide_one() {
    let (_dir, c) = config(3, &["1=count:usecs=20,frames=4", "2=none"]);
    let spec = |s: &str| s.parse::<ModerationSpec>().expect("spec");
    assert_eq!(c.policies_of(0).moderation, spec("dim"));
    assert_eq!(c.policies_of(1).moderation, spec("count:usecs=20,frames=4"));
    assert_eq!(c.policies_of(2).moderation, ModerationSpec::None);
    // The other policies stay the switch's.
    assert_eq!(c.policies_of(1).datapath, c.policies.datapath);
    assert_eq!(c.policies_of(2).rx_low_water, c.policies.rx_low_water);
    assert!(Server::new(c).is_ok());
}

#[test]
fn a_port_out_of_range_a_tap_port_or_a_port_named_twice_is_refused() {
    let (_dir, c) = config(2, &["2=none"]);
    let msg = refused(c);
    assert!(msg.contains("2 socket ports"), "{msg}");
    let (_dir, mut c) = config(2, &["2=none"]);
    c.taps = vec!["vmirq-t0".into()];
    let msg = refused(c);
    assert!(msg.contains("tap port"), "{msg}");
    let (_dir, c) = config(2, &["1=none", "1=dim"]);
    let msg = refused(c);
    assert!(msg.contains("port 1 twice"), "{msg}");
}

#[test]
fn overtaking_on_one_port_is_refused_with_the_pmd_data_path() {
    let (_dir, mut c) = config(2, &["1=dim-lat:overtake=on"]);
    c.policies.datapath = Datapath::Pmd { cpu: None };
    let msg = refused(c);
    assert!(msg.contains("port 1") && msg.contains("per-port"), "{msg}");
    let (_dir, mut c) = config(2, &["1=dim-lat"]);
    c.policies.datapath = Datapath::Pmd { cpu: None };
    assert!(Server::new(c).is_ok());
}

#[test]
fn the_option_parses_port_equals_spec_and_says_what_is_wrong() {
    let o: PortModeration = "3=count:usecs=50,frames=8".parse().expect("parses");
    assert_eq!(o.port, 3);
    assert_eq!(o.to_string(), "3=count:frames=8");
    for bad in ["dim", "x=dim", "-1=dim", "1=nonsense"] {
        let e = bad.parse::<PortModeration>().expect_err(bad);
        assert!(e.contains(bad), "{bad}: {e}");
    }
}
