//! The machine's reference rate: testpmd's virtio-user client through testpmd's vhost peer.
//! `cargo run --release -p vmirq-netload --example loopback -- [SECONDS]`
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds = std::env::args().nth(1).map_or(Ok(5), |s| s.parse())?;
    let dir = std::env::temp_dir().join(format!("vmirq-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let r = vmirq_netload::peer::loopback_reference(&dir, seconds);
    let _ = std::fs::remove_dir_all(&dir);
    let r = r?;
    println!("peer:   {}\nclient: {}", r.peer_cmdline, r.client_cmdline);
    println!(
        "rx pps per report: {:?}\nmedian: {} pps",
        r.pps,
        r.median_pps()
    );
    Ok(())
}
