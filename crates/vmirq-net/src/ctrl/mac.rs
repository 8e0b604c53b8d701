//! VIRTIO_NET_CTRL_MAC (virtio 1.3 §5.1.6.5.2): the MAC filter table and the MAC address.
//!
//! - TABLE_SET (needs VIRTIO_NET_F_CTRL_RX): two `struct virtio_net_ctrl_mac { le32 entries;
//!   u8 macs[entries][6]; }` back to back, unicast first, then multicast. The two entry
//!   counts must account for every byte of the command exactly (checked arithmetic, so an
//!   absurd count cannot overflow): anything else is refused. Lists longer than
//!   [`MAC_TABLE_ENTRIES`] are accepted and reported as overflowing (the device then accepts
//!   every address of that kind, as QEMU does), since a guest with many multicast groups must
//!   not lose its filter setting.
//! - ADDR_SET (needs VIRTIO_NET_F_CTRL_MAC_ADDR): exactly 6 bytes. A multicast address
//!   (low bit of the first octet) cannot be a station address and is refused.

use super::wire::le32;
use super::Reject;

/// Bytes in a MAC address.
pub const MAC_BYTES: usize = 6;
/// Entries per list a device keeps before treating the list as "accept all" (QEMU's
/// `MAC_TABLE_ENTRIES`).
pub const MAC_TABLE_ENTRIES: usize = 64;

/// A validated list of MAC addresses, borrowed from the command bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacList<'a> {
    bytes: &'a [u8],
}

impl<'a> MacList<'a> {
    /// Number of addresses.
    #[must_use]
    pub fn len(&self) -> usize {
        self.bytes.len() / MAC_BYTES
    }

    /// Whether the list is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether the list is longer than a device table holds ([`MAC_TABLE_ENTRIES`]).
    #[must_use]
    pub fn overflows(&self) -> bool {
        self.len() > MAC_TABLE_ENTRIES
    }

    /// The addresses.
    pub fn iter(&self) -> impl Iterator<Item = [u8; MAC_BYTES]> + 'a {
        self.bytes
            .chunks_exact(MAC_BYTES)
            .filter_map(|c| c.try_into().ok())
    }
}

/// Parse one `struct virtio_net_ctrl_mac` at the start of `b`; returns it and the rest.
fn list(b: &[u8]) -> Result<(MacList<'_>, &[u8]), Reject> {
    let entries = le32(b, 0).ok_or(Reject::Short)?;
    let len = usize::try_from(entries)
        .ok()
        .and_then(|n| n.checked_mul(MAC_BYTES))
        .ok_or(Reject::Malformed)?;
    let rest = b.get(4..).ok_or(Reject::Short)?;
    if rest.len() < len {
        return Err(Reject::Malformed);
    }
    let (bytes, rest) = rest.split_at(len);
    Ok((MacList { bytes }, rest))
}

/// TABLE_SET data: (unicast, multicast).
pub(super) fn table(data: &[u8]) -> Result<(MacList<'_>, MacList<'_>), Reject> {
    let (uni, rest) = list(data)?;
    let (multi, rest) = list(rest)?;
    if !rest.is_empty() {
        return Err(Reject::Malformed);
    }
    Ok((uni, multi))
}

/// ADDR_SET data.
pub(super) fn addr(data: &[u8]) -> Result<[u8; MAC_BYTES], Reject> {
    let mac: [u8; MAC_BYTES] = data.try_into().map_err(|_| Reject::Malformed)?;
    if mac[0] & 1 != 0 {
        return Err(Reject::ValueOutOfRange);
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_bytes(uni: &[[u8; 6]], multi: &[[u8; 6]]) -> Vec<u8> {
        let mut b = Vec::new();
        for l in [uni, multi] {
            b.extend_from_slice(&u32::try_from(l.len()).unwrap_or(0).to_le_bytes());
            l.iter().for_each(|m| b.extend_from_slice(m));
        }
        b
    }

    #[test]
    fn table_set_counts_must_cover_the_bytes_exactly() {
        let a = [2, 0, 0, 0, 0, 1];
        let m = [1, 0, 0x5e, 0, 0, 1];
        let b = table_bytes(&[a], &[m, m]);
        let (u, mu) = table(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((u.len(), mu.len()), (1, 2));
        assert_eq!(u.iter().collect::<Vec<_>>(), vec![a]);
        assert!(!mu.overflows());
        // One byte too many or too few.
        let mut long = b.clone();
        long.push(0);
        assert_eq!(table(&long), Err(Reject::Malformed));
        assert_eq!(table(&b[..b.len() - 1]), Err(Reject::Malformed));
        // An absurd count.
        let mut absurd = b.clone();
        absurd[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(table(&absurd), Err(Reject::Malformed));
        // Missing second header.
        assert_eq!(table(&table_bytes(&[a], &[])[..10]), Err(Reject::Short));
        assert_eq!(table(&[]), Err(Reject::Short));
        // Empty lists are fine.
        let empty = table_bytes(&[], &[]);
        let (u, mu) = table(&empty).unwrap_or_else(|e| panic!("{e}"));
        assert!(u.is_empty() && mu.is_empty());
    }

    #[test]
    fn long_lists_are_accepted_as_overflowing() {
        let many = vec![[1, 0, 0x5e, 0, 0, 9]; MAC_TABLE_ENTRIES + 1];
        let b = table_bytes(&[], &many);
        let (_, mu) = table(&b).unwrap_or_else(|e| panic!("{e}"));
        assert!(mu.overflows());
        assert_eq!(mu.iter().count(), MAC_TABLE_ENTRIES + 1);
    }

    #[test]
    fn addr_set_takes_exactly_one_unicast_address() {
        assert_eq!(addr(&[2, 1, 2, 3, 4, 5]), Ok([2, 1, 2, 3, 4, 5]));
        assert_eq!(addr(&[2, 1, 2, 3, 4]), Err(Reject::Malformed));
        assert_eq!(addr(&[2, 1, 2, 3, 4, 5, 6]), Err(Reject::Malformed));
        assert_eq!(addr(&[1, 1, 2, 3, 4, 5]), Err(Reject::ValueOutOfRange));
    }
}
