//! Where a frame goes: fixed port pairs (0 <-> 1, 2 <-> 3, like testpmd's `io` forwarding)
//! or a learning bridge (source MACs learned per port; unknown and group destinations
//! flooded to every other port). Pure logic, no rings: the data path asks [`Switch::route`].

use crate::virtio::{Mac, ETH_HDR_LEN};
use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

/// Most MAC addresses the learning bridge remembers; further addresses are flooded to.
pub const LEARN_TABLE_MAX: usize = 4096;

/// How frames are switched (`--switch pairs|learn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwitchMode {
    /// Port `2k` and `2k + 1` forward to each other.
    #[default]
    Pairs,
    /// Learn source MACs, forward by destination MAC, flood the unknown.
    Learn,
}

impl std::str::FromStr for SwitchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pairs" => Ok(Self::Pairs),
            "learn" => Ok(Self::Learn),
            _ => Err(format!("unknown switch mode {s:?} (pairs|learn)")),
        }
    }
}

/// The destination of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// One port.
    Port(usize),
    /// Every port but the source.
    Flood,
    /// Nowhere (no partner port, or the destination is the source port).
    Drop,
}

/// The switch of one server (shared by every port's data path).
#[derive(Debug)]
pub struct Switch {
    mode: SwitchMode,
    ports: usize,
    table: RwLock<HashMap<Mac, usize>>,
}

impl Switch {
    /// A switch over `ports` ports.
    #[must_use]
    pub fn new(mode: SwitchMode, ports: usize) -> Self {
        Self {
            mode,
            ports,
            table: RwLock::new(HashMap::new()),
        }
    }

    /// Ports of the switch.
    #[must_use]
    pub const fn ports(&self) -> usize {
        self.ports
    }

    /// Route `frame` (Ethernet, at least [`ETH_HDR_LEN`] bytes) arriving from port `from`;
    /// in learning mode its source address is learned first.
    #[must_use]
    #[inline(always)]
    pub fn route(&self, from: usize, frame: &[u8]) -> Route {
        if frame.len() < ETH_HDR_LEN || from >= self.ports {
            return Route::Drop;
        }
        match self.mode {
            SwitchMode::Pairs => {
                let to = from ^ 1;
                if to < self.ports {
                    Route::Port(to)
                } else {
                    Route::Drop
                }
            }
            SwitchMode::Learn => {
                let mut dst = [0u8; 6];
                let mut src = [0u8; 6];
                dst.copy_from_slice(&frame[..6]);
                src.copy_from_slice(&frame[6..12]);
                self.learn(src, from);
                if dst[0] & 1 != 0 {
                    return Route::Flood;
                }
                let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
                match table.get(&dst) {
                    Some(&to) if to == from => Route::Drop,
                    Some(&to) => Route::Port(to),
                    None => Route::Flood,
                }
            }
        }
    }

    fn learn(&self, src: Mac, from: usize) {
        if src[0] & 1 != 0 {
            return; // a group address is never a source
        }
        let known = self
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&src)
            .copied();
        if known == Some(from) {
            return;
        }
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        if known.is_some() || table.len() < LEARN_TABLE_MAX {
            table.insert(src, from);
        }
    }

    /// Forget every address learned on `port` (its frontend went away).
    pub fn forget_port(&self, port: usize) {
        self.table
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, p| *p != port);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: Mac, src: Mac) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f
    }

    const A: Mac = [2, 0, 0, 0, 0, 0xa];
    const B: Mac = [2, 0, 0, 0, 0, 0xb];

    #[test]
    fn pairs_forward_to_the_partner_port() {
        let s = Switch::new(SwitchMode::Pairs, 3);
        assert_eq!(s.route(0, &frame(B, A)), Route::Port(1));
        assert_eq!(s.route(1, &frame(A, B)), Route::Port(0));
        assert_eq!(s.route(2, &frame(A, B)), Route::Drop, "no partner");
        assert_eq!(s.route(5, &frame(A, B)), Route::Drop, "no such port");
        assert_eq!(s.route(0, &[0u8; 13]), Route::Drop, "runt");
    }

    #[test]
    fn learning_floods_the_unknown_then_forwards() {
        let s = Switch::new(SwitchMode::Learn, 3);
        assert_eq!(s.route(0, &frame(B, A)), Route::Flood);
        assert_eq!(s.route(2, &frame(A, B)), Route::Port(0));
        assert_eq!(s.route(0, &frame(B, A)), Route::Port(2));
        assert_eq!(s.route(0, &frame([0xff; 6], A)), Route::Flood, "broadcast");
        assert_eq!(s.route(0, &frame(A, A)), Route::Drop, "hairpin");
        // A moves to port 1.
        assert_eq!(s.route(1, &frame(B, A)), Route::Port(2));
        assert_eq!(s.route(2, &frame(A, B)), Route::Port(1));
        s.forget_port(1);
        assert_eq!(s.route(2, &frame(A, B)), Route::Flood);
    }

    #[test]
    fn group_sources_are_not_learned_and_the_table_is_bounded() {
        let s = Switch::new(SwitchMode::Learn, 2);
        let group = [1, 0, 0, 0, 0, 1];
        let _ = s.route(0, &frame(B, group));
        assert_eq!(s.route(1, &frame(group, B)), Route::Flood);
        for i in 0..LEARN_TABLE_MAX + 10 {
            let b = u32::try_from(i).expect("small").to_be_bytes();
            let _ = s.route(0, &frame(B, [2, 0, b[0], b[1], b[2], b[3]]));
        }
        assert_eq!(s.table.read().unwrap().len(), LEARN_TABLE_MAX);
    }
}
