//! `/proc/interrupts` of the guest: interrupt counts per source (summed over CPUs and per
//! CPU), to count the completion interrupts the virtio-blk queues raised (`virtio0-req.0`).

/// One line of `/proc/interrupts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The source's name (last column), e.g. `virtio0-req.0`.
    pub name: String,
    /// Count on each CPU.
    pub per_cpu: Vec<u64>,
}

impl Source {
    /// Count over all CPUs.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.per_cpu.iter().fold(0, |a, &b| a.saturating_add(b))
    }
}

/// Parse the numbered lines of `/proc/interrupts` (`NN: c0 c1 ... chip ... name`).
#[must_use]
pub fn parse(text: &str) -> Vec<Source> {
    text.lines()
        .filter_map(|line| {
            let (irq, rest) = line.split_once(':')?;
            irq.trim().parse::<u32>().ok()?;
            let words: Vec<&str> = rest.split_whitespace().collect();
            let per_cpu: Vec<u64> = words.iter().map_while(|w| w.parse().ok()).collect();
            let name = (*words.last()?).to_owned();
            Some(Source { name, per_cpu })
        })
        .collect()
}

/// Total interrupts of every source whose name starts with `prefix` (e.g. `virtio0-req`).
#[must_use]
pub fn total(text: &str, prefix: &str) -> u64 {
    parse(text)
        .iter()
        .filter(|s| s.name.starts_with(prefix))
        .fold(0, |a, s| a.saturating_add(s.total()))
}

#[cfg(test)]
mod tests {
    const TEXT: &str = "           CPU0       CPU1
  0:         40          0   IO-APIC   2-edge      timer
 24:          0          0   PCI-MSI 16384-edge      virtio0-config
 25:       1000          3   PCI-MSI 16385-edge      virtio0-req.0
 26:          2        700   PCI-MSI 16386-edge      virtio0-req.1
NMI:          0          0   Non-maskable interrupts
";

    #[test]
    fn counts_per_queue_and_per_cpu() {
        let sources = super::parse(TEXT);
        assert_eq!(sources.len(), 4);
        let q1 = sources
            .iter()
            .find(|s| s.name == "virtio0-req.1")
            .expect("q1");
        assert_eq!(q1.per_cpu, vec![2, 700]);
        assert_eq!(super::total(TEXT, "virtio0-req"), 1705);
        assert_eq!(super::total(TEXT, "virtio1-req"), 0);
    }
}
