//! The LAPIC-timer wake loops of `vmirq kvm exits` at chosen timer counts (a diagnostic for
//! the this-host profile): `cargo run --release -p vmirq-kvm --example timer_wake -- 5000 20000`.
use vmirq_kvm::exits::timer::measure_count;
use vmirq_kvm::host::TscClock;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = TscClock::calibrate(std::time::Duration::from_millis(20));
    for arg in std::env::args().skip(1) {
        let count: u32 = arg.parse()?;
        let w = measure_count(count, 2000, clock)?;
        println!("{}", serde_json::to_string(&w)?);
    }
    Ok(())
}
