//! Writes a page with one of each plot to the path given (for looking at the look).
use vmirq_report::{BarChart, LineChart, Page, Scale, Series};
fn main() {
    let out = std::env::args().nth(1).unwrap_or_else(|| "gallery.html".into());
    let mut page = Page::new("vmirq-report gallery");
    page.section("Lines");
    let qd: [f64; 6] = [1.0, 2.0, 4.0, 16.0, 32.0, 128.0];
    let names = ["bare", "qemu-storage-daemon", "qemu-storage-daemon+poll", "vmirq:none", "vmirq:vic+kvm"];
    let line = LineChart::new("IOPS vs queue depth: randread-4k (interrupt)")
        .x("queue depth", Scale::Log)
        .y("IOPS", Scale::Linear)
        .with_series(names.iter().enumerate().map(|(i, n)| {
            Series::new(*n, qd.iter().map(|q| (*q, 1e4 * q.sqrt() * (1.0 + i as f64 * 0.1))).collect())
        }));
    let cdf = LineChart::new("CDF of latency")
        .x("latency (us)", Scale::Log)
        .y("fraction", Scale::Linear)
        .series(Series::new("a", (1..300).map(|i| (f64::from(i).powi(3) / 10.0, f64::from(i) / 300.0)).collect()));
    let empty = LineChart::new("empty");
    page.plots([line.svg(), cdf.svg(), empty.svg()]);
    page.section("Bars");
    let jobs: Vec<String> = ["randread-4k@1", "randread-4k@16", "randread-4k@128", "randrw70-4k@32", "pingpong@1 poll"].iter().map(|s| s.to_string()).collect();
    let mut bars = BarChart::new("Notifications per I/O").values("eventfd signals / I/O").categories(jobs.clone());
    for (i, n) in names.iter().enumerate() {
        bars = bars.series_color(*n, jobs.iter().enumerate().map(|(j, _)| 1.0 / (1.0 + (i * j) as f64)).collect(), i);
    }
    let small = BarChart::new("Wake latency of a halted vCPU").values("us")
        .categories(["irqfd poll 0 us", "irqfd poll 200 us", "ipi poll 0 us", "ipi poll 200 us"])
        .series("p50", vec![12.0, 3.5, 15.0, 4.2]).series("p99", vec![40.0, 9.0, 55.0, 12.0]);
    page.plots([bars.svg(), small.svg()]);
    std::fs::write(&out, page.finish()).expect("write");
}
